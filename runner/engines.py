"""How the built-in workloads train under each launcher: PyTorch DDP, or DeepSpeed with ZeRO.

A launcher names its engine (``Launcher.engine``); the engine adds its arguments and files to the
workload's. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from runner.spec import Accelerator, BenchSpec, Inventory, LaunchFile

DS_CONFIG = "ds_config.json"


@dataclass(frozen=True)
class EngineSetup:
    args: tuple[str, ...] = ()  # appended to the workload's own arguments
    files: tuple[LaunchFile, ...] = ()  # written beside the launch scripts


class Engine(Protocol):
    name: str

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch_per_proc: int, world_size: int
    ) -> EngineSetup: ...


class Ddp:
    """PyTorch DistributedDataParallel: the workload needs nothing more."""

    name = "ddp"

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch_per_proc: int, world_size: int
    ) -> EngineSetup:
        return EngineSetup()


class DeepSpeed:
    """DeepSpeed with the ZeRO stage asked for, from a generated config.

    The config has no "optimizer" block on purpose: the workload hands DeepSpeed a torch AdamW,
    because DeepSpeed's own would compile fused Adam first (about 45 s on CPU, FACTS s8).
    """

    name = "deepspeed"

    def setup(
        self, bench: BenchSpec, inventory: Inventory, batch_per_proc: int, world_size: int
    ) -> EngineSetup:
        config = {
            # DeepSpeed checks train = micro x accumulation x world; dtrun accumulates nothing.
            "train_batch_size": batch_per_proc * world_size,
            "train_micro_batch_size_per_gpu": batch_per_proc,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": bench.launch.zero_stage},
            # bf16 on GPUs, as the DDP workload's autocast; CPU trains in float32.
            "bf16": {"enabled": inventory.accelerator is Accelerator.CUDA},
            # The workload prints its own progress; DeepSpeed's per-step log would drown it.
            "steps_per_print": 1_000_000_000,
            "wall_clock_breakdown": False,
        }
        content = json.dumps(config, indent=2) + "\n"
        return EngineSetup(("--deepspeed-config", DS_CONFIG), (LaunchFile(DS_CONFIG, content),))


ENGINES: dict[str, Engine] = {engine.name: engine for engine in (Ddp(), DeepSpeed())}
