"""The built-in workloads a sweep measures: which module every process runs, by framework, and
the arguments it gets. A new built-in workload is one entry in ``WORKLOADS``. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dtrun.azure.sizefacts import peak_tflops_for
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import RESULT_FILE
from dtrun.spec.request import AllreduceSpec, BenchSpec, Framework

# (bench, inventory, sequences per replica, bf16) -> the workload's arguments
WorkloadArgs = Callable[[BenchSpec, Inventory, int, bool], tuple[str, ...]]


def _pairs(options: Mapping[str, object]) -> tuple[str, ...]:
    return tuple(str(part) for pair in options.items() for part in pair)


def train_args(
    bench: BenchSpec, inventory: Inventory, batch_per_replica: int, bf16: bool
) -> tuple[str, ...]:
    model = bench.model
    options: dict[str, object] = {
        "--steps": bench.steps,
        "--warmup": bench.warmup,
        "--batch": batch_per_replica,
        "--seq-len": model.seq_len,
        "--layers": model.layers,
        "--d-model": model.d_model,
        "--heads": model.heads,
        "--vocab": model.vocab,
        "--device": inventory.accelerator.value,
        "--mode": bench.mode.value,
        "--timeout": int(bench.timeout_s),
        "--out": RESULT_FILE,
    }
    if model.preset is not None:
        options["--preset"] = model.preset  # recorded in the result
    if bf16:
        options["--dtype"] = "bfloat16"
    peak = peak_tflops_for(inventory.size)
    if peak is not None:
        options["--peak-tflops"] = peak
    if bench.busbw:
        # After training, the same ranks time all-reduces up to the gradients' size.
        options["--busbw-iters"] = bench.allreduce.iters
    return _pairs(options)


def allreduce_args(
    spec: AllreduceSpec, inventory: Inventory, timeout_s: float, sizes: str | None = None
) -> tuple[str, ...]:
    return _pairs(
        {
            "--sizes": sizes or spec.sizes_for(inventory.accelerator),
            "--dtype": spec.dtype,
            "--warmup": spec.warmup,
            "--iters": spec.iters,
            "--device": inventory.accelerator.value,
            "--timeout": int(timeout_s),
            "--out": RESULT_FILE,
        }
    )


def _allreduce_args(bench: BenchSpec, inventory: Inventory, _: int, __: bool) -> tuple[str, ...]:
    return allreduce_args(bench.allreduce, inventory, bench.timeout_s)


@dataclass(frozen=True)
class Workload:
    name: str
    modules: Mapping[Framework, str]  # the Python module every process runs, by framework
    args: WorkloadArgs
    trains: bool = False  # True: it trains the GPT, and --strategy picks how (strategies.py)


ALLREDUCE_MODULE = "dtrun.workloads.allreduce"
WORKLOADS: dict[str, Workload] = {
    workload.name: workload
    for workload in (
        Workload(
            "train",
            {
                Framework.TORCH: "dtrun.workloads.train",
                Framework.DEEPSPEED: "dtrun.workloads.train_deepspeed",
                Framework.HOROVOD: "dtrun.workloads.train_horovod",
            },
            train_args,
            trains=True,
        ),
        # The same measurement under every launcher: torch.distributed's all-reduce (DeepSpeed
        # all-reduces through it too), or Horovod's under horovodrun.
        Workload(
            "allreduce",
            {
                Framework.TORCH: ALLREDUCE_MODULE,
                Framework.DEEPSPEED: ALLREDUCE_MODULE,
                Framework.HOROVOD: "dtrun.workloads.allreduce_horovod",
            },
            _allreduce_args,
        ),
    )
}


def _no_args(bench: BenchSpec, inventory: Inventory, _: int, __: bool) -> tuple[str, ...]:
    return ()


# `dtrun bench -- PROGRAM`: the user's own program, timed by the step hook (docs/your-training.md);
# not a --workload choice, and it runs no module of dtrun's.
PROGRAM_WORKLOAD = Workload("program", {}, _no_args)
