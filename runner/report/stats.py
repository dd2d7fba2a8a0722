"""One statistic for every figure, its confidence interval, and the verdict it supports.

The statistic (docs/report.md "The statistic"): a launch's throughput is its global batch's
tokens over its **median** step time, ``X = global_batch · seq_len / median(step times)``
(rank 0's timed steps; results from before they were recorded fall back to the recorded p50).
A node count's throughput combines its launches MLPerf-style (docs/facts.md §7): with three or
more, drop the fastest and the slowest and average the rest.

The interval: a hierarchical bootstrap. Each of ``RESAMPLES`` iterations draws the point's
launches with replacement, then each drawn launch's steps with replacement, and recomputes the
statistic; the 2.5th and 97.5th percentiles of the draws bound the 95% interval. Speedup and
efficiency are ratios of two points drawn independently (point N over the baseline), iteration
by iteration. The generator's seed is a hash of the point's recorded numbers, so the same run
directory gives the same interval, byte for byte, every time it is rebuilt.

The verdict, against a target efficiency: ``scales`` when the whole interval is at or above it,
``loses`` when the whole interval is below it, ``inconclusive`` when it straddles it or when
there is no interval (one launch without per-step times).
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runner.report.results import TrainResult
from runner.spec.request import BenchSpec
from runner.spec.text import plural

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

RESAMPLES = 2000  # bootstrap iterations per point
CONFIDENCE = 0.95  # the interval's coverage
DEFAULT_TARGET = BenchSpec.target_efficiency  # --target-efficiency; older manifests: this
STATISTIC = "median step time"
NO_STEPS = "no per-step times recorded"


class Verdict(StrEnum):
    BASELINE = "baseline"  # the smallest node count: every efficiency is measured against it
    SCALES = "scales"  # the whole interval at or above the target
    LOSES = "loses"  # the whole interval below the target
    INCONCLUSIVE = "inconclusive"  # the interval straddles the target, or there is none


def trimmed_mean(values: Sequence[float]) -> float:
    """MLPerf-style: with three or more repeats drop the fastest and slowest, average the rest."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    if len(ordered) >= 3:
        ordered = ordered[1:-1]
    return statistics.fmean(ordered)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, as the workload computes its p50 and p90."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median_step(result: TrainResult) -> float:
    """A launch's median step time in seconds: from every timed step, else the recorded p50."""
    return percentile(result.step_times, 50) if result.step_times else result.step_time_p50


def launch_tokens_per_s(result: TrainResult) -> float:
    """A launch's throughput at its median step time."""
    return result.global_batch * result.seq_len / median_step(result)


def launch_samples_per_s(result: TrainResult) -> float:
    return result.global_batch / median_step(result)


@dataclass(frozen=True)
class Spread:
    """How much a point's step times vary: each launch's p10, p50 and p90, medians over its
    launches (p10 only where per-step times were recorded)."""

    p10: float | None
    p50: float
    p90: float

    @property
    def relative(self) -> float | None:
        """(p90 - p10) / p50: the width of the middle 80% of steps, as a share of the median."""
        return None if self.p10 is None else (self.p90 - self.p10) / self.p50


def step_spread(results: Sequence[TrainResult]) -> Spread:
    p10s = [percentile(r.step_times, 10) for r in results if r.step_times]
    return Spread(
        p10=statistics.median(p10s) if len(p10s) == len(results) else None,
        p50=statistics.median(median_step(r) for r in results),
        p90=statistics.median(
            percentile(r.step_times, 90) if r.step_times else r.step_time_p90 for r in results
        ),
    )


def _seed(results: Sequence[TrainResult]) -> int:
    """The generator's seed: a hash of what the draws are made from, so rebuilds agree (and of
    the world size, so two points never share draws, even with the same step times)."""
    digest = hashlib.sha256()
    for r in results:
        figures = (r.world_size, r.global_batch, r.seq_len, r.step_time_p50, r.step_times)
        digest.update(repr(figures).encode())
    return int.from_bytes(digest.digest()[:8], "little")


DRAWN_AT_ONCE = 4_000_000  # step indices drawn at a time: about 32 MB, plus their times


