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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dtrun.azure.sizefacts import ExpectedBusbw, expected_busbw
from dtrun.report.noise import NoiseReport
from dtrun.report.resultfile import AllreduceResult
from dtrun.report.results import TrainResult
from dtrun.report.stats import (
    CONFIDENCE,
    DEFAULT_TARGET,
    Advice,
    Verdict,
    intervals,
    judge,
    launch_samples_per_s,
    launch_tokens_per_s,
    launches_to_decide,
    noise_text,
    pooled_launch_noise,
    reason,
    step_spread,
    steps_dominate,
)
from dtrun.report.stats import trimmed_mean as trimmed_mean  # re-exported: it lived here
from dtrun.spec.request import ScalingMode
from dtrun.spec.text import plural

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
    # The statistic's uncertainty (runner/report/stats.py): 95% t-intervals from the launches
    # (None: one launch here or at the baseline), the verdict against the target, and n.
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
    # `dtrun bench -- PROGRAM`: how the program's parameters were sharded, as the step hook saw
    # it ("FSDP (DTensor shards)", "DeepSpeed ZeRO stage 3", ...; None: whole on every rank)
    sharded: str | None = None
    # --probe: why the all-reduce probe failed, in the first launch it failed in (None: it
    # failed in none); the report says it where the busbw column would have its figure
    probe_error: str | None = None
    program: bool = False  # `dtrun bench -- PROGRAM`: its probe is --probe, not --busbw
    # The intervals' inputs (summary/5): the launch-to-launch standard deviation of ln tokens/s
    # pooled over the sweep's node counts (None: no node count has two launches), and its
    # degrees of freedom (launches less one per node count; 0: none).
    launch_sigma: float | None = None
    interval_df: int = 0
    # The intervals' confidence (summary/6): 95%, or with --until-decided the per-look level
    # that keeps 5% over all the looks (runner/report/sequential.py); and why the point took
    # the launches it did: None for a fixed --repeat, else "decided", "maximum" (--max-launches
    # reached undecided), "out of reach" (launches in noise left no next look), "ended" (the
    # sweep ended first) or "baseline" (runner/report/sequential.py Stopped).
    confidence: float = CONFIDENCE
    stopped: str | None = None


def baseline(
    bench: Mapping[str, Any], runs: Mapping[str, Any], rows: Sequence[ScalingRow]
) -> dict[str, Any] | None:
    """summary.json's ``baseline``: the node count every efficiency is against (``nodes``, the
    smallest with a result: scaling_rows), the smallest one asked for (``requested_nodes``; None
    where the manifest does not say) and, where they differ, the finding that says so (every
    launch of the one asked for failed: each efficiency means other than the user asked);
    None without a training row."""
    if not rows:
        return None
    used = rows[0].nodes
    counts = bench.get("node_counts")
    asked = [n for n in counts if type(n) is int] if isinstance(counts, list) else []
    requested = min(asked) if asked else None
    finding = None
    if requested is not None and requested < used:
        tried = [run for run in runs.get("runs", ()) if run.get("nodes") == requested]
        if not tried:
            why = "not launched"
        elif all(run.get("status") == "failed" for run in tried):
            why = f"{plural(len(tried), 'launch')} failed"
        else:
            why = f"{plural(len(tried), 'launch')}, none with a result"
        finding = (
            f"the requested baseline, {plural(requested, 'node')}, has no result ({why}): every "
            f"speedup and efficiency is against {plural(used, 'node')}"
        )
    return {"nodes": used, "requested_nodes": requested, "finding": finding}


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
    results: Mapping[int, Sequence[TrainResult]],
    target: float = DEFAULT_TARGET,
    confidence: float = CONFIDENCE,
    level: Callable[[int], float] | None = None,
    flag: str = "--repeat",
) -> tuple[ScalingRow, ...]:
    """One row per node count that has at least one result, ordered by node count, each
    judged against ``target`` efficiency with ``confidence`` intervals. An undecided point
    says how many launches would decide it: ``level(k)`` is the confidence a sweep of k
    launches judges at (``confidence`` for fixed launches), ``flag`` the option that sets k."""
    measured = {n: list(rs) for n, rs in sorted(results.items()) if rs}
    if not measured:
        return ()
    base_nodes = min(measured)
    base = trimmed_mean([launch_tokens_per_s(r) for r in measured[base_nodes]])
    noise = pooled_launch_noise(list(measured.values()))
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
                probe_error=_probe_error(runs),
                program=runs[0].program is not None,
                peak_memory_bytes=max(r.peak_memory_max_bytes or r.peak_memory_bytes for r in runs),
                **_layout(runs[0]),
                **intervals(nodes / base_nodes, runs, measured[base_nodes], noise, confidence),
                target_efficiency=target,
                steps_n=min(len(r.step_times) or r.timed_steps for r in runs),
                launches_n=len(runs),
                step_time_p10=spread.p10,
                step_spread=spread.relative,
                launch_sigma=noise.sigma,
                interval_df=noise.df,
                confidence=confidence,
            )
        )

    def advice(row: ScalingRow) -> Advice | None:
        if row.efficiency_low is None or row.efficiency_high is None or noise.sigma is None:
            return None
        needed = launches_to_decide(
            (row.efficiency_low, row.efficiency_high),
            row.target_efficiency,
            noise.sigma,
            len(measured),
            level or (lambda _: confidence),
            least=row.launches_n + 1,
        )
        steps = steps_dominate([measured[base_nodes], measured[row.nodes]], noise.sigma)
        return Advice(needed, steps, flag)

    return tuple(_judged(row, rows[0], advice) for row in rows)


