"""`dtrun bench --until-decided`: launch at each node count until its efficiency interval
decides against the target, or until the maximum of launches (docs/report.md "Stopping when
decided").

Looking at a growing sample after every launch and stopping at the first interval that clears
the target inflates the error rate of a plain 95% interval: each look is another chance of a
wrong verdict. The rule here spends the 5% error over the planned looks: with at most ``K``
launches a point is looked at after 2, 3, ..., K launches, ``L = K - 1`` looks, and look ``j``
(after ``j + 1`` launches) uses a ``1 - a_j`` interval with ``a_j = 0.05 · j / (L(L+1)/2)``, a
share rising with the look (K = 6: 0.33%, 0.67%, 1%, 1.33%, 1.67%). The shares add up to 5%,
so by the union (Bonferroni) bound the chance that any look's interval misses the truth, and so
of any wrong verdict however the sweep stops, is at most 5% (alpha spending: Lan and DeMets
1983, "Discrete sequential boundaries for clinical trials", Biometrika 70(3); Jennison and
Turnbull 2000, "Group Sequential Methods with Applications to Clinical Trials", ch. 7). Early
looks get the smaller shares: at two launches the t-interval has few degrees of freedom and is
wide whatever its level, and a share spent there buys few verdicts
(benchmarks/interval_coverage.py --until-decided measured rising shares against even ones).

Launches run round by round (every point's first launch, then every point's second, ...), the
baseline in every round while any point still runs, so that a point's look after ``k`` launches
compares them with the baseline's first ``k``. A look at ``k`` takes every node count's first
``k`` launches, only once every node count still running has ``k``: the sweep decides while it
runs and the report replays the same looks from the recorded results, so both say the same.

The looks count only quiet launches: one timed in steal or other load
(runner/report/launchnoise.py ``disturbed``) is left out and the count launches again, within
--max-launches rounds; a count that has the next look's quiet launches waits for those that
do not. A point whose remaining rounds can no longer reach its next look stops there
(``Stopped.OUT_OF_REACH``). Sweeps recorded before launches were left out replay as they ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from dtrun.record.readback import describe
from dtrun.report.launchnoise import disturbed, kept_launches
from dtrun.report.metrics import ScalingRow, scaling_rows
from dtrun.report.results import TrainResult
from dtrun.report.stats import CONFIDENCE, DEFAULT_TARGET, Verdict, confidence_text
from dtrun.spec.bounds import bound_of
from dtrun.spec.request import MIN_LAUNCHES, BenchSpec, leaves_out


class Stopped(StrEnum):
    DECIDED = "decided"  # the interval cleared the target at a look
    MAXIMUM = "maximum"  # --max-launches reached, undecided
    # launches left out for noise left too few rounds for the next look
    OUT_OF_REACH = "out of reach"
    ENDED = "ended"  # the sweep ended (failed, interrupted) before either
    BASELINE = "baseline"  # the smallest node count: runs while any point runs


# How the report says why a point stopped, after its launches
STOPPED_TEXT = {
    Stopped.DECIDED.value: "stopped: decided",
    Stopped.MAXIMUM.value: "stopped: --max-launches reached undecided",
    Stopped.OUT_OF_REACH.value: "stopped undecided: launches in noise (its own or the "
    "baseline's) left its next look out of --max-launches' reach",
    Stopped.ENDED.value: "the sweep ended before it decided",
    Stopped.BASELINE.value: "the baseline runs while any point runs",
}


def until_decided(bench: Mapping[str, Any]) -> dict[str, int | str] | None:
    """A manifest's ``bench``: with --until-decided the least and most launches, the looks
    and the first and last look's confidence; None for a fixed --repeat."""
    if not bench.get("until_decided"):
        return None
    most = most_launches(bench)
    return {
        "least": MIN_LAUNCHES,
        "most": most,
        "looks": looks(most),
        "first_text": confidence_text(look_confidence(most, MIN_LAUNCHES)),
        "last_text": confidence_text(look_confidence(most, most)),
    }


