"""The checks on what the user asked that need no cluster: numbers in range, names that exist,
settings that fit together. Each failure is a PlanError saying what to pass instead. Pure."""

from __future__ import annotations

import re

from dtrun.errors import PlanError
from dtrun.plan.bounds import check_bound
from dtrun.plan.launchers import LAUNCHERS
from dtrun.plan.registry import lookup
from dtrun.plan.steppattern import compile_step_pattern
from dtrun.spec.bounds import BOUNDS
from dtrun.spec.request import (
    DEFAULT_MAX_LAUNCHES,
    MIN_LAUNCHES,
    AllreduceSpec,
    BenchSpec,
    HealthGate,
    LaunchRequest,
    ModelSpec,
    RunSpec,
    ScalingMode,
)
from dtrun.workloads.sizes import message_sizes

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Variables that change how bash itself runs the launch scripts dtrun writes, and every shell
# a launcher starts (pdsh's, mpirun's and horovodrun's ssh): a file sourced first, options,
# xtrace's prefix (expanded, so it runs commands), word splitting, globbing, cd's search path.
# The shells' entries of sudo's table of variables it never passes on (sudo's env.c,
# initial_badenv_table; docs/security.md, "Run directories are data").
SHELL_STARTUP = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "GLOBIGNORE", "CDPATH")
DTYPES = ("float32", "bfloat16", "float16")  # the all-reduce workload's --dtype choices


def check_launch(request: LaunchRequest) -> None:
    """Reject launch settings no node count could run, before anything starts."""
    check_bound("--procs-per-node", request.procs_per_node)
    check_bound("--port", request.rdzv_port)
    for key, _ in request.env:
        if not _ENV_KEY.match(key):
            raise PlanError(
                f"--env {key!r} is not a valid variable name",
                why="names are letters, digits and underscores, not starting with a digit",
                fix="pass --env NAME=VALUE",
            )
        if key in SHELL_STARTUP:
            raise PlanError(
                f"--env {key} changes how bash runs dtrun's launch scripts, not your program",
                why=f"dtrun never exports {', '.join(SHELL_STARTUP)}: each makes the shell "
                "source a file, trace, split or glob differently before the program starts",
                fix=f"leave out --env {key}; set what your program needs in its own variables",
            )
    if request.launch.zero_stage not in (None, 1, 2, 3):
        raise PlanError("--zero-stage must be 1, 2 or 3", why=f"got {request.launch.zero_stage}")
    check_bound("--tf-ps", request.launch.tf_ps)
    lookup("launcher", request.launcher, LAUNCHERS)


def check_bench(bench: BenchSpec) -> None:
    """The sweep's own numbers; the per-point checks happen as its points are resolved."""
    check_model(bench.model)
    numbers = {
        "--steps": bench.steps,
        "--procs-per-node": bench.procs_per_node,
        "--repeat": bench.repeat,
        "--batch": bench.batch,
        "--project-tokens": bench.project_tokens,
    }
    for flag, value in numbers.items():
        check_bound(flag, value)
    check_bound("--timeout", bench.timeout_s)
    if bench.until_decided:
        check_max_launches(bench.max_launches)
    if not BOUNDS["--target-efficiency"].holds(bench.target_efficiency):
        raise PlanError(
            f"--target-efficiency must be {BOUNDS['--target-efficiency'].rule}",
            why=f"got {bench.target_efficiency:g}",
            fix="pass e.g. --target-efficiency 0.9 for 90%",
        )
    nodes = BOUNDS["--nodes"]
    if not bench.node_counts or not all(nodes.holds(n) for n in bench.node_counts):
        raise PlanError(
            f"--nodes needs node counts of {nodes.rule}",
            why=f"got {','.join(map(str, bench.node_counts)) or 'nothing'}",
            fix="pass e.g. --nodes 1,2,4",
        )
    if bench.program is not None:  # your program decides its steps: --warmup alone is checked
        check_bound("--warmup", bench.warmup)
    elif not 0 <= bench.warmup < bench.steps:
        raise PlanError(
            "--warmup must be at least 0 and less than --steps",
            why=f"warm-up {bench.warmup}, steps {bench.steps}: no step would be timed",
        )
    if bench.global_batch is not None:
        check_bound("--global-batch", bench.global_batch)
        if bench.mode is ScalingMode.WEAK:
            raise PlanError(
                "--global-batch fixes the batch of strong scaling, and the mode is weak",
                why="weak scaling keeps --batch per process, so the global batch grows with "
                "the nodes",
                fix="pass --mode strong with --global-batch, or --batch for weak scaling",
            )
    if bench.step_pattern is not None:  # RE2 takes it, with one of `seconds` and `ms` at most
        compile_step_pattern(bench.step_pattern)
    check_allreduce(bench.allreduce)
    check_health(bench.health)
    check_launch(bench)


def check_model(model: ModelSpec) -> None:
    """The model's numbers, and the rule between two of them."""
    for flag, value in (
        ("--layers", model.layers),
        ("--d-model", model.d_model),
        ("--heads", model.heads),
        ("--seq-len", model.seq_len),
        ("--vocab", model.vocab),
    ):
        check_bound(flag, value)
    if model.d_model % model.heads:
        raise PlanError(
            "--d-model must be a multiple of --heads",
            why=f"{model.d_model} is not divisible by {model.heads}",
        )


def check_max_launches(most: int) -> None:
    """--until-decided's most launches a node count: 2 at least, --repeat's ceiling at most."""
    ceiling = int(BOUNDS["--repeat"].high)
    if not MIN_LAUNCHES <= most <= ceiling:
        raise PlanError(
            f"--max-launches {most} is out of range: --until-decided takes at least "
            f"{MIN_LAUNCHES} launches a node count (one shows nothing of how much a launch "
            f"moves), at most {ceiling}",
            fix=f"pass --max-launches between {MIN_LAUNCHES} and {ceiling} "
            f"(default {DEFAULT_MAX_LAUNCHES})",
        )


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
    check_bound("--ar-iters", spec.iters)
    check_bound("--ar-warmup", spec.warmup)


def check_health(gate: HealthGate) -> None:
    if gate.threshold_gbs is not None:
        check_bound("--health-threshold", gate.threshold_gbs)
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
    check_bound("--nodes", run.nodes)
    if run.timeout_s is not None:
        check_bound("--timeout", run.timeout_s)
    if not run.program.target:
        raise PlanError(
            "dtrun run needs a command to run",
            why="nothing came after the options",
            fix="pass the command after --, e.g. dtrun run --nodes 2 -- python train.py",
        )
    check_launch(run)
