"""Where scaling is lost: each node count's gradient synchronisation at the busbw its launches
measured, against its step time and the catalog's expected busbw, and the scaling model's
prediction beside the measured efficiency (runner/report/model.py; docs/report.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtrun.azure.sizefacts import ExpectedBusbw, expected_busbw
from dtrun.report.metrics import ALLREDUCES_PER_STEP, ScalingRow
from dtrun.report.model import (
    ASSUMED,
    Assumptions,
    Point,
    Prediction,
    finding,
    model_gap,
    predict,
)
from dtrun.report.noise import Straggler
from dtrun.report.results import PROGRAM_STRATEGY
from dtrun.report.stats import Verdict, confidence_text
from dtrun.spec.request import ScalingMode
from dtrun.spec.text import lost_percent, percent


def allreduce_seconds(size_bytes: int, busbw_gbs: float, world: int) -> float:
    """The time one all-reduce of ``size_bytes`` takes at ``busbw``: t = S / algbw and
    algbw = busbw / (2(n-1)/n), nccl-tests' definitions turned around."""
    factor = 2 * (world - 1) / world
    return size_bytes * factor / (busbw_gbs * 1e9)


# A straggler is named as where scaling is lost only from this ratio on, a host at half speed:
# on this 2-core machine shared with other work the probe's slowest rank read up to 1.49 in
# clean 2-node sweeps over sshd (docs/report.md "Where scaling is lost"), while one node held
# to a tenth or a twentieth of a CPU read 2.1 to 5.5 (tests/e2e/test_slow_host.py).
HOST_RATIO = 2.0
NETWORK_SHORT = 0.8  # busbw below this share of the expected low end: the network underdelivers
COMM_BOUND = 0.3  # all-reduce time above this share of the step: communication-bound


@dataclass(frozen=True)
class LossRow:
    """Where one node count's scaling went: its efficiency beside its measured busbw."""

    nodes: int
    world_size: int
    efficiency: float
    busbw: float | None
    expected: ExpectedBusbw | None
    comm_s: float | None  # the gradients' all-reduce at the measured busbw, one step
    comm_share: float | None  # of the step time p50 (an upper bound: DDP overlaps it)
    # where this node count's scaling went, in a sentence; not the row's verdict (scales, loses,
    # inconclusive), which it may quote. summary.json before dtrun.summary/4 named it "verdict".
    finding: str
    # The model (runner/report/model.py): the step time and efficiency that gradient
    # communication alone would give, with no overlap and with the stated one.
    predicted_step_time_s: float | None = None
    predicted_step_time_no_overlap_s: float | None = None
    predicted_efficiency: float | None = None
    predicted_efficiency_no_overlap: float | None = None
    model_gap: float | None = None  # efficiency outside the model's range: <0 below, >0 above
    model_finding: str = ""
    # the gradient sync above, in all-reduces of the whole gradient per step, and why that many
    # (None and "": no gradient all-reduce, or nothing to time it by)
    sync_factor: float | None = None
    sync_basis: str = ""


