"""`dtrun predict`: a Description (runner/predict/inputs.py) and node counts -> each node count's
predicted step time, throughput, efficiency with its range, the verdict it expects against the
target, what running it would cost, and every assumption made (docs/prediction.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dtrun.errors import UsageError
from dtrun.predict.inputs import STRATEGIES, Description
from dtrun.predict.model import (
    Comm,
    Forecast,
    Measured,
    Pipeline,
    Setting,
    efficiency,
    forecast,
)
from dtrun.predict.prior import PRIORS, RANGE_Z
from dtrun.spec.text import percent_range, plural

PREDICT_SCHEMA = "dtrun.predict/1"
# How the model did on the held-out sets of docs/prediction.md (holdout2 to holdout11): within
# 5 points of the measured efficiency in this many, the measured value inside the range in this
# many, of this many (tests/unit/test_prediction_replay.py holds them to its replay)
CHECKED_WITHIN_5, CHECKED_INSIDE, CHECKED_OF = 66, 91, 110
CANNOT_TELL = "cannot tell"
GIVEN = "from the points as given"  # a description's: its step times or throughputs


STEPS_COSTED = 1000  # a description has no launches: its cost is of this many steps


@dataclass(frozen=True)
class Cost:
    """What running a predicted point would cost: from a run, the largest measured point's
    launches again (as many, each as long, with the predicted step time in place of the
    measured one); from a description, STEPS_COSTED steps at the predicted step time."""

    what: str  # "2 launches like the 2-node point's" or "1,000 steps"
    launches: int
    launch_s: float  # each launch
    node_hours: float
    usd: float | None  # None: no price


@dataclass(frozen=True)
class PredictedPoint:
    nodes: int
    step_time_s: float | None  # None where the points were throughputs only
    throughput: float | None  # in the points' unit; None where they were step times only
    efficiency: float | None
    efficiency_low: float | None
    efficiency_high: float | None
    verdict: str  # scales / loses / cannot tell
    why: str
    cost: Cost | None = None


@dataclass(frozen=True)
class Prediction:
    source: str
    mode: str
    target_efficiency: float
    measured: tuple[tuple[int, float], ...]  # (nodes, efficiency) the prediction starts from
    statistic: str  # what the measured efficiencies are of, named once where they are shown
    predictions: tuple[PredictedPoint, ...]
    assumptions: tuple[str, ...]
    price: str | None  # "$98.32 a node-hour (catalog list price ...)"; None: no price

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = PREDICT_SCHEMA
        data["measured"] = [{"nodes": n, "efficiency": e} for n, e in self.measured]
        return data


@dataclass(frozen=True)
class Launches:
    """The largest measured point's launches, to cost a predicted point by."""

    count: int
    each_s: float  # mean wall time of one
    steps: int  # timed steps of one (start-up is the rest)


def _verdict(target: float, low: float, high: float) -> tuple[str, str]:
    span, goal = percent_range(low, high, target), f"{target * 100:g}%"
    if low >= target:
        return "scales", f"the whole range {span} is at or above {goal}"
    if high < target:
        return "loses", f"the whole range {span} is below {goal}"
    return CANNOT_TELL, f"the range {span} straddles the {goal} target"


def measure_next(desc: Description, fc: Forecast) -> str:
    """What to measure to narrow a range that cannot tell."""
    counts = [p.nodes for p in desc.points]
    nearer = fc.measure_next
    if counts == [1, counts[-1]]:
        more = nearer or fc.nodes
        return (
            f"run {plural(more, 'node')} to separate the one-time step onto the network from "
            "the growth per doubling"
        )
    if nearer is None:
        return "run it: it is one doubling from the largest measured node count"
    return f"run {plural(nearer, 'node')} to measure the growth nearer {fc.nodes}"


