"""The checks on what the user asked that need no cluster: numbers in range (each declared on
its field: runner/spec/bounds.py), names that exist, settings that fit together (each group's
rules, and which options go together: bench's launches and program units, predict's inputs,
prices). Each failure is a UsageError saying what to pass instead (exit 2). Pure."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection

from dtrun.errors import PlanError, UsageError
from dtrun.plan.launchers import LAUNCHERS
from dtrun.plan.registry import lookup
from dtrun.plan.steppattern import compile_step_pattern
from dtrun.spec.bounds import Bound, bound_of, bounds_on, shown
from dtrun.spec.request import (
    BUSBW,
    DEFAULT_MAX_LAUNCHES,
    EMBEDDED_MAX_LAUNCHES,
    MIN_LAUNCHES,
    UNIT_BOUNDS,
    AllreduceSpec,
    BenchSpec,
    HealthGate,
    LaunchRequest,
    ModelSpec,
    RunSpec,
    ScalingMode,
    StepUnits,
    UnitKind,
)
from dtrun.workloads.sizes import message_sizes

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Variables that change how bash itself runs the launch scripts dtrun writes, and every shell
# a launcher starts (pdsh's, mpirun's and horovodrun's ssh): a file sourced first, options,
# xtrace's prefix (expanded, so it runs commands), word splitting, globbing, cd's search path.
# The shells' entries of sudo's table of variables it never passes on (sudo's env.c,
# initial_badenv_table; docs/security.md, "Run directories are data").
SHELL_STARTUP = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "GLOBIGNORE", "CDPATH")
# dtrun's variables on the nodes (the launch's tag, the step hook's, the node's name): an --env
# of that name would replace them in the launch script, and a stop would no longer find the
# launch's processes by their tag (runner/execute/guard.py)
OWN_PREFIX = "DTRUN_"
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
        if key.startswith(OWN_PREFIX):
            raise PlanError(
                f"--env {key} names one of dtrun's own variables on the nodes",
                why="dtrun sets them itself: DTRUN_LAUNCH tags every process of a launch so a "
                "stop finds them all, the step hook's DTRUN_STEP_DIR and DTRUN_WARMUP follow "
                "--warmup and the run directory",
                fix=f"leave out --env {key}; use dtrun's options (--warmup) for what it sets",
            )
        if key in SHELL_STARTUP:
            raise PlanError(
                f"--env {key} changes how bash runs dtrun's launch scripts, not your program",
                why=f"dtrun never exports {', '.join(SHELL_STARTUP)}: each makes the shell "
                "source a file, trace, split or glob differently before the program starts",
                fix=f"leave out --env {key}; set what your program needs in its own variables",
            )
    if request.launch.zero_stage not in (None, 1, 2, 3):
        raise PlanError(
            "--zero-stage must be 1, 2 or 3",
            why=f"got {request.launch.zero_stage}",
            fix="pass --zero-stage 1, 2 or 3, or --strategy zero1, zero2 or zero3",
        )
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
    check_node_counts(bench.node_counts)
    if bench.program is not None:  # your program decides its steps: --warmup alone is checked
        check_bound(bound_of(BenchSpec, "warmup"), bench.warmup)
    elif not 0 <= bench.warmup < bench.steps:
        raise PlanError(
            "--warmup must be at least 0 and less than --steps",
            why=f"warm-up {bench.warmup}, steps {bench.steps}"
            + (": no step would be timed" if bench.warmup >= bench.steps else ""),
            fix=f"pass --warmup from 0 to {max(bench.steps - 1, 0)}, or more --steps",
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


def check_node_counts(counts: tuple[int, ...]) -> None:
    """--nodes of bench and predict: one count at least, each in its range."""
    nodes = bound_of(BenchSpec, "node_counts")
    wrong = [n for n in counts if not nodes.holds(n)]
    if not counts or wrong:
        # the counts out of range, each cut short (``shown``), the first few: not 5,000 digits
        got = ", ".join(shown(n) for n in wrong[:3]) + (", ..." if len(wrong) > 3 else "")
        raise PlanError(
            f"--nodes needs node counts of {nodes.rule}",
            why=f"got {got or 'nothing'}",
            fix="pass e.g. --nodes 1,2,4",
        )


def check_model(model: ModelSpec) -> None:
    """The model's numbers, and the rule between two of them."""
    check_fields(model)
    if model.d_model % model.heads:
        raise PlanError(
            "--d-model must be a multiple of --heads",
            why=f"{model.d_model} is not divisible by {model.heads}",
            fix=f"pass --d-model {_multiple(model.d_model, model.heads)} or --heads dividing "
            f"{model.d_model}",
        )


