"""One statistic for every figure, its confidence interval, and the verdict it supports.

The statistic (docs/report.md "The statistic"): a launch's throughput is its global batch's
tokens over its **median** step time, ``X = global_batch · seq_len / median(step times)``
(rank 0's timed steps; results from before they were recorded fall back to the recorded p50).
A node count's throughput combines its launches MLPerf-style (docs/facts.md §7): with three or
more, drop the fastest and the slowest and average the rest.

The interval: a t-interval on the log scale, from launches (docs/report.md "Intervals and
verdicts"). Each launch gives one figure, ``y = ln X``; a point's interval is ``exp(mean(y) ±
t·s/sqrt(k))`` for its ``k`` launches, and its speedup's is ``exp(mean(y_N) - mean(y_0) ±
t·s·sqrt(1/k_N + 1/k_0))``, efficiency the speedup's over the node ratio. ``s`` is the
launch-to-launch standard deviation of ``y`` pooled over the sweep's node counts, ``t`` Student's
97.5% quantile at the pooled degrees of freedom (sum of launches less one per node count): with
few clusters (launches) the t(G-1) critical values hold the coverage where a bootstrap over the
launches cannot (Cameron, Gelbach and Miller 2008; Hesterberg 2015). A launch's median already
holds its steps' noise, so the steps are not resampled again. One launch at a point, or at the
baseline, shows nothing of how much a launch moves: no interval, and the verdict is
inconclusive. No random draws: a rebuilt report gives the same bytes.

The verdict, against a target efficiency: ``scales`` when the whole interval is at or above it,
``loses`` when the whole interval is below it, ``inconclusive`` when it straddles it or when
there is no interval (one launch at the point or at the baseline).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from dtrun.predict.model import SPREAD_SDS
from dtrun.report.results import TrainResult
from dtrun.spec.request import MIN_LAUNCHES, BenchSpec
from dtrun.spec.text import percent, percent_range, plural

CONFIDENCE = 0.95  # the interval's coverage
DEFAULT_TARGET = BenchSpec.target_efficiency  # --target-efficiency; older manifests: this
STATISTIC = "median step time"
NO_STEPS = "no per-step times recorded"
ONE_LAUNCH = "one launch cannot show the launch-to-launch spread"
# every launch at every node count alike: only a coarse clock does that, and a zero-width
# interval would decide on a spread nothing measured
NO_SPREAD = "every launch ran at the same speed, so nothing measured how much a launch moves"
METHOD = "t-interval on launches' log tokens/s, launch-to-launch variance pooled over node counts"


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


def log_launches(results: Sequence[TrainResult]) -> list[float]:
    """Each launch's natural log of tokens/s at its median step time: the interval's data."""
    return [math.log(launch_tokens_per_s(r)) for r in results]


@dataclass(frozen=True)
class LaunchNoise:
    """The launch-to-launch spread of log throughput, pooled over a sweep's node counts: the
    standard deviation ``sigma`` of one launch's log tokens/s around its node count's mean, and
    its degrees of freedom ``df`` (launches less one per node count, over every node count with
    two or more). None and 0 when no node count has a second launch."""

    sigma: float | None
    df: int

    def critical(self, confidence: float = CONFIDENCE) -> float:
        """Student's t quantile for a two-sided ``confidence`` interval at ``df``."""
        from scipy.special import stdtrit

        return float(stdtrit(self.df, 1 - (1 - confidence) / 2))


def pooled_launch_noise(points: Sequence[Sequence[TrainResult]]) -> LaunchNoise:
    """The pooled variance of the per-launch log throughputs: sum over node counts of the
    squared deviations from the count's mean, over sum of (launches - 1)."""
    squares, df = 0.0, 0
    for results in points:
        logs = log_launches(results)
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        squares += sum((y - mean) ** 2 for y in logs)
        df += len(logs) - 1
    return LaunchNoise(math.sqrt(squares / df) if df else None, df)


