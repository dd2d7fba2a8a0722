"""--step-pattern: compiled with RE2, whose matching takes time linear in the line's length
(docs/your-training.md "Timing by output lines").

Python's re backtracks: `(a+)+$` over a line of 40 `a`s and a `b` takes longer than any
sweep, and it holds the GIL while it does, so the thread that matched node 0's lines kept
dtrun from handling SIGTERM or Ctrl-C (issue 36). RE2 (google-re2) never backtracks; it has no
backreferences or lookaround, so a pattern that needs them is refused when given. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dtrun.errors import UsageError

TIME_GROUPS = ("seconds", "ms")
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
