"""Plans: (inventory, what to run, node count) -> LaunchPlan. Pure: no I/O, no clock.

``build_plan`` plans a point of a `dtrun bench` sweep (a built-in workload), ``build_run_plan``
the user's own program for `dtrun run`; both go through ``plan_launch``, so every launcher sees
the same environment, settings and checks whatever it runs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from runner.catalog import peak_tflops_for, size_env
from runner.errors import PlanError
from runner.launchers import LAUNCHERS, PlanContext
from runner.launchers.base import HOSTFILE, hostfile
from runner.render import render
from runner.spec import (
    AllreduceSpec,
    BenchSpec,
    EnvVar,
    HealthGate,
    Inventory,
    LauncherOptions,
    LaunchFile,
    LaunchPlan,
    NodeLaunch,
    Program,
    ProgramKind,
    RunSpec,
    ScalingMode,
    StrategySpec,
)
from runner.strategies import STRATEGIES, EngineSetup, Strategy, bf16, strategy_name
from runner.workloads.sizes import message_sizes

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
    if model.preset is not None:
        options["--preset"] = model.preset  # recorded in the result
    if bf16(bench, inventory):
        options["--dtype"] = "bfloat16"
    peak = peak_tflops_for(inventory.size)
    if peak is not None:
        options["--peak-tflops"] = peak
    if bench.busbw:
        # After training, the same ranks time all-reduces up to the gradients' size.
        options["--busbw-iters"] = bench.allreduce.iters
    return tuple(str(part) for pair in options.items() for part in pair)


def allreduce_args(
    spec: AllreduceSpec, inventory: Inventory, timeout_s: float, sizes: str | None = None
) -> tuple[str, ...]:
    options: dict[str, object] = {
        "--sizes": sizes or spec.sizes_for(inventory.accelerator),
        "--dtype": spec.dtype,
        "--warmup": spec.warmup,
        "--iters": spec.iters,
        "--device": inventory.accelerator.value,
        "--timeout": int(timeout_s),
        "--out": RESULT_FILE,
    }
    return tuple(str(part) for pair in options.items() for part in pair)


def _allreduce_args(bench: BenchSpec, inventory: Inventory, _: int) -> tuple[str, ...]:
    return allreduce_args(bench.allreduce, inventory, bench.timeout_s)


@dataclass(frozen=True)
class Workload:
    # Python module run on every process, by engine: "ddp" for a torch.distributed program,
    # "deepspeed" for DeepSpeed's (a Launcher.engine, or a training strategy's engine).
    modules: Mapping[str, str]
    args: WorkloadArgs
    trains: bool = False  # True: it trains the GPT, and --strategy picks how (strategies.py)


ALLREDUCE_MODULE = "runner.workloads.allreduce"
WORKLOADS: dict[str, Workload] = {
    "train": Workload(
        {"ddp": "runner.workloads.train", "deepspeed": "runner.workloads.train_deepspeed"},
        _train_args,
        trains=True,
    ),
    # The same measurement under every launcher: it needs torch.distributed, not an engine.
    "allreduce": Workload(
        {"ddp": ALLREDUCE_MODULE, "deepspeed": ALLREDUCE_MODULE}, _allreduce_args, trains=False
    ),
}

DEFAULT_JOIN_TIMEOUT_S = 600  # how long nodes wait for each other when no --timeout is given


class LaunchRequest(Protocol):
    """What `dtrun bench` (BenchSpec) and `dtrun run` (RunSpec) share about starting processes."""

    @property
    def run_id(self) -> str: ...
    @property
    def launcher(self) -> str: ...
    @property
    def procs_per_node(self) -> int: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def rdzv_port(self) -> int: ...
    @property
    def master_port(self) -> int: ...
    @property
    def launch(self) -> LauncherOptions: ...
    @property
    def nccl_debug(self) -> bool: ...
    @property
    def cluster_env(self) -> bool: ...


def lookup(kind: str, name: str, registry: Mapping[str, T]) -> T:
    """Find ``name`` in a registry, or say which names exist and which one was probably meant."""
    if name in registry:
        return registry[name]
    close = difflib.get_close_matches(name, list(registry), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise PlanError(
        f"unknown {kind} {name!r}",
        why=f"{hint}known {kind[:-1] + 'ies' if kind.endswith('y') else kind + 's'}: "
        f"{', '.join(sorted(registry))}",
        fix=f"pass --{kind} with one of those names",
    )


def validate_launch(request: LaunchRequest) -> None:
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
        "--project-tokens": bench.project_tokens,
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
    validate_allreduce(bench.allreduce)
    validate_health(bench.health)
    validate_launch(bench)
    strategy = builtin(bench).strategy
    for n in bench.node_counts:
        batch = batch_per_proc(bench, n)
        if strategy is not None:
            strategy.check(bench, n * bench.procs_per_node, batch)


DTYPES = ("float32", "bfloat16", "float16")  # the all-reduce workload's --dtype choices


def validate_allreduce(spec: AllreduceSpec) -> None:
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


def validate_health(gate: HealthGate) -> None:
    if gate.threshold_gbs is not None and gate.threshold_gbs <= 0:
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


def validate_run(run: RunSpec) -> None:
    if run.nodes < 1:
        raise PlanError("--nodes must be at least 1", why=f"got {run.nodes}")
    if run.timeout_s is not None and run.timeout_s <= 0:
        raise PlanError("--timeout must be more than 0 seconds", why=f"got {run.timeout_s:g}")
    if not run.program.target:
        raise PlanError(
            "dtrun run needs a command to run",
            why="nothing came after the options",
            fix="pass the command after --, e.g. dtrun run --nodes 2 -- python train.py",
        )
    validate_launch(run)


@dataclass(frozen=True)
class Builtin:
    """What runs a bench's built-in workload under its launcher."""

    module: str  # the Python module every process runs
    strategy: Strategy | None  # how it trains; None: the workload trains no model


