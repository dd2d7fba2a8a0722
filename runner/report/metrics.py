"""Scaling arithmetic: repeats -> one figure per node count -> speedup and efficiency.

Definitions from docs/facts.md §7. With throughput X (tokens/s) and step time T:
  weak (fixed work per process):  E(N) = T(N0) / T(N)         = X(N)·N0 / (N·X(N0))
  strong (fixed total work):      E(N) = N0·T(N0) / (N·T(N))  = X(N)·N0 / (N·X(N0))
  speedup S(N) = X(N) / X(N0); N0 is the smallest node count measured (normally 1).
Both modes reduce to the same throughput form; what differs is what the workload held fixed.
X is the statistic of runner/report/stats.py: tokens per step over each launch's median step
time, combined over launches MLPerf-style; its 95% intervals and the verdicts come from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runner.azure.catalog import ExpectedBusbw, expected_busbw
from runner.report.model import (
    ASSUMED,
    Assumptions,
    Point,
    Prediction,
    finding,
    model_gap,
    predict,
)
from runner.report.results import AllreduceResult, TrainResult
from runner.report.stats import (
    DEFAULT_TARGET,
    Verdict,
    bootstrap_tokens_per_s,
    intervals,
    judge,
    launch_samples_per_s,
    launch_tokens_per_s,
    noise_text,
    reason,
    step_spread,
)
from runner.report.stats import trimmed_mean as trimmed_mean  # re-exported: it lived here
from runner.spec.request import ScalingMode

FORMULAS: dict[ScalingMode, str] = {
    ScalingMode.WEAK: (
        "weak scaling (fixed batch per process): E(N) = T(N0) / T(N) = X(N)·N0 / (N·X(N0)), "
        "T = step time, X = tokens/s, N0 = smallest node count"
    ),
    ScalingMode.STRONG: (
        "strong scaling (fixed global batch): E(N) = N0·T(N0) / (N·T(N)) = X(N)·N0 / (N·X(N0)), "
        "T = step time, X = tokens/s, N0 = smallest node count"
    ),
}


@dataclass(frozen=True)
class ScalingRow:
    nodes: int
    world_size: int
    repeats: int
    tokens_per_s: float  # at each launch's median step time, trimmed mean over launches
    tokens_per_s_min: float  # the slowest launch's, at its median step time
    tokens_per_s_max: float
    samples_per_s: float
    step_time_p50: float  # median over launches of each launch's median step time
    step_time_p90: float
    ideal_tokens_per_s: float
    speedup: float
    efficiency: float
    mfu: float | None
    proof: str
    in_sync: bool
    busbw: float | None = None  # all-reduce busbw at the gradients' size, trimmed mean (GB/s)
    gradient_bytes: int | None = None
    peak_memory_bytes: int | None = None  # the most any rank of any launch used
    strategy: str = "ddp"
    replicas: int | None = None  # data-parallel replicas (None: every process)
    pp_size: int | None = None  # pipeline: ranks per pipeline
    bubble: float | None = None  # pipeline: share of each step a rank idles in the bubble
    # The statistic's uncertainty (runner/report/stats.py): 95% bootstrap intervals (None:
    # nothing to resample), the verdict against the target efficiency, and n.
    tokens_per_s_low: float | None = None
    tokens_per_s_high: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    efficiency_low: float | None = None
    efficiency_high: float | None = None
    verdict: Verdict = Verdict.INCONCLUSIVE
    verdict_reason: str = ""
    target_efficiency: float = DEFAULT_TARGET
    steps_n: int = 0  # timed steps per launch (the fewest of any launch)
    launches_n: int = 0
    step_time_p10: float | None = None  # None without per-step times
    step_spread: float | None = None  # (p90 - p10) / p50 of the step times


# Gradient-synchronisation traffic per step, in all-reduces of the whole gradient (the ZeRO
# paper, section 7: DDP and ZeRO 1-2 move 2Ψ per rank, as one all-reduce; ZeRO 3 and FSDP's
# full sharding add an all-gather of the parameters for the backward pass, 3Ψ: 1.5 all-reduces).
ALLREDUCES_PER_STEP = {"ddp": 1.0, "zero1": 1.0, "zero2": 1.0, "zero3": 1.5, "fsdp": 1.5}


def pipeline_bubble(pp: int, micro_batches: int, stages_per_rank: int = 1) -> float:
    """The share of a step each rank of a pipeline idles: (p-1) / (v*m + p - 1) for p ranks,
    m micro-batches and v stages per rank (GPipe and 1F1B: v = 1; Megatron-LM's interleaved
    schedule divides the bubble by v)."""
    return (pp - 1) / (stages_per_rank * micro_batches + pp - 1)


def scaling_rows(
    results: Mapping[int, Sequence[TrainResult]], target: float = DEFAULT_TARGET
) -> tuple[ScalingRow, ...]:
    """One row per node count that has at least one result, ordered by node count, each
    judged against ``target`` efficiency."""
    measured = {n: list(rs) for n, rs in sorted(results.items()) if rs}
    if not measured:
        return ()
    base_nodes = min(measured)
    base = trimmed_mean([launch_tokens_per_s(r) for r in measured[base_nodes]])
    draws = {nodes: bootstrap_tokens_per_s(runs) for nodes, runs in measured.items()}
    rows = []
    for nodes, runs in measured.items():
        launches = [launch_tokens_per_s(r) for r in runs]
        throughput = trimmed_mean(launches)
        # MFU scaled to the same statistic: the workload's figure is at its mean step time
        mfus = [r.mfu * launch_tokens_per_s(r) / r.tokens_per_s for r in runs if r.mfu is not None]
        speedup = throughput / base
        spread = step_spread(runs)
        rows.append(
            ScalingRow(
                nodes=nodes,
                world_size=runs[0].world_size,
                repeats=len(runs),
                tokens_per_s=throughput,
                tokens_per_s_min=min(launches),
                tokens_per_s_max=max(launches),
                samples_per_s=trimmed_mean([launch_samples_per_s(r) for r in runs]),
                step_time_p50=spread.p50,
                step_time_p90=spread.p90,
                ideal_tokens_per_s=base * nodes / base_nodes,
                speedup=speedup,
                efficiency=speedup * base_nodes / nodes,
                mfu=trimmed_mean(mfus) if mfus else None,
                proof=runs[-1].proof,
                in_sync=all(r.verified for r in runs),
                busbw=_probe_busbw(runs),
                gradient_bytes=next((r.busbw.gradient_bytes for r in runs if r.busbw), None),
                peak_memory_bytes=max(r.peak_memory_max_bytes or r.peak_memory_bytes for r in runs),
                **_layout(runs[0]),
                **intervals(nodes / base_nodes, draws[nodes], draws[base_nodes]),
                target_efficiency=target,
                steps_n=min(len(r.step_times) or r.timed_steps for r in runs),
                launches_n=len(runs),
                step_time_p10=spread.p10,
                step_spread=spread.relative,
            )
        )
    return tuple(_judged(row, rows[0]) for row in rows)


def _judged(row: ScalingRow, base: ScalingRow) -> ScalingRow:
    """The row with its verdict against its target, and the verdict's reason."""
    if row is base:
        verdict = Verdict.BASELINE
    else:
        verdict = judge(row.efficiency_low, row.efficiency_high, row.target_efficiency)
    noise = noise_text([(r.nodes, r.step_spread, _launch_spread(r)) for r in (base, row)])
    bounds = (row.efficiency_low, row.efficiency_high)
    said = reason(verdict, row.efficiency, bounds, row.target_efficiency, noise)
    return replace(row, verdict=verdict, verdict_reason=said)


