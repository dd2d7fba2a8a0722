"""The checks on what the user asked that need no cluster: numbers in range, names that exist,
settings that fit together. Each failure is a PlanError saying what to pass instead. Pure."""

from __future__ import annotations

import math
import re

from runner.errors import PlanError
from runner.plan.launchers import LAUNCHERS
from runner.plan.registry import lookup
from runner.spec.request import (
    AllreduceSpec,
    BenchSpec,
    HealthGate,
    LaunchRequest,
    RunSpec,
    ScalingMode,
)
from runner.workloads.sizes import message_sizes


def check_seconds(flag: str, value: float) -> None:
    """A duration in seconds: a finite number above 0 (nan and inf reach int() and sleep())."""
    if not math.isfinite(value) or value <= 0:
        raise PlanError(
            f"{flag} must be a number of seconds above 0",
            why=f"got {value:g}",
            fix=f"pass e.g. {flag} 600",
        )


_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DTYPES = ("float32", "bfloat16", "float16")  # the all-reduce workload's --dtype choices


def check_launch(request: LaunchRequest) -> None:
    """Reject launch settings no node count could run, before anything starts."""
    if request.procs_per_node < 1:
        raise PlanError("--procs-per-node must be at least 1", why=f"got {request.procs_per_node}")
    if not 1 <= request.rdzv_port <= 65534:
        raise PlanError("--port must be between 1 and 65534", why=f"got {request.rdzv_port}")
    for key, _ in request.env:
        if not _ENV_KEY.match(key):
            raise PlanError(
                f"--env {key!r} is not a valid variable name",
                why="names are letters, digits and underscores, not starting with a digit",
                fix="pass --env NAME=VALUE",
            )
    if request.launch.zero_stage not in (None, 1, 2, 3):
        raise PlanError("--zero-stage must be 1, 2 or 3", why=f"got {request.launch.zero_stage}")
    if request.launch.tf_ps < 1:
        raise PlanError("--tf-ps must be at least 1", why=f"got {request.launch.tf_ps}")
    lookup("launcher", request.launcher, LAUNCHERS)


def check_bench(bench: BenchSpec) -> None:
    """The sweep's own numbers; the per-point checks happen as its points are resolved."""
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
        "--project-tokens": bench.project_tokens,
    }
    for flag, value in positive.items():
        if value <= 0:
            raise PlanError(f"{flag} must be at least 1", why=f"got {value}")
    check_seconds("--timeout", bench.timeout_s)
    if not 0 < bench.target_efficiency <= 1:  # also refuses nan
        raise PlanError(
            "--target-efficiency must be a fraction above 0 and at most 1",
            why=f"got {bench.target_efficiency:g}",
            fix="pass e.g. --target-efficiency 0.9 for 90%",
        )
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
    if bench.global_batch is not None:
        if bench.global_batch < 1:
            raise PlanError("--global-batch must be at least 1", why=f"got {bench.global_batch}")
        if bench.mode is ScalingMode.WEAK:
            raise PlanError(
                "--global-batch fixes the batch of strong scaling, and the mode is weak",
                why="weak scaling keeps --batch per process, so the global batch grows with "
                "the nodes",
                fix="pass --mode strong with --global-batch, or --batch for weak scaling",
            )
    if model.d_model % model.heads:
        raise PlanError(
            "--d-model must be a multiple of --heads",
            why=f"{model.d_model} is not divisible by {model.heads}",
        )
    check_allreduce(bench.allreduce)
    check_health(bench.health)
    check_launch(bench)


def check_allreduce(spec: AllreduceSpec) -> None:
    """Reject all-reduce settings the workload would refuse, before anything starts."""
    if spec.sizes is not None:
        try:
            message_sizes(spec.sizes)
        except ValueError as exc:
            raise PlanError(
                f"--sizes {spec.sizes!r} is not a list of message sizes",
                why=str(exc),
                fix="pass MIN:MAX (doubling, as nccl-tests -b/-e), e.g. 4K:64M, or a list: 1M,16M",
            ) from None
    if spec.dtype not in DTYPES:
        raise PlanError(
            f"--ar-dtype {spec.dtype!r} is not a type the all-reduce measures",
            fix=f"pass one of {', '.join(DTYPES)}",
        )
    if spec.iters < 1:
        raise PlanError("--ar-iters must be at least 1", why=f"got {spec.iters}")
    if spec.warmup < 0:
        raise PlanError("--ar-warmup must be 0 or more", why=f"got {spec.warmup}")


def check_health(gate: HealthGate) -> None:
    if gate.threshold_gbs is not None and not (0 < gate.threshold_gbs < math.inf):
        raise PlanError(
            "--health-threshold must be more than 0 GB/s", why=f"got {gate.threshold_gbs:g}"
        )
    if gate.size is not None:
        try:
            sizes = message_sizes(gate.size)
        except ValueError as exc:
            sizes, why = [], str(exc)
        else:
            why = f"it names {len(sizes)} sizes"
        if len(sizes) != 1:
            raise PlanError(
                f"--health-size {gate.size!r} is not one message size",
                why=why,
                fix="pass one size, e.g. --health-size 8G (Azure's health check)",
            )


def check_run(run: RunSpec) -> None:
    if run.nodes < 1:
        raise PlanError("--nodes must be at least 1", why=f"got {run.nodes}")
    if run.timeout_s is not None:
        check_seconds("--timeout", run.timeout_s)
    if not run.program.target:
        raise PlanError(
            "dtrun run needs a command to run",
            why="nothing came after the options",
            fix="pass the command after --, e.g. dtrun run --nodes 2 -- python train.py",
        )
    check_launch(run)