def bootstrap_tokens_per_s(
    results: Sequence[TrainResult], resamples: int = RESAMPLES
) -> NDArray[np.float64] | None:
    """``resamples`` draws of one point's throughput (hierarchical: launches, then each drawn
    launch's steps), or None when there is nothing to draw from: a single launch without
    per-step times. A launch without per-step times keeps its recorded p50 in every draw."""
    import numpy as np

    if not results or (len(results) == 1 and not results[0].step_times):
        return None
    rng = np.random.default_rng(_seed(results))
    count = len(results)
    picks = rng.integers(0, count, size=(resamples, count))
    draws = np.empty((resamples, count))
    for slot in range(count):  # each slot of a draw gets its own resample of its launch
        for index, result in enumerate(results):
            rows = np.flatnonzero(picks[:, slot] == index)
            if rows.size == 0:
                continue
            steps = np.asarray(result.step_times, dtype=np.float64)
            tokens = result.global_batch * result.seq_len
            if not steps.size:
                draws[rows, slot] = tokens / result.step_time_p50
                continue
            # In chunks, so memory stays bounded at any --steps; one chunk (the same draws as
            # unchunked) for every run of up to DRAWN_AT_ONCE / RESAMPLES steps a launch.
            per_chunk = max(1, DRAWN_AT_ONCE // steps.size)
            for start in range(0, rows.size, per_chunk):
                part = rows[start : start + per_chunk]
                chosen = rng.integers(0, steps.size, size=(part.size, steps.size))
                draws[part, slot] = tokens / np.median(steps[chosen], axis=1)
    draws.sort(axis=1)
    if count >= 3:  # the same MLPerf-style trimming as the figure itself
        draws = draws[:, 1:-1]
    trimmed: NDArray[np.float64] = draws.mean(axis=1)
    return trimmed


def interval(draws: NDArray[np.float64]) -> tuple[float, float]:
    """The percentile interval of ``CONFIDENCE`` coverage."""
    import numpy as np

    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def intervals(
    scale: float, draws: NDArray[np.float64] | None, base: NDArray[np.float64] | None
) -> dict[str, Any]:
    """A point's 95% intervals of throughput, speedup and efficiency, as ScalingRow's fields,
    from its bootstrap draws and the baseline's, drawn independently (``scale``: its node count
    over the baseline's; 1 is the baseline itself). Absent: no interval."""
    out: dict[str, Any] = {}
    if draws is not None:
        out["tokens_per_s_low"], out["tokens_per_s_high"] = interval(draws)
    if scale == 1:  # the baseline: 1x and 100% by definition
        out |= dict.fromkeys(("speedup_low", "speedup_high"), 1.0)
        out |= dict.fromkeys(("efficiency_low", "efficiency_high"), 1.0)
    elif draws is not None and base is not None:
        low, high = interval(draws / base)
        out |= {"speedup_low": low, "speedup_high": high}
        out |= {"efficiency_low": low / scale, "efficiency_high": high / scale}
    return out


def judge(low: float | None, high: float | None, target: float) -> Verdict:
    """A point's verdict from its efficiency interval (None: no interval)."""
    if low is None or high is None:
        return Verdict.INCONCLUSIVE
    if low >= target:
        return Verdict.SCALES
    if high < target:
        return Verdict.LOSES
    return Verdict.INCONCLUSIVE


def reason(
    verdict: Verdict,
    efficiency: float,
    bounds: tuple[float | None, float | None],
    target: float,
    noise: str,
) -> str:
    """The verdict's explanation, as the report and the console print it after the verdict.
    ``noise`` says how much the point's and the baseline's figures vary (see ``noise_text``)."""
    low, high = bounds
    if verdict is Verdict.BASELINE:
        return "every efficiency is measured against it"
    figure = f"efficiency {efficiency:.0%}"
    if low is None or high is None:
        return (
            f"{figure}, no interval: {NO_STEPS} and one launch; to decide, rerun with this "
            "dtrun (it records every step) or with --repeat 2 or more"
        )
    ci = f"{CONFIDENCE:.0%} CI {low * 100:.0f}-{high * 100:.0f}%"
    goal = f"the {target * 100:g}% target"
    if verdict is Verdict.SCALES:
        return f"{figure}, {ci}, at or above {goal}"
    if verdict is Verdict.LOSES:
        return f"{figure}, {ci}, below {goal}"
    return (
        f"{figure}, but the {ci} straddles {goal}; to decide: more --steps, more --repeat, "
        f"or a quieter machine ({noise})"
    )


def noise_text(points: Sequence[tuple[int, float | None, float | None]]) -> str:
    """How much the figures a verdict rests on vary, per node count: (nodes, the step times'
    p10-p90 width and the launches' min-max width, each as a share of the median or the
    point's throughput; None where not recorded or with one launch)."""
    parts = []
    for nodes, steps, launches in points:
        said = []
        if steps is not None:
            said.append(f"step times p10-p90 span {steps:.0%} of the median")
        if launches is not None:
            said.append(f"launches span {launches:.0%} of their throughput")
        if said:
            parts.append(f"at {plural(nodes, 'node')} {' and '.join(said)}")
    return "; ".join(parts) if parts else "no spread recorded"