def most_launches(bench: Mapping[str, Any]) -> int:
    """A manifest's --max-launches; a manifest written before it had a field of its own keeps
    it in ``repeat`` (runner/record/resume.py reads it so too)."""
    return int(bench.get("max_launches", bench["repeat"]))


def recorded_most(manifest: Any, where: str) -> str | None:
    """A shape (runner/record/readback.py) of a checked manifest: until decided, its most
    launches a node count in --max-launches' range (0 or 1 divided by zero)."""
    bench = manifest["bench"]
    if bench.get("until_decided") is not True:
        return None
    key = "max_launches" if "max_launches" in bench else "repeat"
    bound = bound_of(BenchSpec, "max_launches")
    most = bench.get(key)  # an allreduce manifest needs no repeat
    if type(most) is int and bound.holds(most):
        return None
    return f"'bench.{key}' is {describe(most)}: until decided, {bound.flag} is {bound.rule}"


def looks(max_launches: int) -> int:
    """How many times a point's interval is looked at: after 2, 3, ..., ``max_launches``."""
    return max_launches - MIN_LAUNCHES + 1


def look_confidence(max_launches: int, launches: int) -> float:
    """The confidence of the look after ``launches`` launches: the 5% error spent over the
    looks in shares rising with the look, 1, 2, ..., L parts of L(L+1)/2."""
    count = looks(max_launches)
    look = min(max(launches, MIN_LAUNCHES), max_launches) - MIN_LAUNCHES + 1
    return 1 - (1 - CONFIDENCE) * look / (count * (count + 1) / 2)


@dataclass(frozen=True)
class Stop:
    """Where a node count stopped: after how many launches, and why."""

    launches: int
    why: Stopped


def _first(results: Mapping[int, Sequence[TrainResult]], k: int) -> dict[int, list[TrainResult]]:
    return {n: list(rs[:k]) for n, rs in results.items() if rs}


def quiet_results(
    results: Mapping[int, Sequence[TrainResult]], leave_out: bool = True
) -> dict[int, list[TrainResult]]:
    """Each node count's launches less those timed in steal or other load, in order (with
    ``leave_out`` false, as a sweep recorded before launches were left out: all of them)."""
    return {
        n: [r for r in rs if not (leave_out and disturbed(r.noise))] for n, rs in results.items()
    }


def kept_results(
    results: Mapping[int, Sequence[TrainResult]], leave_out: bool = True
) -> dict[int, list[TrainResult]]:
    """Each node count's launches its row is built from (runner/report/launchnoise.py
    ``kept_launches``: the quiet ones where two or more were, else all)."""
    return {
        n: [rs[k] for k in kept_launches([r.noise for r in rs], leave_out)]
        for n, rs in results.items()
    }


@dataclass(frozen=True)
class Looks:
    """What the looks on a sweep's results came to: each point that stopped, where and why, its
    row at that look (none where it never had one), and the look that comes next."""

    stops: dict[int, Stop]
    rows: dict[int, ScalingRow]
    next_look: int  # the quiet launches a count needs for the next look