def intervals(
    scale: float,
    results: Sequence[TrainResult],
    base: Sequence[TrainResult],
    noise: LaunchNoise,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """A point's ``confidence`` (95%) intervals of throughput, speedup and efficiency, as
    ScalingRow's fields: t-intervals on the mean of its launches' log tokens/s, and on its
    difference from the baseline's, with the sweep's pooled launch-to-launch ``noise``
    (``scale``: its node count over the baseline's; 1 is the baseline itself). Absent: no
    interval, the point or the baseline having one launch (nothing shows how much a launch
    moves), no node count two, or no spread among them (NO_SPREAD)."""
    out: dict[str, Any] = {}
    if scale == 1:  # the baseline: 1x and 100% by definition
        out |= dict.fromkeys(("speedup_low", "speedup_high"), 1.0)
        out |= dict.fromkeys(("efficiency_low", "efficiency_high"), 1.0)
    if not noise.sigma or len(results) < 2:  # None, or 0: NO_SPREAD
        return out
    t = noise.critical(confidence)
    mean = statistics.fmean(log_launches(results))
    half = t * noise.sigma / math.sqrt(len(results))
    out["tokens_per_s_low"], out["tokens_per_s_high"] = math.exp(mean - half), math.exp(mean + half)
    if scale != 1 and len(base) >= 2:
        difference = mean - statistics.fmean(log_launches(base))
        half = t * noise.sigma * math.sqrt(1 / len(results) + 1 / len(base))
        low, high = math.exp(difference - half), math.exp(difference + half)
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


# The most launches a point the advice of an undecided verdict names: past this, more launches
# are no practical way to decide at the spread measured
MOST_ADVISED = 100
ADVICE_POWER = 0.8  # the chance the advised launches decide, if the spread and centre hold
# the standard error of a median of n over that of a mean (sqrt(pi / 2)): the steps' own share
# of a launch's spread (``steps_dominate``)
MEDIAN_SE = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class Advice:
    """What would decide an undecided point: ``launches`` a node count (None: more than
    MOST_ADVISED), ``steps`` whether the steps' own noise is most of the launches' spread (then
    more --steps narrows the interval too), ``flag`` the option that sets the launches."""

    launches: int | None
    steps: bool
    flag: str = "--repeat"

    def text(self, noise: str) -> str:
        steps = ", more --steps" if self.steps else ""
        if self.launches is None:
            return (
                f"to decide: more than {MOST_ADVISED} launches a point at this spread (the "
                f"efficiency is that near the target){steps}, or a quieter machine ({noise})"
            )
        return (
            f"to decide: about {self.launches} launches a point at this spread "
            f"({self.flag} {self.launches}){steps}, or a quieter machine ({noise})"
        )


def launches_to_decide(
    bounds: tuple[float, float],
    target: float,
    sigma: float,
    counts: int,
    level: Callable[[int], float],
    least: int = MIN_LAUNCHES,
) -> int | None:
    """The fewest launches at every node count, ``least`` at the fewest (more than the point
    has: it is undecided with those), whose interval would clear ``target`` with
    ADVICE_POWER probability if the efficiency is the interval's centre and the launches keep
    spreading by ``sigma`` (log tokens/s): the usual sample size of a two-sample comparison,
    (t + z)·sigma·sqrt(2/k) below the distance to the target (Cohen 1988, "Statistical Power
    Analysis for the Behavioral Sciences", ch. 2), t at the confidence ``level(k)`` a sweep of
    k launches judges at, with ``counts`` node counts pooling k - 1 degrees of freedom each,
    z the normal's ADVICE_POWER quantile. None: more than MOST_ADVISED. An estimate, as a
    sample size from a pilot's spread is."""
    centre = (math.log(bounds[0]) + math.log(bounds[1])) / 2
    distance = abs(centre - math.log(target))
    z = NormalDist().inv_cdf(ADVICE_POWER)
    for k in range(max(MIN_LAUNCHES, least), MOST_ADVISED + 1):
        t = LaunchNoise(sigma, counts * (k - 1)).critical(level(k))
        if (t + z) * sigma * math.sqrt(2 / k) < distance:
            return k
    return None


def steps_dominate(results: Sequence[Sequence[TrainResult]], sigma: float) -> bool:
    """Whether the steps' own noise is most of the launches' spread: each launch's median
    of n steps varies by about sqrt(pi/2) x sd / sqrt(n) from its steps alone (sd from the p10-p90
    width, as of a normal). Slow drift of the machine within and between launches is the rest,
    and more steps do not average it away (docs/report.md, "Intervals and verdicts")."""
    shares = []
    for launches in results:
        for result in launches:
            if len(result.step_times) < 2:
                continue
            median = percentile(result.step_times, 50)
            width = percentile(result.step_times, 90) - percentile(result.step_times, 10)
            sd = width / median / SPREAD_SDS
            shares.append((MEDIAN_SE * sd) ** 2 / len(result.step_times))
    return bool(shares) and sigma > 0 and statistics.fmean(shares) >= sigma**2 / 2


def reason(
    verdict: Verdict,
    efficiency: float,
    bounds: tuple[float | None, float | None],
    target: float,
    noise: str,
    single: str = "",
    confidence: float = CONFIDENCE,
    advice: Advice | None = None,
) -> str:
    """The verdict's explanation, as the report and the console print it after the verdict.
    ``noise`` says how much the point's and the baseline's figures vary (see ``noise_text``);
    ``single`` where there was one launch ("here", "at the baseline"), if anywhere; ``advice``
    what would decide an undecided point."""
    low, high = bounds
    if verdict is Verdict.BASELINE:
        return "every efficiency is measured against it"
    figure = f"efficiency {percent(efficiency, target)}"
    if low is None or high is None:
        if not single:  # two launches or more at both: the launches never differed
            return f"{figure}, no interval: {NO_SPREAD}; to decide, time the steps more finely"
        return (
            f"{figure}, no interval: one launch {single or 'a point'}; {ONE_LAUNCH} (how "
            "much a whole launch's speed moves, which its own steps do not show); to decide, "
            "--repeat 2 or more"
        )
    ci = f"{confidence_text(confidence)} CI {percent_range(low, high, target)}"
    goal = f"the {target * 100:g}% target"
    if verdict is Verdict.SCALES:
        return f"{figure}, {ci}, at or above {goal}"
    if verdict is Verdict.LOSES:
        return f"{figure}, {ci}, below {goal}"
    if advice is None:
        return (
            f"{figure}, but the {ci} straddles {goal}; to decide: more --repeat, or a quieter "
            f"machine ({noise})"
        )
    return f"{figure}, but the {ci} straddles {goal}; {advice.text(noise)}"


def confidence_text(confidence: float) -> str:
    """95% -> "95%", 98.75% -> "98.75%": as many decimals as the level has."""
    return f"{confidence * 100:.4g}%"


def interval_level(confidences: Sequence[float]) -> str:
    """What a table or plot of several points calls their intervals: "95%" where every one is
    at one level, else "per-look" (--until-decided: each at the level of the look it stopped
    at, 99.67% to 98.33% with 6 launches at most)."""
    levels = set(confidences)
    return confidence_text(levels.pop()) if len(levels) == 1 else "per-look"


def noise_text(points: Sequence[tuple[int, float | None, float | None]]) -> str:
    """How much the figures a verdict rests on vary, per node count: (nodes, the step times'
    p10-p90 width and the launches' min-max width, each as a share of the median or the
    point's throughput; None where not recorded or with one launch)."""
    parts = []
    for nodes, steps, launches in points:
        said = []
        if steps is not None:
            said.append(f"steps {steps:.0%}")
        if launches is not None:
            said.append(f"launches {launches:.0%}")
        if said:
            parts.append(f"{plural(nodes, 'node')}: {', '.join(said)}")
    if not parts:
        return "no spread recorded"
    return "spread, step times p10-p90 over the median, launches min-max: " + "; ".join(parts)
