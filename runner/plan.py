"""build_plan: (inventory, bench spec, node count) -> LaunchPlan. Pure: no I/O, no clock."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from runner.catalog import peak_tflops_for
from runner.errors import PlanError
from runner.launchers import LAUNCHERS, PlanContext
from runner.render import render
from runner.spec import (
    Accelerator,
    BenchSpec,
    EnvVar,
    Inventory,
    LaunchPlan,
    NodeLaunch,
    ScalingMode,
)

RESULT_FILE = "result.json"  # written by rank 0 beside the launch scripts

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
T = TypeVar("T")

WorkloadArgs = Callable[[BenchSpec, Inventory, int], tuple[str, ...]]


def _train_args(bench: BenchSpec, inventory: Inventory, batch_per_proc: int) -> tuple[str, ...]:
    model = bench.model
    options: dict[str, object] = {
        "--steps": bench.steps,
        "--warmup": bench.warmup,
        "--batch": batch_per_proc,
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
    if inventory.accelerator is Accelerator.CUDA:
        options["--dtype"] = "bfloat16"  # MFU is measured against the bf16 peak
    peak = peak_tflops_for(inventory.size)
    if peak is not None:
        options["--peak-tflops"] = peak
    return tuple(str(part) for pair in options.items() for part in pair)


# Workload name -> (python module run on every process, its arguments).
WORKLOADS: dict[str, tuple[str, WorkloadArgs]] = {
    "train": ("runner.workloads.train", _train_args),
}


def lookup(kind: str, name: str, registry: Mapping[str, T]) -> T:
    """Find ``name`` in a registry, or say which names exist and which one was probably meant."""
    if name in registry:
        return registry[name]
    close = difflib.get_close_matches(name, list(registry), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise PlanError(
        f"unknown {kind} {name!r}",
        why=f"{hint}known {kind}s: {', '.join(sorted(registry))}",
        fix=f"pass --{kind} with one of those names",
    )


def validate_bench(bench: BenchSpec) -> None:
    """Reject a bench spec that no node count could run, before anything starts."""
    model = bench.model
    positive = {
        "--steps": bench.steps,
        "--procs-per-node": bench.procs_per_node,
        "--repeat": bench.repeat,
        "--batch": bench.batch,
        "--layers": model.layers,
        "--d-model": model.d_model,
        "--heads": model.heads,
        "--seq-len": model.seq_len,
        "--vocab": model.vocab,
        "--timeout": bench.timeout_s,
    }
    for flag, value in positive.items():
        if value <= 0:
            raise PlanError(f"{flag} must be at least 1", why=f"got {value}")
    if not bench.node_counts or any(n < 1 for n in bench.node_counts):
        raise PlanError(
            "--nodes needs node counts of at least 1",
            why=f"got {','.join(map(str, bench.node_counts)) or 'nothing'}",
            fix="pass e.g. --nodes 1,2,4",
        )
    if not 0 <= bench.warmup < bench.steps:
        raise PlanError(
            "--warmup must be at least 0 and less than --steps",
            why=f"warm-up {bench.warmup}, steps {bench.steps}: no step would be timed",
        )
    if model.d_model % model.heads:
        raise PlanError(
            "--d-model must be a multiple of --heads",
            why=f"{model.d_model} is not divisible by {model.heads}",
        )
    if not 1 <= bench.rdzv_port <= 65534:
        raise PlanError("--port must be between 1 and 65534", why=f"got {bench.rdzv_port}")
    for key, _ in bench.env:
        if not _ENV_KEY.match(key):
            raise PlanError(
                f"--env {key!r} is not a valid variable name",
                why="names are letters, digits and underscores, not starting with a digit",
                fix="pass --env NAME=VALUE",
            )
    lookup("launcher", bench.launcher, LAUNCHERS)
    lookup("workload", bench.workload, WORKLOADS)
    if bench.mode is ScalingMode.STRONG:
        for n in bench.node_counts:
            batch_per_proc(bench, n)


def batch_per_proc(bench: BenchSpec, nodes: int) -> int:
    """Weak scaling keeps each process's batch; strong scaling splits a fixed global batch."""
    if bench.mode is ScalingMode.WEAK:
        return bench.batch
    world = nodes * bench.procs_per_node
    total = bench.strong_global_batch()
    if total % world:
        raise PlanError(
            f"strong scaling cannot split a global batch of {total} over {world} processes",
            why=f"{total} is not divisible by {world} ({nodes} nodes x {bench.procs_per_node})",
            fix="pass a --global-batch divisible by every world size of the sweep",
        )
    return total // world


def base_env(threads_per_proc: int) -> tuple[EnvVar, ...]:
    return (
        EnvVar(
            "OMP_NUM_THREADS",
            str(threads_per_proc),
            "One share of the node's cores per process, so processes do not oversubscribe.",
        ),
        EnvVar(
            "PYTHONUNBUFFERED", "1", "Unbuffered output, so dtrun streams each line as written."
        ),
    )


def merge_env(base: Iterable[EnvVar], user: Iterable[tuple[str, str]]) -> tuple[EnvVar, ...]:
    """dtrun's settings first, the user's --env last; a user value replaces dtrun's."""
    merged: dict[str, EnvVar] = {var.key: var for var in base}
    for key, value in user:
        merged.pop(key, None)
        merged[key] = EnvVar(key, value, "")
    return tuple(merged.values())


def rdzv_id(run_id: str, nodes: int) -> str:
    return f"dtrun-{run_id}-n{nodes}"


def build_plan(inventory: Inventory, bench: BenchSpec, nodes: int) -> LaunchPlan:
    validate_bench(bench)
    if not 1 <= nodes <= len(inventory.nodes):
        raise PlanError(
            f"cannot run on {nodes} nodes",
            why=f"the inventory ({inventory.source}) holds {len(inventory.nodes)} node(s)",
            fix=f"pass --nodes with counts up to {len(inventory.nodes)}, or add nodes",
        )
    launcher = lookup("launcher", bench.launcher, LAUNCHERS)
    module, workload_args = lookup("workload", bench.workload, WORKLOADS)
    selected = inventory.nodes[:nodes]
    per_proc = batch_per_proc(bench, nodes)
    threads = max(1, min(node.cpus for node in selected) // bench.procs_per_node)
    ctx = PlanContext(
        run_id=bench.run_id,
        rdzv_id=rdzv_id(bench.run_id, nodes),
        nodes=selected,
        procs_per_node=bench.procs_per_node,
        master_addr=selected[0].address,
        master_port=bench.master_port,
        rdzv_port=bench.rdzv_port,
        join_timeout_s=int(bench.timeout_s),
        python_bin=inventory.python_bin,
        code_dir=inventory.code_dir,
        env=merge_env(base_env(threads), bench.env),
        workload_module=module,
        workload_args=workload_args(bench, inventory, per_proc),
    )
    launches = tuple(
        NodeLaunch(
            node=node,
            node_rank=rank,
            script_name=f"node-{rank}.sh",
            script=render(launcher.template, launcher.node_context(ctx, rank)),
        )
        for rank, node in enumerate(selected)
    )
    return LaunchPlan(
        launcher=launcher.name,
        workload=bench.workload,
        nnodes=nodes,
        procs_per_node=bench.procs_per_node,
        world_size=ctx.world_size,
        batch_per_proc=per_proc,
        rdzv_id=ctx.rdzv_id,
        master_addr=ctx.master_addr,
        master_port=ctx.master_port,
        launches=launches,
    )