def looked(
    results: Mapping[int, Sequence[TrainResult]],
    max_launches: int,
    target: float = DEFAULT_TARGET,
    rounds_left: int | Mapping[int, int] | None = None,
    leave_out: bool = True,
) -> Looks:
    """The looks the sweep took on ``results`` (each node count's launches in order, disturbed
    ones included). ``rounds_left``: the launches each count (or every count) can still take
    (None: the sweep ended before its rounds did); a point whose quiet launches, or the
    baseline's, can no longer reach the next look stops there (Stopped.OUT_OF_REACH)."""
    counts = sorted(n for n, rs in results.items() if rs)
    if not counts:
        return Looks({}, {}, MIN_LAUNCHES)
    quiet = quiet_results(results, leave_out)
    left = max_launches if rounds_left is None else rounds_left
    reach = {
        n: len(quiet[n]) + (left if isinstance(left, int) else left.get(n, max_launches))
        for n in counts
    }
    points = counts[1:]
    stops: dict[int, Stop] = {}
    rows: dict[int, ScalingRow] = {}
    k = MIN_LAUNCHES
    while k <= max_launches:
        for nodes in [n for n in points if n not in stops]:
            if min(reach[nodes], reach[counts[0]]) < k:  # no look at k can come
                stops[nodes] = Stop(
                    k - 1 if nodes in rows else len(quiet[nodes]), Stopped.OUT_OF_REACH
                )
        running = [n for n in points if n not in stops]
        if not running or any(len(quiet[n]) < k for n in [counts[0], *running]):
            break  # a look needs every node count still running at k quiet launches
        at = look_confidence(max_launches, k)
        now = {row.nodes: row for row in _rows(_first(quiet, k), target, at)}
        for nodes in running:
            row = rows[nodes] = now[nodes]
            if row.verdict in (Verdict.SCALES, Verdict.LOSES):
                stops[nodes] = Stop(k, Stopped.DECIDED)
            elif k == max_launches:
                stops[nodes] = Stop(k, Stopped.MAXIMUM)
        k += 1
    return Looks(stops, {n: row for n, row in rows.items() if n in stops}, k)


def replay(
    results: Mapping[int, Sequence[TrainResult]],
    max_launches: int,
    target: float = DEFAULT_TARGET,
    rounds_left: int | Mapping[int, int] | None = None,
    leave_out: bool = True,
) -> tuple[dict[int, Stop], dict[int, ScalingRow]]:
    """``looked``'s stops and rows."""
    looks_ = looked(results, max_launches, target, rounds_left, leave_out)
    return looks_.stops, looks_.rows


def runs_next(
    results: Mapping[int, Sequence[TrainResult]],
    nodes: int,
    round_: int,
    max_launches: int,
    target: float = DEFAULT_TARGET,
    leave_out: bool = True,
) -> bool:
    """Whether node count ``nodes`` launches in round ``round_`` (from 0), on the results so far:
    never past the maximum; a point until it stops, the baseline while any point runs; and
    only while it has fewer quiet launches than the next look needs (one that has them waits
    for the counts whose launches were left out, so that a point stops with the launches of
    the look it stopped at)."""
    if round_ >= max_launches:
        return False
    # the launches each count can still take: the smaller ones have had this round's turn
    left = {n: max_launches - round_ - (n < nodes) for n in results}
    looks_ = looked(results, max_launches, target, left, leave_out)
    counts = sorted(results)
    running = [n for n in counts[1:] if n not in looks_.stops]
    if not running or (nodes != counts[0] and nodes not in running):
        return False
    return len(quiet_results(results, leave_out).get(nodes, ())) < looks_.next_look


def sequential_rows(
    results: Mapping[int, Sequence[TrainResult]],
    max_launches: int,
    target: float = DEFAULT_TARGET,
    rounds_left: int | Mapping[int, int] | None = None,
    leave_out: bool = True,
) -> tuple[ScalingRow, ...]:
    """The report's rows of an --until-decided sweep: each point as of the look it stopped at
    (its verdict is that look's), the baseline and any point that never stopped (the sweep
    ended first) or never had a look with all their kept launches (``kept_results``), each
    interval at the confidence of the look its launches make (the baseline's: the last
    look's)."""
    kept = kept_results(results, leave_out)
    whole = _rows(kept, target, look_confidence(max_launches, max_launches))
    if not whole:
        return whole
    stops, at_stop = replay(results, max_launches, target, rounds_left, leave_out)
    rows = [replace(whole[0], stopped=Stopped.BASELINE.value)]
    for row in whole[1:]:
        stop = stops.get(row.nodes)
        if stop is None or row.nodes not in at_stop:
            at = look_confidence(max_launches, row.launches_n)
            ended = {r.nodes: r for r in _rows(kept, target, at)}[row.nodes]
            why = Stopped.ENDED if stop is None else stop.why
            rows.append(replace(ended, stopped=why.value))
            continue
        rows.append(replace(at_stop[row.nodes], stopped=stop.why.value))
    return tuple(rows)