def _judged(
    row: ScalingRow, base: ScalingRow, advice: Callable[[ScalingRow], Advice | None]
) -> ScalingRow:
    """The row with its verdict against its target, and the verdict's reason (``advice``:
    what would decide it, asked of an undecided point only)."""
    if row is base:
        verdict = Verdict.BASELINE
    else:
        verdict = judge(row.efficiency_low, row.efficiency_high, row.target_efficiency)
    noise = noise_text([(r.nodes, r.step_spread, _launch_spread(r)) for r in (base, row)])
    bounds = (row.efficiency_low, row.efficiency_high)
    single = [where for where, r in (("here", row), ("at the baseline", base)) if r.launches_n < 2]
    said = reason(
        verdict,
        row.efficiency,
        bounds,
        row.target_efficiency,
        noise,
        " and ".join(single),
        row.confidence,
        advice(row) if verdict is Verdict.INCONCLUSIVE else None,
    )
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
        "sharded": result.program.sharded if result.program is not None else None,
    }


def _probe_busbw(runs: Sequence[TrainResult]) -> float | None:
    values = [r.busbw.at_gradient.in_place.busbw for r in runs if r.busbw is not None]
    return trimmed_mean(values) if values else None


def _probe_error(runs: Sequence[TrainResult]) -> str | None:
    """The first failed probe's error, and how many more of the point's launches it failed in."""
    errors = [r.program.probe_error for r in runs if r.program and r.program.probe_error]
    if not errors:
        return None
    more = (
        f" (and in {len(errors) - 1} more of its {len(runs)} launches)" if len(errors) > 1 else ""
    )
    return errors[0] + more


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


def verdicts_on_quiet_points(
    rows: tuple[ScalingRow, ...], noise: NoiseReport
) -> tuple[ScalingRow, ...]:
    """A verdict stands only on figures measured quietly: where the Noise section calls the
    point or the baseline unreliable, *scales* and *loses* become *inconclusive*, saying why;
    where it measured their slowest rank but not their load, the verdict says so
    (docs/report.md, "Noise")."""
    unreliable = {point.nodes for point in noise.points if point.unreliable}
    partial = {p.nodes: p for p in noise.points if p.verdict == "partly measured"}
    if not rows or not (unreliable or partial):
        return rows
    base = rows[0].nodes
    judged = []
    for row in rows:
        which = row.nodes if row.nodes in unreliable else base if base in unreliable else None
        if row.verdict in (Verdict.SCALES, Verdict.LOSES) and which is not None:
            would = (
                "which would scale" if row.verdict is Verdict.SCALES else "which would be a loss"
            )
            row = replace(
                row,
                verdict=Verdict.INCONCLUSIVE,
                verdict_reason=f"{row.verdict_reason}, {would}, but the "
                f"{which}-node point was measured in noise (see the noise findings); to "
                "decide: rerun on a quieter machine",
            )
        elif row.verdict in (Verdict.SCALES, Verdict.LOSES):
            unmeasured = [partial[n] for n in dict.fromkeys((base, row.nodes)) if n in partial]
            if unmeasured:
                said = " and ".join(f"the {p.nodes}-node point's" for p in unmeasured)
                whose = "their" if len(unmeasured) > 1 else "its"
                said += f" CPU steal and other load were not measured ({unmeasured[0].load_why})"
                row = replace(row, verdict_reason=f"{row.verdict_reason}; {said}, only {whose} "
                              "slowest rank was")  # fmt: skip
        judged.append(row)
    return tuple(judged)