def where_scaling_is_lost(
    rows: Sequence[ScalingRow],
    size_name: str | None,
    oversubscribed: Sequence[int] = (),
    mode: ScalingMode = ScalingMode.WEAK,
    assumptions: Assumptions = ASSUMED,
    *,
    stragglers: Mapping[int, Straggler] | None = None,
) -> tuple[LossRow, ...]:
    """``stragglers``: each node count's slowest straggler, from the Noise section's reading
    (runner/report/noise.py), named with its host where the point lost scaling."""
    stragglers = stragglers or {}
    out = []
    for row, prediction in zip(rows, model_predictions(rows, mode, assumptions), strict=True):
        expected = expected_busbw(size_name, row.nodes, row.world_size // row.nodes)
        comm_s = share = factor = None
        basis = ""
        if row.busbw and row.gradient_bytes and row.world_size > 1:
            comm_s = gradient_sync_seconds(row)
            share = None if comm_s is None else comm_s / row.step_time_p50
            if comm_s is not None and row.strategy != "pipeline":
                factor, basis = sync_factor(row)
        interval = (row.efficiency_low, row.efficiency_high)  # the model is judged against it
        out.append(
            LossRow(
                row.nodes,
                row.world_size,
                row.efficiency,
                row.busbw,
                expected,
                comm_s,
                share,
                _finding(
                    row,
                    rows[0],
                    expected,
                    share,
                    row.nodes in oversubscribed,
                    stragglers.get(row.nodes),
                ),
                predicted_step_time_s=prediction.step_s,
                predicted_step_time_no_overlap_s=prediction.step_no_overlap_s,
                predicted_efficiency=prediction.efficiency,
                predicted_efficiency_no_overlap=prediction.efficiency_no_overlap,
                model_gap=model_gap(row.efficiency, prediction, interval),
                model_finding=(
                    "the baseline the model starts from"
                    if row is rows[0]
                    else finding(
                        row.efficiency,
                        prediction,
                        assumptions,
                        row.nodes in oversubscribed,
                        interval,
                    )
                ),
                sync_factor=factor,
                sync_basis=basis,
            )
        )
    return tuple(out)


def model_predictions(
    rows: Sequence[ScalingRow], mode: ScalingMode, assumptions: Assumptions
) -> tuple[Prediction, ...]:
    """Each row's step time as the model predicts it from the first row's and the measured
    busbw (runner/report/model.py). A pipeline is left out: its step is set by its stages'
    balance and its bubble, which the model does not describe."""
    if any(row.strategy == "pipeline" for row in rows):
        why = "a pipeline's step depends on its stages and bubble; the model covers DDP, ZeRO, FSDP"
        return tuple(Prediction(row.nodes, missing=why) for row in rows)
    points = [
        Point(row.nodes, row.replicas or row.world_size, row.step_time_p50, _sync(row))
        for row in rows
    ]
    return predict(points, mode, assumptions)


def _sync(row: ScalingRow) -> float | None:
    """One step's gradient sync: none with one process, unknown without a probe."""
    if row.world_size == 1:
        return 0.0
    if row.busbw and row.gradient_bytes:
        return gradient_sync_seconds(row)
    return None


def gradient_sync_seconds(row: ScalingRow) -> float | None:
    """One step's gradient synchronisation at the measured busbw, as the strategy does it:
    a pipeline's replicas all-reduce only their stage's share of the gradient (none with a single
    pipeline); ZeRO 3 and FSDP move 1.5 times what DDP does (sync_factor)."""
    assert row.busbw is not None and row.gradient_bytes is not None
    if row.strategy == "pipeline":
        replicas = row.replicas or 1
        if replicas < 2:
            return None
        per_stage = row.gradient_bytes // (row.pp_size or 1)
        return allreduce_seconds(per_stage, row.busbw, replicas)
    factor, _ = sync_factor(row)
    return factor * allreduce_seconds(row.gradient_bytes, row.busbw, row.world_size)


def sync_factor(row: ScalingRow) -> tuple[float, str]:
    """One step's gradient synchronisation in all-reduces of the whole gradient, and why.
    Every rank moves 2Ψ for DDP and ZeRO 1-2 (ZeRO 2's reduce-scatter of the gradients and
    all-gather of the updated parameters, Ψ each, are one all-reduce's volume) and 3Ψ for ZeRO 3,
    which all-gathers the parameters again for the backward pass: the ZeRO paper (Rajbhandari
    et al. 2020, section 7). FSDP's full sharding does what ZeRO 3 does (Zhao et al. 2023, PyTorch
    FSDP: all-gather before forward and again before backward, reduce-scatter after it). A
    program's factor follows how the step hook saw its parameters sharded."""
    if row.strategy != PROGRAM_STRATEGY:
        return ALLREDUCES_PER_STEP.get(row.strategy, 1.0), f"strategy {row.strategy}"
    sharded = row.sharded
    if sharded is None:
        return 1.0, "parameters whole on every rank: one all-reduce of the gradient, as DDP"
    stage = sharded.removeprefix("DeepSpeed ZeRO stage ")
    if sharded.startswith("FSDP") or stage == "3":
        return 1.5, (
            f"parameters sharded ({sharded}): 1.5 all-reduces' volume, for full sharding "
            "all-gathers them for the forward and again for the backward pass, then "
            "reduce-scatters the gradients"
        )
    if stage in ("1", "2"):
        return 1.0, (
            f"parameters sharded ({sharded}): one all-reduce's volume, in a reduce-scatter of "
            "the gradients and an all-gather of the updated parameters"
        )
    return 1.0, f"parameters sharded ({sharded}): counted as one all-reduce, as DDP"


def _finding(
    row: ScalingRow,
    base: ScalingRow,
    expected: ExpectedBusbw | None,
    share: float | None,
    oversubscribed: bool,
    straggler: Straggler | None = None,
) -> str:
    if row is base:
        return "the baseline every efficiency is measured against"
    shown = percent(row.efficiency, row.target_efficiency)
    if row.verdict is Verdict.SCALES:
        level = confidence_text(row.confidence)
        return f"scales ({shown}, its {level} interval at or above the target)"
    if row.efficiency >= row.target_efficiency:
        return (
            f"{shown}, at or above the {row.target_efficiency * 100:g}% target, but not "
            f"shown to scale: {row.verdict.value} (see the verdict)"
        )
    return _why_lost(row, base, expected, share, oversubscribed, straggler)


def _why_lost(
    row: ScalingRow,
    base: ScalingRow,
    expected: ExpectedBusbw | None,
    share: float | None,
    oversubscribed: bool,
    straggler: Straggler | None,
) -> str:
    """Where a node count below its target lost scaling, the likeliest cause first."""
    lost = f"{lost_percent(row.efficiency, row.target_efficiency)} lost"
    if row.bubble is not None and row.bubble > (base.bubble or 0.0) + 0.05:
        return (
            f"{lost}: each rank of the {row.pp_size}-rank pipeline idles about {row.bubble:.0%} "
            "of the step in the pipeline's bubble, (p-1)/(v·m+p-1); more micro-batches, or the "
            "interleaved schedule, shrink it"
        )
    if straggler is not None and straggler.ratio >= HOST_RATIO:
        # one slow rank holds every synchronous step of every rank (docs/report.md)
        return (
            f"{lost}: rank {straggler.rank} on host {straggler.where} {straggler.computes()} "
            f"(launch {straggler.launch}), and every rank waits for it each step: check that "
            "host for throttling or other work, or leave it out"
        )
    if row.busbw is None and row.probe_error:
        return f"{lost}; the all-reduce probe that would say why failed (below)"
    if row.busbw is None:
        again = "with --probe" if row.program else "without --no-busbw"
        return f"{lost}; no all-reduce probe to say why (rerun {again})"
    if share is None:
        return (
            f"{lost}; one pipeline has no gradient all-reduce: look at its stages' balance and "
            "the point-to-point transfers between them"
        )
    if expected is not None and row.busbw < NETWORK_SHORT * expected.low:
        return (
            f"{lost}: the network is short, {row.busbw:.1f} GB/s busbw is "
            f"{row.busbw / expected.low:.0%} of the expected {expected.describe()}; check that "
            "NCCL uses InfiniBand (--nccl-debug), the size's NCCL settings and the placement group"
        )
    if share >= COMM_BOUND:
        return (
            f"{lost}: communication-bound, the gradients' all-reduce takes about {share:.0%} of "
            "the step at the measured busbw; a larger batch per process, gradient accumulation "
            "or a faster network would win it back"
        )
    if oversubscribed:
        return (
            f"{lost}, and the all-reduce takes only about {share:.0%} of the step: the embedded "
            "cluster's processes share cores, so they wait for CPU"
        )
    return (
        f"{lost}, though the all-reduce takes only about {share:.0%} of the step: look for "
        "stragglers (slow or throttled nodes), data loading, or per-step synchronisation"
    )
