"""A pipeline's stages in the report: what each holds, its predicted share of the work, and its
measured compute (docs/report.md "Pipeline stages").

The predicted shares come with the results (the workload counted them with
runner/workloads/stagecost.py); the even and balanced splits' slowest stages, for comparison, are
counted here from the model's shape with the same module. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dtrun.workloads.stagecost import Shape, shares, split, stage_costs

if TYPE_CHECKING:  # results.py reads a result's split with parse_stage_split below
    from dtrun.report.results import TrainResult


@dataclass(frozen=True)
class StageSplit:
    """A pipeline launch's split, as its result records it (docs/workloads.md "Stage split")."""

    kind: str  # --stage-split: even or balanced
    blocks: tuple[int, ...]  # by stage
    cost_share: tuple[float, ...]  # of the training FLOPs per token, predicted
    param_share: tuple[float, ...]
    time_s: tuple[float, ...] | None  # each stage's compute, timed alone; None: not probed


def parse_stage_split(data: Mapping[str, Any]) -> StageSplit | None:
    """The split's fields of a result; None where it has none (another strategy, an older
    result). Malformed fields raise KeyError, TypeError or ValueError, as parse_train_result's."""
    if data.get("stage_split") is None:
        return None
    blocks = tuple(int(n) for n in data["stage_blocks"])

    def by_stage(name: str, value: Any) -> tuple[float, ...]:
        values = tuple(float(x) for x in value)
        if len(values) != len(blocks):
            raise ValueError(f"'{name}' has {len(values)} stages, 'stage_blocks' {len(blocks)}")
        return values

    times = data.get("stage_time_s")
    return StageSplit(
        kind=str(data["stage_split"]),
        blocks=blocks,
        cost_share=by_stage("stage_cost_share", data["stage_cost_share"]),
        param_share=by_stage("stage_param_share", data["stage_param_share"]),
        time_s=None if times is None else by_stage("stage_time_s", times),
    )


@dataclass(frozen=True)
class StageRow:
    stage: int
    rank: int  # the rank of its pipeline that holds it
    holds: str  # "embedding, blocks 0-3", "blocks 4-7, LM head"
    cost_share: float  # of the model's training FLOPs per token, predicted
    param_share: float
    time_s: float | None  # forward and backward over one step's micro-batches, timed alone
    time_share: float | None  # of the stages' times together


@dataclass(frozen=True)
class StageTable:
    """One node count's pipeline stages (its first launch)."""

    nodes: int
    split: str  # --stage-split
    rows: tuple[StageRow, ...]
    even_slowest: float  # the slowest stage's share of the FLOPs, split evenly
    balanced_slowest: float  # and balanced by counted FLOPs (a launch balances by measured time)

    @property
    def slowest(self) -> float:
        return max(row.cost_share for row in self.rows)

    @property
    def slowest_time_s(self) -> float | None:
        times = [row.time_s for row in self.rows if row.time_s is not None]
        return max(times) if len(times) == len(self.rows) else None


def stage_tables(
    trained: Mapping[int, Sequence[TrainResult]], model: Mapping[str, Any]
) -> tuple[StageTable, ...]:
    """Every node count whose first launch ran a pipeline of two or more stages with its split
    recorded (results from before --stage-split have none: no table). ``model`` is read only
    for a table: the manifest's shape checks it for training runs, not a program's, whose
    manifest holding another model was a TypeError in `dtrun report`."""
    tables = []
    for nodes, results in sorted(trained.items()):
        first = results[0].split if results else None
        if first is not None and len(first.blocks) > 1:
            shape = Shape(*(int(model[key]) for key in ("layers", "d_model", "seq_len", "vocab")))
            tables.append(_table(nodes, first, results[0].pp_size, shape))
    return tuple(tables)


def _table(nodes: int, result: StageSplit, pp_size: int | None, shape: Shape) -> StageTable:
    blocks = result.blocks
    count, pp = len(blocks), pp_size or len(blocks)
    times = result.time_s
    total = sum(times) if times else 0.0
    rows, start = [], 0
    for stage, held in enumerate(blocks):
        time_s = times[stage] if times else None
        rows.append(
            StageRow(
                stage=stage,
                rank=stage % pp,
                holds=_holds(stage, count, start, held),
                cost_share=result.cost_share[stage],
                param_share=result.param_share[stage],
                time_s=time_s,
                time_share=None if time_s is None or total <= 0 else time_s / total,
            )
        )
        start += held
    return StageTable(
        nodes,
        result.kind,
        tuple(rows),
        even_slowest=_slowest(shape, "even", count),
        balanced_slowest=_slowest(shape, "balanced", count),
    )


def _slowest(shape: Shape, kind: str, stages: int) -> float:
    return max(shares(stage_costs(shape, split(kind, shape, stages)))[0])


def _holds(stage: int, count: int, start: int, held: int) -> str:
    blocks = f"block {start}" if held == 1 else f"blocks {start}-{start + held - 1}"
    parts = [blocks]
    if stage == 0:
        parts.insert(0, "embedding")
    if stage == count - 1:
        parts.append("LM head")
    return ", ".join(parts)
