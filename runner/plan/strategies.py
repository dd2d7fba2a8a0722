"""How the built-in training workload trains: one registry entry per strategy. Pure: no I/O.

``--launcher`` picks how the processes start, ``--strategy`` how the model trains on them; every
strategy runs under every launcher that runs the built-in workloads (DeepSpeed's engine and
torch.distributed both read the environment contract). A strategy names the workload module
family it runs (``framework``), checks each point of a sweep before anything starts, and adds its
arguments and launch files to the workload's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dtrun.errors import PlanError
from dtrun.plan.checks import check_fields
from dtrun.spec.cluster import Accelerator, Inventory
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import (
    BenchSpec,
    Framework,
    PipelineSchedule,
    StageSplit,
    StrategySpec,
    TrainDtype,
)

DS_CONFIG = "ds_config.json"


def bf16(bench: BenchSpec, inventory: Inventory) -> bool:
    """Whether the training workload computes in bfloat16: asked, or by default on GPUs (where
    MFU is measured against the bf16 peak)."""
    if bench.dtype is TrainDtype.AUTO:
        return inventory.accelerator is Accelerator.CUDA
    return bench.dtype is TrainDtype.BFLOAT16


@dataclass(frozen=True)
class StrategySetup:
    args: tuple[str, ...] = ()  # appended to the workload's own arguments
    files: tuple[LaunchFile, ...] = ()  # written beside the launch scripts


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def framework(self) -> Framework:
        """What it trains with, which picks the workload's module (runner/plan/workloads.py):
        torch.distributed (train.py: DDP, FSDP, pipelines) or DeepSpeed (train_deepspeed.py)."""
        ...

    def replicas(self, bench: BenchSpec, world_size: int) -> int:
        """Data-parallel replicas of the model, which split the global batch between them."""
        ...

    def check(self, bench: BenchSpec, world_size: int, batch: int) -> None:
        """Refuse a point this strategy cannot run (``batch``: sequences per replica)."""
        ...

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch: int, world_size: int
    ) -> StrategySetup: ...


def _refuse_pipeline_options(spec: StrategySpec, strategy: str) -> None:
    given = {
        "--schedule": spec.schedule,
        "--micro-batches": spec.micro_batches,
        "--pp-size": spec.pp_size,
        "--stages-per-rank": spec.stages_per_rank,
        "--stage-split": spec.stage_split,
    }
    named = [flag for flag, value in given.items() if value is not None]
    if named:
        raise PlanError(
            f"{', '.join(named)} only apply to the pipeline strategy",
            why=f"the strategy is {strategy}",
            fix=f"pass --strategy pipeline, or leave out {', '.join(named)}",
        )


@dataclass(frozen=True)
class TorchDataParallel:
    """Data parallelism in torch.distributed: DDP (replicas) or FSDP (sharded, fully_shard);
    or with Horovod's DistributedOptimizer (replicas; framework HOROVOD: train_horovod.py)."""

    name: str
    args: tuple[str, ...]  # the workload's --strategy (DDP is its default: none)
    framework: Framework = Framework.TORCH

    def replicas(self, bench: BenchSpec, world_size: int) -> int:
        return world_size

    def check(self, bench: BenchSpec, world_size: int, batch: int) -> None:
        _refuse_pipeline_options(bench.strategy, self.name)

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch: int, world_size: int
    ) -> StrategySetup:
        return StrategySetup(self.args)