def _launch_spread(row: ScalingRow) -> float | None:
    """The launches' min-max width as a share of the point's tokens/s (None: one launch)."""
    if row.launches_n < 2:
        return None
    return (row.tokens_per_s_max - row.tokens_per_s_min) / row.tokens_per_s


def _layout(result: TrainResult) -> dict[str, Any]:
    """The strategy's layout fields of a ScalingRow."""
    bubble = None
    if result.strategy == "pipeline" and result.pp_size and result.micro_batches:
        bubble = pipeline_bubble(result.pp_size, result.micro_batches, result.stages_per_rank or 1)
    return {
        "strategy": result.strategy,
        "replicas": result.data_parallel,
        "pp_size": result.pp_size if result.strategy == "pipeline" else None,
        "bubble": bubble,
    }


def _probe_busbw(runs: Sequence[TrainResult]) -> float | None:
    values = [r.busbw.at_gradient.in_place.busbw for r in runs if r.busbw is not None]
    return trimmed_mean(values) if values else None


@dataclass(frozen=True)
class ProjectionRow:
    """Time to train on a fixed number of tokens: at the measured rate, and ideally."""

    nodes: int
    measured_s: float  # tokens / X(N)
    ideal_s: float  # tokens / X(N0) * N0 / N: the smallest count's time divided evenly
    lost_s: float  # measured - ideal


def projection(rows: Sequence[ScalingRow], tokens: int) -> tuple[ProjectionRow, ...]:
    if not rows:
        return ()
    base = rows[0]
    base_s = tokens / base.tokens_per_s
    out = []
    for row in rows:
        measured = tokens / row.tokens_per_s
        ideal = base_s * base.nodes / row.nodes
        out.append(ProjectionRow(row.nodes, measured, ideal, measured - ideal))
    return tuple(out)


def allreduce_seconds(size_bytes: int, busbw_gbs: float, world: int) -> float:
    """The time one all-reduce of ``size_bytes`` takes at ``busbw``: t = S / algbw and
    algbw = busbw / (2(n-1)/n), nccl-tests' definitions turned around."""
    factor = 2 * (world - 1) / world
    return size_bytes * factor / (busbw_gbs * 1e9)


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
    verdict: str
    # The model (runner/report/model.py): the step time and efficiency that gradient
    # communication alone would give, with no overlap and with the stated one.
    predicted_step_time_s: float | None = None
    predicted_step_time_no_overlap_s: float | None = None
    predicted_efficiency: float | None = None
    predicted_efficiency_no_overlap: float | None = None
    model_gap: float | None = None  # efficiency outside the model's range: <0 below, >0 above
    model_finding: str = ""