def builtin(bench: BenchSpec) -> Builtin:
    launcher = lookup("launcher", bench.launcher, LAUNCHERS)
    workload = lookup("workload", bench.workload, WORKLOADS)
    if launcher.engine is None:
        raise PlanError(
            f"the {launcher.name} launcher cannot run dtrun's built-in workloads",
            why="they are PyTorch programs; the TensorFlow launcher lays out TF_CONFIG for "
            "TensorFlow programs",
            fix=f"run your own program with it: dtrun run --launcher {launcher.name} "
            "--nodes 2 -- python your_train.py",
        )
    strategy: Strategy | None = None
    engine = launcher.engine
    if workload.trains:
        strategy = lookup("strategy", strategy_name(bench, launcher.engine), STRATEGIES)
        engine = strategy.engine
    elif bench.strategy != StrategySpec() or bench.launch.zero_stage is not None:
        raise PlanError(
            f"the {bench.workload} workload trains no model",
            why="--strategy, --zero-stage and the pipeline options choose how the train "
            "workload trains",
            fix="leave them out, or pass --workload train",
        )
    module = workload.modules.get(engine)
    if module is None:
        raise PlanError(
            f"the {bench.workload} workload cannot run under {launcher.name}",
            why=f"it has no {engine} version",
            fix="pass another --launcher, e.g. torchrun",
        )
    return Builtin(module, strategy)


def node_packages(bench: BenchSpec) -> tuple[str, ...]:
    """Python packages beyond torch that every node needs for this bench: DeepSpeed for the
    deepspeed launcher and for the ZeRO strategies under any launcher."""
    launcher = lookup("launcher", bench.launcher, LAUNCHERS)
    strategy = builtin(bench).strategy
    engines = {launcher.engine, strategy.engine if strategy is not None else None}
    return ("deepspeed",) if "deepspeed" in engines else ()


def replicas(bench: BenchSpec, nodes: int) -> int:
    """Data-parallel replicas at ``nodes`` nodes: every process, or every pipeline."""
    world = nodes * bench.procs_per_node
    strategy = builtin(bench).strategy
    return world if strategy is None else strategy.replicas(bench, world)


def strong_global_batch(bench: BenchSpec) -> int:
    """--global-batch, or --batch per replica at the fewest nodes."""
    if bench.global_batch is not None:
        return bench.global_batch
    return bench.batch * replicas(bench, min(bench.node_counts))


def batch_per_proc(bench: BenchSpec, nodes: int) -> int:
    """Sequences per data-parallel replica per step: per process, or per pipeline.

    Weak scaling keeps each replica's batch; strong scaling splits a fixed global batch.
    """
    if bench.mode is ScalingMode.WEAK:
        return bench.batch
    world = nodes * bench.procs_per_node
    count = replicas(bench, nodes)
    total = strong_global_batch(bench)
    if total % count:
        unit = "processes" if count == world else "pipelines"
        raise PlanError(
            f"strong scaling cannot split a global batch of {total} over {count} {unit}",
            why=f"{total} is not divisible by {count} ({nodes} nodes x "
            f"{bench.procs_per_node}{'' if count == world else ' / --pp-size'})",
            fix="pass a --global-batch divisible by every world size of the sweep",
        )
    return total // count


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


def debug_env(nccl_debug: bool) -> tuple[EnvVar, ...]:
    if not nccl_debug:
        return ()
    return (
        EnvVar("NCCL_DEBUG", "INFO", "--nccl-debug: NCCL logs its version, network and rings."),
    )


