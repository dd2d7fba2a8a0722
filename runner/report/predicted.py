"""A run directory as `dtrun predict` reads it: its scaling rows as measured points, the busbw
its probe measured (or the size's from the catalog, or --busbw), its gradient bytes and
strategy, its price and its largest point's launches (docs/prediction.md "From a run"); and the
report's "Next node counts", the prediction at 2x and 4x its largest node count."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dtrun.azure.sizefacts import expected_busbw, no_busbw_because
from dtrun.errors import DtrunError, UsageError
from dtrun.predict.inputs import STRATEGIES, Description, Point
from dtrun.predict.predict import Launches, Prediction, gbs, predict
from dtrun.report.results import PROGRAM_STRATEGY, TrainResult
from dtrun.report.stats import STATISTIC
from dtrun.spec.request import ScalingMode
from dtrun.spec.text import plural

if TYPE_CHECKING:
    from dtrun.report.build import Report
    from dtrun.report.metrics import ScalingRow

DEFAULT_TARGET = 0.9


@dataclass(frozen=True)
class FromRun:
    description: Description
    launches: Launches | None
    price: tuple[float, str] | None  # the run's recorded price, if any
    said: tuple[str, ...]  # where the busbw came from
    statistic: str = f"the report's, at the {STATISTIC}"  # its efficiencies are the prediction's


def from_report(report: Report, *, size: str | None, busbw: float | None) -> FromRun:
    """The run's measured points; ``size`` or ``busbw`` (the options) in place of the run's."""
    source = str(report.run_dir.path)
    if report.workload == "allreduce":
        raise UsageError(
            f"{source} is an all-reduce sweep: it has no training step to predict",
            fix="predict from a training sweep (dtrun bench, or dtrun bench -- PROGRAM)",
        )
    rows = [row for row in report.rows if row.step_time_p50 > 0]
    if len(rows) < 2:
        raise UsageError(
            f"{source} has {plural(len(rows), 'measured node count')}; a prediction needs two "
            "or more",
            fix="run the sweep at two node counts at least, e.g. dtrun bench --nodes 1,2",
        )
    ppn = rows[0].world_size // rows[0].nodes
    inter, said = _busbw(report, rows, ppn, size, busbw)
    if rows[-1].strategy == "pipeline":
        said = (
            "pipeline parallelism: the model is data parallelism's, and a pipeline's bubble "
            "grows with its stages in a way it leaves out (docs/workloads.md)",
            *said,
        )
    if report.manifest["inventory"].get("source") == "embedded":
        said = (
            "measured on the embedded cluster: its nodes are processes on one machine, sharing "
            "its cores and talking over loopback, so the growth is this machine's, not a "
            "fabric's; a real cluster's run predicts a real cluster",
            *said,
        )
    one = next((row for row in rows if row.nodes == 1 and row.busbw), None)
    intra = None if one is None else one.busbw
    gradient = next((row.gradient_bytes for row in rows if row.gradient_bytes), None)
    strategy = _strategy(rows[-1])
    description = Description(
        source=source,
        procs_per_node=ppn,
        mode=report.mode,
        points=_points(report, rows),
        strategy=strategy,
        parameters=None if gradient is None else float(gradient),
        gradient_bytes_per_parameter=None if gradient is None else 1.0,
        busbw_gbs=inter,
        busbw_intra_node_gbs=intra,
        step_spread=rows[-1].step_spread,
    )
    launches = None
    cost = report.cost
    last = rows[-1]
    if cost is not None:
        point = next((p for p in cost.points if p.nodes == last.nodes), None)
        if point is not None and point.launches:
            launches = Launches(point.launches, point.launch_s / point.launches, last.steps_n)
    price = None
    if cost is not None and cost.usd_per_node_hour is not None:
        price = (cost.usd_per_node_hour, cost.price_source or "recorded")
    return FromRun(description, launches, price, said)


def _points(report: Report, rows: list[ScalingRow]) -> tuple[Point, ...]:
    """Each node count's step time at the report's statistic, so that the efficiency the
    prediction starts from is the report's, to the last digit (one figure per point): the
    smallest count's step is its tokens per step over its tokens/s (the statistic,
    runner/report/stats.py), and every other count's is that step over the report's efficiency
    (weak scaling: E = T0 / T; strong: E = N0 T0 / (N T), docs/facts.md §7). The median of the
    launches' median step times (step_time_p50) is another statistic: with two launches of
    0.1 s and 0.2 s it gave 67% where the report's tokens/s gave 75%."""
    base = rows[0]
    first = report.first
    if isinstance(first, TrainResult) and first.nnodes == base.nodes:
        step = first.global_batch * first.seq_len / base.tokens_per_s
    else:  # pragma: no cover - a training sweep's first launch is its smallest count's
        step = base.step_time_p50
    weak = report.mode is ScalingMode.WEAK
    return tuple(
        Point(row.nodes, step / row.efficiency * (1 if weak else base.nodes / row.nodes), None)
        for row in rows
    )


