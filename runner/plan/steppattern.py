"""--step-pattern: compiled with RE2, whose matching takes time linear in the line's length
(docs/your-training.md "Timing by output lines").

Python's re backtracks: `(a+)+$` over a line of 40 `a`s and a `b` takes longer than any
sweep, and it holds the GIL while it does, so the thread that matched node 0's lines kept
dtrun from handling SIGTERM or Ctrl-C (issue 36). RE2 (google-re2) never backtracks; it has no
backreferences or lookaround, so a pattern that needs them is refused when given. Its matches
become step times here (pattern_steps). Pure.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dtrun.errors import ResultError, UsageError

if TYPE_CHECKING:
    from dtrun.spec.request import BenchSpec

TIME_GROUPS = ("seconds", "ms")
# readback's STEP_SECONDS, by which `dtrun report` reads a result's step times: a microsecond
# (no step that synchronises ranks is faster) to about 11 days
FASTEST_STEP_S, SLOWEST_STEP_S = 1e-6, 1e6
EXAMPLE = "--step-pattern 'step \\d+ took (?P<seconds>[0-9.]+) s'"


def compile_step_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (an ``re2._Regexp``: ``search``, ``groupindex``), with at
    most one of the groups `seconds` and `ms`; UsageError (exit 2) for one RE2 refuses."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the message below says it, once, without RE2's own log line
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        why = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise UsageError(
            f"--step-pattern {_cut(pattern)!r} is not a regular expression RE2 takes",
            why=f"{why} (dtrun matches with RE2, in time linear in a line's length: no "
            "backreferences, no lookaround)",
            fix=f"write it in RE2's syntax (Python's re syntax without those), e.g. {EXAMPLE}",
        ) from None
    if set(TIME_GROUPS) <= set(compiled.groupindex):
        raise UsageError(
            "--step-pattern has both a `seconds` and an `ms` group",
            fix="name the step time's group once: (?P<seconds>...) or (?P<ms>...)",
        )
    return compiled


def step_matcher(pattern: str) -> Callable[[str], dict[str, str | None] | None]:
    r"""Node 0's line -> the groups of ``pattern``'s first match in it, or None. A progress
    bar's state (a line ending "\r", runner/engines/common/scripts.py segments) is matched
    as a line; the same text again right after it is the bar redrawn as it closes (tqdm
    does), not another step."""
    compiled = compile_step_pattern(pattern)
    last_state: str | None = None  # the progress state just matched

    def match(line: str) -> dict[str, str | None] | None:
        nonlocal last_state
        text = line.rstrip("\r")
        found = None if text == last_state else compiled.search(searchable(text))
        last_state = text if found is not None and line.endswith("\r") else None
        return None if found is None else dict(found.groupdict())

    return match


def searchable(line: str) -> str:
    """``line`` as RE2 can take it: RE2 matches UTF-8, and a lone surrogate (an undecodable
    byte kept by surrogateescape) has none, so it becomes '?'."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return line.encode("utf-8", "replace").decode("utf-8")
    return line


def _cut(text: str, most: int = 200) -> str:
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


Matched = list[tuple[float, dict[str, str | None]]]  # --step-pattern: (arrival, groups)


def has_time_group(matched: Matched) -> bool:
    return bool(matched) and ("seconds" in matched[0][1] or "ms" in matched[0][1])


def intervals(moments: list[float]) -> list[float]:
    """The time from each moment to the next: step times from their ends or arrivals."""
    return [later - earlier for earlier, later in itertools.pairwise(moments)]


def pattern_steps(spec: BenchSpec, matched: Matched) -> tuple[list[float], int]:
    """--step-pattern's step times and how many steps it saw: each match's `seconds` or `ms`
    group where the pattern has one, else the time between one match and the next (the first
    match has none, so it is warm-up, as the hook's first step is)."""
    if not matched:
        raise ResultError(
            "--step-pattern matched no line of node 0's output",
            why=f"the pattern {spec.step_pattern!r} found no step in the program's output",
            fix="check it against the node-0.log beside result.json (RE2 syntax; "
            "search, not full match)",
        )
    groups = matched[0][1]
    if "seconds" in groups or "ms" in groups:
        scale, name = (1.0, "seconds") if "seconds" in groups else (1e-3, "ms")
        times = []
        for _, found in matched:
            try:
                value = float(found.get(name) or "")
            except ValueError:
                continue  # the group matched no number on this line
            if math.isfinite(value) and value > 0:
                times.append(value * scale)
        return times[spec.warmup :], len(matched)
    arrivals = [arrival for arrival, _ in matched]
    times = intervals(arrivals)[max(spec.warmup, 1) - 1 :]
    if times and min(times) < FASTEST_STEP_S:  # 0 s divided by zero; the report refuses < 1 us
        raise ResultError(
            f"--step-pattern's lines came {min(times):.1g} s apart: no step's time, but output "
            "held back (buffered) and written at once",
            fix="have the program flush each line (stdbuf -oL for C or C++), or print each "
            "step's time in a (?P<seconds>...) group",
        )
    return times, len(matched)