def rounds_left(bench: Mapping[str, Any], runs: Mapping[str, Any]) -> int | dict[int, int] | None:
    """The launches each node count could still take when an --until-decided sweep ended, as
    the sweep saw them (runs.json's runs' ``repeat`` is the round). Complete: the rounds left
    after its last launch. Stopped (interrupted, failed) after a launch of round r at N nodes
    ended: N and fewer had round r's turn, more did not (``runs_next``'s count), so the points
    the sweep had stopped out of reach stay stopped there. None: no launch ended."""
    most, recorded = most_launches(bench), runs.get("runs", ())
    if runs.get("status") == "complete":
        taken = [run["repeat"] for run in recorded if type(run.get("repeat")) is int]
        return max(most - (max(taken, default=-1) + 1), 0)
    ended = [
        (run["repeat"], run["nodes"])
        for run in recorded
        if type(run.get("repeat")) is int
        and type(run.get("nodes")) is int
        and run.get("status") != "interrupted"  # stopped under way: its turn was not taken
    ]
    if not ended:
        return None
    round_, nodes = max(ended)
    counts = {run["nodes"] for run in recorded if type(run.get("nodes")) is int}
    return {n: max(most - round_ - (n <= nodes), 0) for n in counts}


def _rows(
    results: Mapping[int, Sequence[TrainResult]], target: float, confidence: float
) -> tuple[ScalingRow, ...]:
    """The rows at one look; an undecided point says how many launches would decide it, as
    --max-launches: a sweep of at most k launches judges its last look at look_confidence(k, k)."""
    return scaling_rows(
        results, target, confidence, level=lambda k: look_confidence(k, k), flag="--max-launches"
    )


def used_launches(
    results: Mapping[int, Sequence[TrainResult]],
    bench: Mapping[str, Any],
    runs: Mapping[str, Any] | None = None,
) -> dict[int, int]:
    """How many of each count's launches (a prefix) its row and its noise stand on: all, but
    for a point stopped at a look, those up to that look's last quiet launch and the launches
    in noise right after it (left out: runner/report/launchnoise.py); a quiet one after was
    taken for a look that never came (the baseline's launches were in noise) and is unused."""
    used = {n: len(rs) for n, rs in results.items()}
    if not until_decided(bench):
        return used
    leave_out = leaves_out(bench)
    target = float(bench.get("target_efficiency", DEFAULT_TARGET))
    left = rounds_left(bench, runs or {})
    stops, rows = replay(results, most_launches(bench), target, left, leave_out)
    for nodes, stop in stops.items():
        quiet = 0
        for index, result in enumerate(results[nodes] if nodes in rows else ()):
            if quiet == stop.launches and not (leave_out and disturbed(result.noise)):
                break
            quiet += not (leave_out and disturbed(result.noise))
            used[nodes] = index + 1
    return used


def judged_rows(
    results: Mapping[int, Sequence[TrainResult]],
    bench: Mapping[str, Any],
    runs: Mapping[str, Any] | None = None,
) -> tuple[ScalingRow, ...]:
    """The report's rows for a manifest's ``bench`` (and runs.json's ``runs``): every point
    judged at 95% after its kept launches (``kept_results``), or with --until-decided as of
    the look it stopped at."""
    target = float(bench.get("target_efficiency", DEFAULT_TARGET))
    leave_out = leaves_out(bench)
    if until_decided(bench):
        left = rounds_left(bench, runs or {})
        return sequential_rows(results, most_launches(bench), target, left, leave_out)
    return scaling_rows(kept_results(results, leave_out), target)