def _strategy(row: ScalingRow) -> str | None:
    """The row's strategy as a description names it; a program's from how the step hook saw
    its parameters sharded, as the report's gradient sync counts it (losses.sync_factor)."""
    if row.strategy in STRATEGIES:
        return row.strategy
    if row.strategy != PROGRAM_STRATEGY:
        return None
    if row.sharded is None:
        return "ddp"
    if row.sharded.startswith("FSDP"):
        return "fsdp"
    stage = row.sharded.removeprefix("DeepSpeed ZeRO stage ")
    return {"1": "zero1", "2": "zero2", "3": "zero3"}.get(stage)


def _busbw(
    report: Report, rows: list[ScalingRow], ppn: int, size: str | None, busbw: float | None
) -> tuple[float | None, tuple[str, ...]]:
    """The busbw across nodes: --busbw, else --size's from the catalog, else the probe's at the
    largest node count, else the run's size's from the catalog; and where it came from."""
    if busbw is not None:
        return busbw, (f"busbw {busbw:g} GB/s across nodes (--busbw)",)
    catalog = expected_busbw(size or report.manifest["inventory"].get("size"), 2, ppn)
    middle = None if catalog is None else (catalog.low + catalog.high) / 2
    if size is not None and catalog is not None:
        return middle, (f"busbw {middle:g} GB/s across nodes: {size}'s ({catalog.source})",)
    unused = () if size is None else (no_busbw_because(size, ppn),)  # said, not silently passed
    measured = [(row.nodes, row.busbw) for row in rows if row.nodes > 1 and row.busbw]
    if measured:
        nodes, value = measured[-1]
        return value, (
            *unused,
            f"busbw {gbs(value)} GB/s across nodes, as the probe measured it at {nodes} nodes",
        )
    if catalog is not None:
        return middle, (f"busbw {middle:g} GB/s across nodes, the catalog's ({catalog.source})",)
    return None, (
        *unused,
        "no busbw across nodes: no probe measured it and the catalog has no size",
    )


def next_counts(report: Report) -> Prediction | None:
    """The report's "Next node counts": 2x and 4x the largest measured node count, from the
    sweep's own points; None for an all-reduce sweep or fewer than two measured node counts."""
    if report.workload == "allreduce" or len([r for r in report.rows if r.step_time_p50]) < 2:
        return None
    largest = report.rows[-1].nodes
    target = float(report.manifest["bench"].get("target_efficiency", DEFAULT_TARGET))
    try:
        found = from_report(report, size=None, busbw=None)
        result = predict(
            found.description,
            (2 * largest, 4 * largest),
            target,
            price=found.price,
            launches=found.launches,
            statistic=found.statistic,
        )
    except DtrunError:  # pragma: no cover - the rows were checked above
        return None
    return replace(result, assumptions=(*found.said, *result.assumptions))