@dataclass(frozen=True)
class Zero:
    """DeepSpeed with one ZeRO stage, from a generated config.

    The config has no "optimizer" block on purpose: the workload hands DeepSpeed a torch AdamW,
    because DeepSpeed's own would compile fused Adam first (about 45 s on CPU, docs/facts.md §8).
    """

    stage: int
    framework: Framework = Framework.DEEPSPEED

    @property
    def name(self) -> str:
        return f"zero{self.stage}"

    def replicas(self, bench: BenchSpec, world_size: int) -> int:
        return world_size

    def check(self, bench: BenchSpec, world_size: int, batch: int) -> None:
        _refuse_pipeline_options(bench.strategy, self.name)

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch: int, world_size: int
    ) -> StrategySetup:
        config = {
            # DeepSpeed checks train = micro x accumulation x world; dtrun accumulates nothing.
            "train_batch_size": batch * world_size,
            "train_micro_batch_size_per_gpu": batch,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": self.stage},
            # bf16 as the torch strategies' autocast: by default on GPUs, float32 on CPUs.
            "bf16": {"enabled": bf16(bench, inventory)},
            # The workload prints its own progress; DeepSpeed's per-step log would drown it.
            "steps_per_print": 1_000_000_000,
            "wall_clock_breakdown": False,
        }
        content = json.dumps(config, indent=2) + "\n"
        return StrategySetup(("--deepspeed-config", DS_CONFIG), (LaunchFile(DS_CONFIG, content),))


@dataclass(frozen=True)
class ScheduleRule:
    """What a torch.distributed.pipelining schedule needs (checked against torch 2.13)."""

    stages_per_rank: int  # the default
    looped: bool  # True: 2+ stages per rank (a "looped" schedule); False: exactly one
    # (micro-batches, ranks per pipeline) -> why that cannot run, or None
    micro_batches_refused: Callable[[int, int], str | None]


def _any_count(micro_batches: int, pp: int) -> str | None:
    return None


def _at_least_one_per_stage(micro_batches: int, pp: int) -> str | None:
    # Schedule1F1B: "Number of microbatches must be greater than or equal to the number of
    # stages", since its warm-up fills every stage before the first backward.
    if micro_batches < pp:
        return f"1f1b needs at least as many micro-batches as stages ({pp})"
    return None


