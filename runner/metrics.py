"""Scaling arithmetic: repeats -> one figure per node count -> speedup and efficiency.

Definitions from shared/FACTS.md section 7. With throughput X (tokens/s) and step time T:
  weak (fixed work per process):  E(N) = T(N0) / T(N)         = X(N)·N0 / (N·X(N0))
  strong (fixed total work):      E(N) = N0·T(N0) / (N·T(N))  = X(N)·N0 / (N·X(N0))
  speedup S(N) = X(N) / X(N0); N0 is the smallest node count measured (normally 1).
Both modes reduce to the same throughput form; what differs is what the workload held fixed.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.results import TrainResult
from runner.spec import ScalingMode

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


def trimmed_mean(values: Sequence[float]) -> float:
    """MLPerf-style: with three or more repeats drop the fastest and slowest, average the rest."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    if len(ordered) >= 3:
        ordered = ordered[1:-1]
    return statistics.fmean(ordered)


@dataclass(frozen=True)
class ScalingRow:
    nodes: int
    world_size: int
    repeats: int
    tokens_per_s: float  # trimmed mean over repeats
    tokens_per_s_min: float
    tokens_per_s_max: float
    samples_per_s: float
    step_time_p50: float  # median over repeats of each repeat's p50
    step_time_p90: float
    ideal_tokens_per_s: float
    speedup: float
    efficiency: float
    mfu: float | None
    proof: str
    in_sync: bool


def scaling_rows(results: Mapping[int, Sequence[TrainResult]]) -> tuple[ScalingRow, ...]:
    """One row per node count that has at least one result, ordered by node count."""
    measured = {n: list(rs) for n, rs in sorted(results.items()) if rs}
    if not measured:
        return ()
    base_nodes = min(measured)
    base = trimmed_mean([r.tokens_per_s for r in measured[base_nodes]])
    rows = []
    for nodes, runs in measured.items():
        throughput = trimmed_mean([r.tokens_per_s for r in runs])
        mfus = [r.mfu for r in runs if r.mfu is not None]
        speedup = throughput / base
        rows.append(
            ScalingRow(
                nodes=nodes,
                world_size=runs[0].world_size,
                repeats=len(runs),
                tokens_per_s=throughput,
                tokens_per_s_min=min(r.tokens_per_s for r in runs),
                tokens_per_s_max=max(r.tokens_per_s for r in runs),
                samples_per_s=trimmed_mean([r.samples_per_s for r in runs]),
                step_time_p50=statistics.median(r.step_time_p50 for r in runs),
                step_time_p90=statistics.median(r.step_time_p90 for r in runs),
                ideal_tokens_per_s=base * nodes / base_nodes,
                speedup=speedup,
                efficiency=speedup * base_nodes / nodes,
                mfu=trimmed_mean(mfus) if mfus else None,
                proof=runs[-1].proof,
                in_sync=all(r.params_in_sync for r in runs),
            )
        )
    return tuple(rows)