def _comm(desc: Description, assumptions: list[str]) -> Comm | None:
    gradient = desc.gradient_bytes
    if gradient is None or desc.busbw_gbs is None:
        missing = [
            name
            for name, value in (
                ("parameters", desc.parameters),
                ("gradient_bytes_per_parameter", desc.gradient_bytes_per_parameter),
                ("busbw_gbs", desc.busbw_gbs),
            )
            if value is None
        ]
        assumptions.append(
            f"no {', '.join(missing)}: the all-reduce's share of the step to the network is not "
            "bounded by its bytes"
        )
        return None
    strategy = desc.strategy or "ddp"
    syncs = STRATEGIES.get(strategy, 1.0)
    assumptions.append(
        f"gradient sync: {syncs:g} all-reduce{'' if syncs == 1 else 's'} of "
        f"{gradient / syncs / 1e9:.3g} GB per step ({strategy}) at "
        f"{gbs(desc.busbw_gbs)} GB/s busbw across nodes"
        + (f", {desc.busbw_intra_node_gbs:g} GB/s within one" if desc.busbw_intra_node_gbs else "")
    )
    return Comm(gradient, desc.busbw_gbs, desc.busbw_intra_node_gbs)


def gbs(value: float) -> str:
    """A busbw as the assumptions print it: three figures ('0.936', '385'), no exponent."""
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def _pipeline(desc: Description, assumptions: list[str]) -> Pipeline | None:
    """The pipeline whose bubble is computed, its assumption said; UsageError where a measured
    point would leave a pipeline less than one micro-batch (the description contradicts
    itself)."""
    stages = desc.pipeline_parallel or 1
    if stages < 2:
        return None
    pipe = desc.pipeline
    if pipe is None:
        assumptions.append(
            f"pipeline parallel {stages}: "
            + (
                "under weak scaling each pipeline runs as many micro-batches at every node "
                "count, so its bubble does not change"
                if desc.weak
                else "without micro_batches its bubble, which grows as more pipelines share "
                "the global batch, is not modelled: give micro_batches"
            )
        )
        return None
    base = desc.points[0].nodes
    for point in desc.points[1:]:
        left = pipe.micro_batches_at(base, point.nodes)
        if left < 1:
            raise UsageError(
                f"{desc.source}: micro_batches: {desc.micro_batches:g} at {plural(base, 'node')} "
                f"leaves each pipeline {left:.2g} at {point.nodes} nodes, fewer than one",
                why="under strong scaling the global batch is fixed, so each pipeline's "
                "micro-batches fall as N0 / N",
                fix="give the micro-batches each pipeline runs a step at the smallest node count",
            )
    assumptions.append(
        f"pipeline parallel {stages}"
        + (f" ({pipe.virtual} virtual stages a rank)" if pipe.virtual > 1 else "")
        + f", {pipe.micro_batches:g} micro-batches a step at {plural(base, 'node')}, falling as "
        f"N0 / N: the bubble, (p - 1) / v of m + (p - 1) / v micro-batches' time, is computed "
        "and the step and the growth model the rest"
    )
    return pipe