def _whole_rounds(micro_batches: int, pp: int) -> str | None:
    # ScheduleInterleaved1F1B runs max(1, M // pp) rounds of equal size.
    rounds = max(1, micro_batches // pp)
    if micro_batches % rounds:
        return (
            f"interleaved-1f1b runs {rounds} rounds of micro-batches over {pp} ranks, and "
            f"{micro_batches} is not a multiple of {rounds}"
        )
    return None


SCHEDULES: dict[PipelineSchedule, ScheduleRule] = {
    PipelineSchedule.GPIPE: ScheduleRule(1, looped=False, micro_batches_refused=_any_count),
    PipelineSchedule.ONE_F_ONE_B: ScheduleRule(
        1, looped=False, micro_batches_refused=_at_least_one_per_stage
    ),
    PipelineSchedule.INTERLEAVED_1F1B: ScheduleRule(
        2, looped=True, micro_batches_refused=_whole_rounds
    ),
}
DEFAULT_SCHEDULE = PipelineSchedule.ONE_F_ONE_B
DEFAULT_MICRO_BATCHES = 4


@dataclass(frozen=True)
class PipelineLayout:
    """One point's pipeline: ``pp`` ranks per pipeline, ``replicas`` pipelines side by side."""

    schedule: PipelineSchedule
    micro_batches: int
    pp: int
    replicas: int
    stages_per_rank: int
    stage_split: StageSplit = StageSplit.EVEN

    @property
    def stages(self) -> int:
        return self.pp * self.stages_per_rank


class Pipeline:
    """Pipeline parallelism with torch.distributed.pipelining: the GPT's blocks split into
    stages over the ranks of each pipeline; data parallel between pipelines."""

    name = "pipeline"
    framework = Framework.TORCH

    def layout(self, bench: BenchSpec, world_size: int) -> PipelineLayout:
        spec = bench.strategy
        check_fields(spec, but=("micro_batches", "stages_per_rank"))  # --pp-size: below
        pp = spec.pp_size if spec.pp_size is not None else world_size
        if world_size % pp:
            raise PlanError(
                f"--pp-size {pp} does not divide the {world_size} processes of a point",
                why="every pipeline needs --pp-size ranks, and the rest are its data-parallel "
                "replicas",
                fix="pass a --pp-size that divides every point's processes, or leave it out "
                "(one pipeline over all ranks)",
            )
        schedule = spec.schedule or DEFAULT_SCHEDULE
        stages_per_rank = spec.stages_per_rank or SCHEDULES[schedule].stages_per_rank
        micro_batches = spec.micro_batches or DEFAULT_MICRO_BATCHES
        return PipelineLayout(
            schedule, micro_batches, pp, world_size // pp, stages_per_rank,
            spec.stage_split or StageSplit.EVEN,
        )  # fmt: skip

    def replicas(self, bench: BenchSpec, world_size: int) -> int:
        return self.layout(bench, world_size).replicas

    def check(self, bench: BenchSpec, world_size: int, batch: int) -> None:
        layout = self.layout(bench, world_size)
        rule = SCHEDULES[layout.schedule]
        name = layout.schedule.value
        check_fields(bench.strategy)  # --micro-batches, --pp-size, --stages-per-rank
        if rule.looped and layout.stages_per_rank < 2:
            raise PlanError(
                f"{name} needs at least 2 stages per rank",
                why=f"--stages-per-rank is {layout.stages_per_rank}",
                fix="pass --stages-per-rank 2 or more, or leave it out",
            )
        if not rule.looped and layout.stages_per_rank != 1:
            raise PlanError(
                f"{name} runs one stage per rank",
                why=f"--stages-per-rank is {layout.stages_per_rank}",
                fix="pass --schedule interleaved-1f1b for more stages per rank",
            )
        if bench.model.layers < layout.stages:
            raise PlanError(
                f"a pipeline of {layout.stages} stages needs at least {layout.stages} layers",
                why=f"the model has {bench.model.layers} (--layers); each stage holds one or "
                f"more ({layout.pp} ranks x {layout.stages_per_rank} stages per rank)",
                fix="pass more --layers, a smaller --pp-size, or fewer --stages-per-rank",
            )
        if batch % layout.micro_batches:
            raise PlanError(
                f"--micro-batches {layout.micro_batches} does not divide the batch",
                why=f"each pipeline takes {batch} sequences per step at {world_size} processes",
                fix="pass a --micro-batches that divides the batch of every point",
            )
        refused = rule.micro_batches_refused(layout.micro_batches, layout.pp)
        if refused:
            raise PlanError(
                f"--micro-batches {layout.micro_batches} cannot run {name}",
                why=refused,
                fix="pass another --micro-batches",
            )

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch: int, world_size: int
    ) -> StrategySetup:
        layout = self.layout(bench, world_size)
        options = {
            "--strategy": self.name,
            "--schedule": layout.schedule.value,
            "--micro-batches": layout.micro_batches,
            "--pp-size": layout.pp,
            "--stages-per-rank": layout.stages_per_rank,
            "--stage-split": layout.stage_split.value,
        }
        return StrategySetup(tuple(str(part) for pair in options.items() for part in pair))


_ALL: tuple[Strategy, ...] = (
    TorchDataParallel("ddp", ()),
    TorchDataParallel("fsdp", ("--strategy", "fsdp")),
    TorchDataParallel("horovod", (), Framework.HOROVOD),
    Zero(1),
    Zero(2),
    Zero(3),
    Pipeline(),
)
STRATEGIES: dict[str, Strategy] = {strategy.name: strategy for strategy in _ALL}

# Without --strategy or --zero-stage, each launcher's own way to train (by its framework): the
# DeepSpeed launcher trains with DeepSpeed, as it did before strategies existed.
DEFAULT_STRATEGY: dict[Framework, str] = {
    Framework.TORCH: "ddp",
    Framework.DEEPSPEED: "zero2",
    Framework.HOROVOD: "horovod",
}


def strategy_name(bench: BenchSpec, launcher_framework: Framework) -> str:
    """--strategy; else --zero-stage N as short for zeroN; else the launcher's own."""
    name, stage = bench.strategy.name, bench.launch.zero_stage
    if name is None:
        return f"zero{stage}" if stage is not None else DEFAULT_STRATEGY[launcher_framework]
    if stage is not None and name != f"zero{stage}":
        raise PlanError(
            f"--zero-stage {stage} contradicts --strategy {name}",
            why="--zero-stage N is short for --strategy zeroN",
            fix=f"pass only --strategy {name}",
        )
    return name