def where_scaling_is_lost(
    rows: Sequence[ScalingRow],
    size_name: str | None,
    oversubscribed: Sequence[int] = (),
    mode: ScalingMode = ScalingMode.WEAK,
    assumptions: Assumptions = ASSUMED,
) -> tuple[LossRow, ...]:
    out = []
    for row, prediction in zip(rows, model_predictions(rows, mode, assumptions), strict=True):
        expected = expected_busbw(size_name, row.nodes, row.world_size // row.nodes)
        comm_s = share = None
        if row.busbw and row.gradient_bytes and row.world_size > 1:
            comm_s = gradient_sync_seconds(row)
            share = None if comm_s is None else comm_s / row.step_time_p50
        out.append(
            LossRow(
                row.nodes,
                row.world_size,
                row.efficiency,
                row.busbw,
                expected,
                comm_s,
                share,
                _verdict(row, rows[0], expected, share, row.nodes in oversubscribed),
                predicted_step_time_s=prediction.step_s,
                predicted_step_time_no_overlap_s=prediction.step_no_overlap_s,
                predicted_efficiency=prediction.efficiency,
                predicted_efficiency_no_overlap=prediction.efficiency_no_overlap,
                model_gap=model_gap(row.efficiency, prediction),
                model_finding=(
                    "the baseline the model starts from"
                    if row is rows[0]
                    else finding(
                        row.efficiency, prediction, assumptions, row.nodes in oversubscribed
                    )
                ),
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
    pipeline); ZeRO 3 and FSDP move 1.5 times what DDP does."""
    assert row.busbw is not None and row.gradient_bytes is not None
    if row.strategy == "pipeline":
        replicas = row.replicas or 1
        if replicas < 2:
            return None
        per_stage = row.gradient_bytes // (row.pp_size or 1)
        return allreduce_seconds(per_stage, row.busbw, replicas)
    factor = ALLREDUCES_PER_STEP.get(row.strategy, 1.0)
    return factor * allreduce_seconds(row.gradient_bytes, row.busbw, row.world_size)


def _verdict(
    row: ScalingRow,
    base: ScalingRow,
    expected: ExpectedBusbw | None,
    share: float | None,
    oversubscribed: bool,
) -> str:
    if row is base:
        return "the baseline every efficiency is measured against"
    if row.verdict is Verdict.SCALES:
        return f"scales ({row.efficiency:.0%}, its 95% interval at or above the target)"
    if row.efficiency >= row.target_efficiency:
        return (
            f"{row.efficiency:.0%}, at or above the {row.target_efficiency:.0%} target, but not "
            f"shown to scale: {row.verdict.value} (see the verdict)"
        )
    lost = f"{1 - row.efficiency:.0%} lost"
    if row.bubble is not None and row.bubble > (base.bubble or 0.0) + 0.05:
        return (
            f"{lost}: each rank of the {row.pp_size}-rank pipeline idles about {row.bubble:.0%} "
            "of the step in the pipeline's bubble, (p-1)/(v·m+p-1); more micro-batches, or the "
            "interleaved schedule, shrink it"
        )
    if row.busbw is None:
        return f"{lost}; no all-reduce probe to say why (rerun without --no-busbw)"
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
            "cluster runs more processes than this machine has cores, so they wait for CPU"
        )
    return (
        f"{lost}, though the all-reduce takes only about {share:.0%} of the step: look for "
        "stragglers (slow or throttled nodes), data loading, or per-step synchronisation"
    )


@dataclass(frozen=True)
class BusbwRow:
    """One node count of an all-reduce sweep."""

    nodes: int
    world_size: int
    repeats: int
    largest_size: int
    busbw: float  # in-place busbw at the largest size, trimmed mean over repeats (GB/s)
    busbw_min: float
    busbw_max: float
    peak_busbw: float  # the best size's, trimmed mean
    avg_busbw: float  # nccl-tests' average over sizes, trimmed mean
    expected: ExpectedBusbw | None
    proof: str
    correct: bool


def busbw_rows(
    results: Mapping[int, Sequence[AllreduceResult]], size_name: str | None
) -> tuple[BusbwRow, ...]:
    rows = []
    for nodes, runs in sorted(results.items()):
        if not runs:
            continue
        largest = [r.largest.in_place.busbw for r in runs]
        rows.append(
            BusbwRow(
                nodes=nodes,
                world_size=runs[0].world_size,
                repeats=len(runs),
                largest_size=runs[0].largest.size,
                busbw=trimmed_mean(largest),
                busbw_min=min(largest),
                busbw_max=max(largest),
                peak_busbw=trimmed_mean([r.peak_busbw for r in runs]),
                avg_busbw=trimmed_mean([r.avg_busbw for r in runs]),
                expected=expected_busbw(size_name, nodes, runs[0].world_size // nodes),
                proof=runs[-1].proof,
                correct=all(r.wrong == 0 for r in runs),
            )
        )
    return tuple(rows)
