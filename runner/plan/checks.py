"""The checks on what the user asked that need no cluster: numbers in range (each declared on
its field: runner/spec/bounds.py), names that exist, settings that fit together (each group's
rules). Each failure is a PlanError saying what to pass instead. Pure."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection

from dtrun.errors import PlanError
from dtrun.plan.launchers import LAUNCHERS
from dtrun.plan.registry import lookup
from dtrun.plan.steppattern import compile_step_pattern
from dtrun.spec.bounds import Bound, bound_of, bounds_on, shown
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


def check_bound(bound: Bound, value: float) -> None:
    """A number inside its option's range; nan and inf never are (they reach int(), sleep()
    and the nodes' tools)."""
    if not bound.holds(value):
        raise PlanError(
            f"{bound.flag} must be {bound.rule}",
            why=f"got {shown(value)}",
            fix="the range of every option is in docs/bench.md, Bounds",
        )


def check_fields(group: object, but: Collection[str] = ()) -> None:
    """Every number of ``group`` (a spec, an options class) inside the range its field
    declares; None (not given) passes. ``but``: fields whose rule the caller checks."""
    values = {field.name: getattr(group, field.name) for field in dataclasses.fields(group)}  # type: ignore[arg-type]
    for name, bound in bounds_on(type(group)).items():
        if name not in but and values[name] is not None:
            check_bound(bound, values[name])


def check_launch(request: LaunchRequest) -> None:
    """Reject launch settings no node count could run, before anything starts (the numbers:
    check_fields, by check_bench and check_run)."""
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
    check_fields(request.launch)  # --tf-ps
    lookup("launcher", request.launcher, LAUNCHERS)


def check_bench(bench: BenchSpec) -> None:
    """The sweep's own numbers and rules; the per-point checks happen as its points are
    resolved."""
    check_fields(bench, but=("node_counts", "warmup", "max_launches", "target_efficiency"))
    check_model(bench.model)
    if bench.until_decided:
        check_max_launches(bench.max_launches)
    target = bound_of(BenchSpec, "target_efficiency")
    if not target.holds(bench.target_efficiency):
        raise PlanError(
            f"--target-efficiency must be {target.rule}",
            why=f"got {bench.target_efficiency:g}",
            fix="pass e.g. --target-efficiency 0.9 for 90%",
        )
    nodes = bound_of(BenchSpec, "node_counts")
    if not bench.node_counts or not all(nodes.holds(n) for n in bench.node_counts):
        raise PlanError(
            f"--nodes needs node counts of {nodes.rule}",
            why=f"got {','.join(map(str, bench.node_counts)) or 'nothing'}",
            fix="pass e.g. --nodes 1,2,4",
        )
    if bench.program is not None:  # your program decides its steps: --warmup alone is checked
        check_bound(bound_of(BenchSpec, "warmup"), bench.warmup)
    elif not 0 <= bench.warmup < bench.steps:
        raise PlanError(
            "--warmup must be at least 0 and less than --steps",
            why=f"warm-up {bench.warmup}, steps {bench.steps}: no step would be timed",
        )
    if bench.global_batch is not None and bench.mode is ScalingMode.WEAK:
        raise PlanError(
            "--global-batch fixes the batch of strong scaling, and the mode is weak",
            why="weak scaling keeps --batch per process, so the global batch grows with the nodes",
            fix="pass --mode strong with --global-batch, or --batch for weak scaling",
        )
    if bench.step_pattern is not None:  # RE2 takes it, with one of `seconds` and `ms` at most
        compile_step_pattern(bench.step_pattern)
    check_allreduce(bench.allreduce)
    check_health(bench.health)
    check_launch(bench)


def check_model(model: ModelSpec) -> None:
    """The model's numbers, and the rule between two of them."""
    check_fields(model)
    if model.d_model % model.heads:
        raise PlanError(
            "--d-model must be a multiple of --heads",
            why=f"{model.d_model} is not divisible by {model.heads}",
        )


def check_max_launches(most: int) -> None:
    """--until-decided's most launches a node count, in its range (2 at least: one launch
    shows nothing of how much a launch moves)."""
    bound = bound_of(BenchSpec, "max_launches")
    ceiling = int(bound.high)
    if not bound.holds(most):
        raise PlanError(
            f"--max-launches {shown(most)} is out of range: --until-decided takes at least "
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
    check_fields(spec)  # --ar-warmup, --ar-iters


def check_health(gate: HealthGate) -> None:
    check_fields(gate)  # --health-threshold
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
    check_fields(run)  # --nodes, --timeout, --procs-per-node, --port
    if not run.program.target:
        raise PlanError(
            "dtrun run needs a command to run",
            why="nothing came after the options",
            fix="pass the command after --, e.g. dtrun run --nodes 2 -- python train.py",
        )
    check_launch(run)