def _multiple(width: int, heads: int) -> int:
    """A multiple of ``heads`` near ``width``: the one below, else ``heads`` (in range both)."""
    return max(width // heads * heads, heads)


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
            f"(default {DEFAULT_MAX_LAUNCHES}, {EMBEDDED_MAX_LAUNCHES} on the embedded cluster)",
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


def launches(
    *,
    until_decided: bool,
    repeat: int | None,
    max_launches: int | None,
    workload: str,
    node_counts: tuple[int, ...],
    most: int = DEFAULT_MAX_LAUNCHES,
) -> dict[str, int | bool]:
    """The spec's ``until_decided``, ``repeat`` and ``max_launches`` from the options as given
    (None: not given): --repeat's fixed launches, or, launching until decided, the most
    launches a node count may take (--max-launches; not given: ``most``, the engine's). Until
    decided is the default where it can decide: training (or a program) at 2+ node counts, no
    --repeat (docs/report.md, "Stopping when decided"; the figures behind it:
    docs/benchmarks.md)."""
    fixed = repeat is not None
    if until_decided and fixed:
        raise UsageError(
            "--until-decided launches until each point decides, and --repeat fixes the launches",
            fix="bound --until-decided with --max-launches N instead of --repeat",
        )
    if until_decided and workload == "allreduce":
        raise UsageError(
            "--until-decided stops on a point's scaling verdict, and the allreduce workload "
            "gives none",
            fix="leave out --until-decided (or measure training: --workload train)",
        )
    if until_decided and len(set(node_counts)) < 2:
        raise UsageError(
            "--until-decided stops on a point's scaling verdict against the smallest node "
            f"count, and --nodes gives one node count ({node_counts[0]})",
            fix="give two or more node counts (--nodes 1,2), or leave out --until-decided",
        )
    decides = workload != "allreduce" and len(set(node_counts)) > 1
    deciding = until_decided or (decides and not fixed)
    if not deciding and max_launches is not None:
        why = "fixed by --repeat" if fixed else "fixed: it has no scaling verdict to wait for"
        raise UsageError(
            f"--max-launches bounds launching until decided, and this sweep's launches are {why}",
            fix="leave out --max-launches, or --repeat (a training sweep of 2+ node counts "
            "launches until decided without it)",
        )
    return {
        "until_decided": deciding,
        "repeat": BenchSpec.repeat if repeat is None else repeat,
        "max_launches": most if max_launches is None else max_launches,
    }


def step_units(
    counts: dict[UnitKind, int | None],
    *,
    per_process: bool,
    mode: ScalingMode,
    program: bool,
    describing: str | None,
) -> StepUnits | None:
    """What one step of the user's program processes, from --samples-per-step or
    --tokens-per-step (``counts``, None: not given) and --per-process; ``describing``: the
    first other option given that describes a program's steps (--step-pattern, --probe), which
    needs a program as the units do."""
    given = [(kind, count) for kind, count in counts.items() if count is not None]
    if not program:
        flag = UNIT_BOUNDS[given[0][0]].flag if given else "--per-process" if per_process else ""
        if flag or describing:
            raise UsageError(
                f"{flag or describing} describes your program's steps, and no program was given",
                fix="put your program after --, e.g. dtrun bench --nodes 1,2 -- python train.py",
            )
        return None
    if len(given) > 1:
        raise UsageError(
            "--samples-per-step and --tokens-per-step are two units for one throughput",
            fix="pass one of them",
        )
    if not given:
        if per_process:
            raise UsageError(
                "--per-process says how --samples-per-step or --tokens-per-step count",
                fix="pass one of them too, or leave out --per-process",
            )
        return None
    ((kind, count),) = given
    bound = UNIT_BOUNDS[kind]
    check_bound(bound, count)
    weak = mode is ScalingMode.WEAK
    if weak != per_process:  # what a step processes must grow as the mode says
        raise UsageError(
            f"{bound.flag} {count} counts "
            + ("each process's share" if per_process else "the whole step")
            + f", and --mode {mode.value} "
            + (
                "keeps each process's batch, so a step's total grows with the processes"
                if weak
                else "keeps the global batch, so a step's total stays the same"
            ),
            fix=(
                f"pass --per-process with each process's {kind.value}"
                if weak
                else f"leave out --per-process and give the step's whole {kind.value}"
            )
            + ", or the other --mode if your program does that",
        )
    return StepUnits(kind, count, per_process)


def check_usd(bound: Bound, value: float | None, given: str = "") -> float | None:
    """A money option: a finite amount above zero (0 would cost every sweep at nothing), at
    most its ceiling (its field's range: runner/spec/request.py). ``given``: the text it was
    read from, shown as the user wrote it (1e-320, not 9.99989e-321)."""
    if value is None or bound.holds(value):
        return value
    flag = bound.flag
    raise UsageError(
        f"{flag} {given or format(value, 'g')} is not a price",
        why=f"an amount of US dollars {bound.rule} is needed",
        fix=f"pass e.g. {flag} 98.32, or leave it out",
    )


def check_predict(
    *, sources: int, counts: tuple[int, ...], target: float, size: str | None, busbw: float | None
) -> None:
    """`dtrun predict`: one source of results (a run directory or --from; ``sources`` given),
    the node counts to predict, the target, and one busbw at most (--size or --busbw)."""
    if sources != 1:
        raise UsageError(
            "dtrun predict needs a run directory or --from FILE, one of them",
            fix="dtrun predict runs/<run-id> --nodes 8,16, or dtrun predict --from "
            "measured.yaml --nodes 8,16",
        )
    if not counts:
        raise UsageError(
            "--nodes is needed: the node counts to predict", fix="pass e.g. --nodes 8,16,32"
        )
    check_node_counts(counts)
    check_bound(bound_of(BenchSpec, "target_efficiency"), target)
    if busbw is not None and not BUSBW.holds(busbw):  # not in docs/bench.md's Bounds
        raise UsageError(
            f"--busbw must be {BUSBW.rule}",
            why=f"got {shown(busbw)}",
            fix="pass the busbw across nodes in GB/s, e.g. --busbw 40",
        )
    if size is not None and busbw is not None:
        raise UsageError(
            "--size and --busbw both say the busbw",
            fix="pass one of them: --size for the catalog's busbw, --busbw for your own",
        )