def predict(
    desc: Description,
    nodes: Sequence[int],
    target: float,
    *,
    price: tuple[float, str] | None = None,
    launches: Launches | None = None,
    statistic: str = GIVEN,
) -> Prediction:
    """The prediction for each of ``nodes`` above the largest measured node count;
    ``statistic`` names what the measured points are (a run's: the report's statistic)."""
    measured_nodes = [p.nodes for p in desc.points]
    largest = measured_nodes[-1]
    below = [n for n in nodes if n <= largest]
    if below:
        raise UsageError(
            f"--nodes {','.join(map(str, below))}: already measured or below the largest "
            f"measured node count ({largest})",
            why="dtrun predict forecasts node counts larger than the ones measured",
            fix=f"pass node counts above {largest}, e.g. --nodes {largest * 2},{largest * 4}",
        )
    steps = desc.steps()
    points = [Measured(n, t) for n, t in steps]
    prior = PRIORS[desc.mode.value]
    assumptions = [
        f"{desc.mode.value} scaling with {plural(desc.procs_per_node, 'process')} per node, "
        "synchronous data parallelism: every step waits for the slowest rank",
        "the loss 1/E - 1 is a one-time step from one node onto the network and a growth per "
        'doubling of the nodes (docs/prediction.md "The model")',
        f"the step and the growth: a prior learned from published {desc.mode.value}-scaling "
        f"results (step {prior.step_mean:+.1%} ± {prior.step_sd:.1%}, growth "
        f"{prior.growth_mean:+.1%} ± {prior.growth_sd:.1%} a doubling), updated by the "
        f"{plural(len(points), 'measured node count')}",
        f"the range: the loss's posterior ± {RANGE_Z:g} standard deviations, which held the "
        "measured value in 90% of the published results, each source left out in turn",
        "the network's busbw per rank holds at larger node counts (a non-blocking fabric); "
        "a tapered or shared fabric does worse",
    ]
    if desc.step_spread is not None:
        assumptions.append(
            f"the step times' spread (p90 - p10) / p50 of {desc.step_spread:.1%}: the growth is "
            "at least the straggler tax of the expected slowest of more ranks"
        )
    comm = _comm(desc, assumptions)
    pipe = _pipeline(desc, assumptions)
    setting = Setting(desc.procs_per_node, desc.mode, desc.seconds, comm, desc.step_spread, pipe)
    base = points[0]
    measured = tuple((p.nodes, efficiency(desc.mode, base, p.nodes, p.step)) for p in points)
    out = []
    for fc in forecast(points, nodes, setting):
        out.append(_point(desc, fc, target, price, launches, points[-1]))
    return Prediction(
        source=desc.source,
        mode=desc.mode.value,
        target_efficiency=target,
        measured=measured,
        statistic=statistic,
        predictions=tuple(out),
        assumptions=tuple(assumptions),
        price=None if price is None else f"${price[0]:g} a node-hour ({price[1]})",
    )


def _point(
    desc: Description,
    fc: Forecast,
    target: float,
    price: tuple[float, str] | None,
    launches: Launches | None,
    last: Measured,
) -> PredictedPoint:
    if fc.step is None or fc.efficiency_low is None or fc.efficiency_high is None:
        return PredictedPoint(
            fc.nodes, None, None, None, None, None, CANNOT_TELL, fc.why_not or "no prediction"
        )
    verdict, why = _verdict(target, fc.efficiency_low, fc.efficiency_high)
    if verdict == CANNOT_TELL:
        why += f"; {measure_next(desc, fc)}"
    throughput = None
    if not desc.seconds:  # back to the points' unit: weak X = N/T, strong X = 1/T
        throughput = (fc.nodes if desc.weak else 1) / fc.step
    elif desc.batch_per_process or desc.global_batch:
        batch = desc.batch_per_process if desc.weak else desc.global_batch
        per_step = float(batch or 0) * (fc.nodes * desc.procs_per_node if desc.weak else 1)
        throughput = per_step / fc.step
    cost = None
    usd_per_node_hour = None if price is None else price[0]
    if launches is not None and desc.seconds:
        each = launches.each_s + launches.steps * (fc.step - last.step)
        hours = fc.nodes * launches.count * each / 3600
        many = "launches" if launches.count > 1 else "launch"
        what = f"{launches.count} {many} like the {last.nodes}-node point's"
        usd = None if usd_per_node_hour is None else hours * usd_per_node_hour
        cost = Cost(what, launches.count, each, hours, usd)
    elif desc.seconds:
        each = STEPS_COSTED * fc.step
        hours = fc.nodes * each / 3600
        usd = None if usd_per_node_hour is None else hours * usd_per_node_hour
        cost = Cost(f"{STEPS_COSTED:,} steps", 1, each, hours, usd)
    return PredictedPoint(
        nodes=fc.nodes,
        step_time_s=fc.step if desc.seconds else None,
        throughput=throughput,
        efficiency=fc.efficiency,
        efficiency_low=fc.efficiency_low,
        efficiency_high=fc.efficiency_high,
        verdict=verdict,
        why=why,
        cost=cost,
    )