def cluster_env(inventory: Inventory, nodes: int, procs_per_node: int) -> tuple[EnvVar, ...]:
    """The MPI-style cluster variables of --cluster-env (README: "The environment ...")."""
    selected = inventory.nodes[:nodes]
    slots = ",".join(f"{node.address}:{procs_per_node}" for node in selected)
    return (
        EnvVar("CLUSTER_NUM_WORKERS", str(nodes), "--cluster-env: nodes (workers) in this launch"),
        EnvVar("CLUSTER_GPUS_PER_WORKER", str(procs_per_node), "--cluster-env: processes per node"),
        EnvVar("CLUSTER_HOST_SLOTS", slots, "--cluster-env: every node as ADDRESS:SLOTS"),
        EnvVar(
            "CLUSTER_HOSTFILE",
            HOSTFILE,
            "--cluster-env: the MPI-style hostfile, relative to the launch directory",
        ),
        EnvVar("CLUSTER_NUM_PROCS", str(nodes * procs_per_node), "--cluster-env: processes in all"),
    )


def launch_env(inventory: Inventory, request: LaunchRequest, nodes: int) -> tuple[EnvVar, ...]:
    """Every variable dtrun exports on ``nodes`` nodes, the user's --env last."""
    selected = inventory.nodes[:nodes]
    threads = max(1, min(node.cpus for node in selected) // request.procs_per_node)
    dtrun_env = (
        *base_env(threads),
        *size_env(inventory.size),
        *debug_env(request.nccl_debug),
        *(cluster_env(inventory, nodes, request.procs_per_node) if request.cluster_env else ()),
    )
    return merge_env(dtrun_env, request.env)


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
    """One point of a bench sweep: the built-in workload on ``nodes`` nodes."""
    validate_bench(bench)
    chosen = builtin(bench)
    workload = WORKLOADS[bench.workload]
    per_proc = batch_per_proc(bench, nodes)
    world = nodes * bench.procs_per_node
    setup = (
        chosen.strategy.setup(bench, inventory, per_proc, world)
        if chosen.strategy is not None
        else EngineSetup()
    )
    program = Program(
        ProgramKind.MODULE,
        chosen.module,
        (*workload.args(bench, inventory, per_proc), *setup.args),
    )
    return plan_launch(
        inventory,
        bench,
        nodes,
        program,
        workload=bench.workload,
        join_timeout_s=int(bench.timeout_s),
        batch_per_proc=per_proc if workload.trains else None,
        extra_files=setup.files,
    )


def build_run_plan(inventory: Inventory, run: RunSpec) -> LaunchPlan:
    """`dtrun run`: the user's program on ``run.nodes`` nodes."""
    validate_run(run)
    timeout = int(run.timeout_s) if run.timeout_s is not None else DEFAULT_JOIN_TIMEOUT_S
    return plan_launch(
        inventory, run, run.nodes, run.program, workload="run", join_timeout_s=max(1, timeout)
    )


def plan_launch(
    inventory: Inventory,
    request: LaunchRequest,
    nodes: int,
    program: Program,
    *,
    workload: str,
    join_timeout_s: int,
    batch_per_proc: int | None = None,
    extra_files: tuple[LaunchFile, ...] = (),
) -> LaunchPlan:
    """Every node's script and every launch file for ``program`` on ``nodes`` nodes."""
    if not 1 <= nodes <= len(inventory.nodes):
        raise PlanError(
            f"cannot run on {nodes} nodes",
            why=f"the inventory ({inventory.source}) holds {len(inventory.nodes)} node(s)",
            fix=f"pass --nodes with counts up to {len(inventory.nodes)}, or add nodes",
        )
    launcher = lookup("launcher", request.launcher, LAUNCHERS)
    selected = inventory.nodes[:nodes]
    ctx = PlanContext(
        run_id=request.run_id,
        rdzv_id=rdzv_id(request.run_id, nodes),
        nodes=selected,
        procs_per_node=request.procs_per_node,
        master_addr=selected[0].address,
        master_port=request.master_port,
        rdzv_port=request.rdzv_port,
        join_timeout_s=join_timeout_s,
        python_bin=inventory.python_bin,
        code_dir=inventory.code_dir,
        env=launch_env(inventory, request, nodes),
        program=program,
        options=request.launch,
        size=inventory.size,
        ssh=inventory.ssh,
        interface=inventory.interface,
    )
    launches = tuple(
        NodeLaunch(
            node=selected[script.node_rank],
            node_rank=script.node_rank,
            script_name=f"node-{script.node_rank}.sh",
            script=render(launcher.template, launcher.node_context(ctx, script.node_rank)),
            service=script.service,
        )
        for script in launcher.scripts(ctx)
    )
    files = (*launcher.files(ctx), *extra_files)
    if request.cluster_env and all(f.name != HOSTFILE for f in files):
        files = (*files, hostfile(ctx))
    return LaunchPlan(
        launcher=launcher.name,
        workload=workload,
        nnodes=nodes,
        procs_per_node=request.procs_per_node,
        world_size=ctx.world_size,
        batch_per_proc=batch_per_proc,
        rdzv_id=ctx.rdzv_id,
        master_addr=ctx.master_addr,
        master_port=ctx.master_port,
        launches=launches,
        files=files,
        nodes=selected,
    )
