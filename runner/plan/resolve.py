"""Resolve: what the user asked, checked once, into typed, frozen values a plan is built from.

``resolve_bench`` and ``resolve_run`` raise a PlanError (exit 2) for anything no node count
could run, before a cluster is opened or a directory made; what they return names the launcher,
workload, strategy and framework as objects and enums, and every point's batch. Building a plan
from a resolved request checks nothing but that the inventory holds enough nodes. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dtrun.errors import PlanError
from dtrun.plan.checks import check_bench, check_run
from dtrun.plan.launchers import LAUNCHERS, Launcher
from dtrun.plan.registry import lookup
from dtrun.plan.strategies import STRATEGIES, Strategy, strategy_name
from dtrun.plan.workloads import PROGRAM_WORKLOAD, WORKLOADS, Workload
from dtrun.spec.request import (
    BenchSpec,
    Framework,
    LauncherName,
    LaunchRequest,
    RunSpec,
    ScalingMode,
    StrategySpec,
)

DEFAULT_JOIN_TIMEOUT_S = 600  # how long nodes wait for each other when no --timeout is given


@dataclass(frozen=True)
class ResolvedLaunch:
    """How processes start, shared by bench and run: the request and its launcher."""

    request: LaunchRequest
    launcher: Launcher

    @property
    def name(self) -> str:
        """A LauncherName for a built-in launcher; an engine's own launcher's name as it is."""
        try:
            return LauncherName(self.launcher.name)
        except ValueError:
            return self.launcher.name


@dataclass(frozen=True)
class Point:
    """One node count of a sweep, with its batch arithmetic done."""

    nodes: int
    world_size: int
    replicas: int  # data-parallel replicas: every process, or every pipeline
    batch_per_replica: int  # sequences per replica per step


@dataclass(frozen=True)
class ResolvedBench:
    """A `dtrun bench` sweep, checked: what runs, how it trains, and every point's batch."""

    spec: BenchSpec
    launch: ResolvedLaunch
    workload: Workload
    strategy: Strategy | None  # how it trains; None: the workload trains no model
    framework: Framework  # the framework its processes run, which picks the module
    module: str  # the Python module every process runs
    points: tuple[Point, ...]

    @property
    def largest(self) -> int:
        return max(point.nodes for point in self.points)

    @property
    def packages(self) -> tuple[str, ...]:
        """Python packages beyond torch every node needs: Horovod for horovodrun's own strategy;
        DeepSpeed for the deepspeed launcher
        and for the ZeRO strategies under any launcher."""
        frameworks = {self.launch.launcher.framework, self.framework}
        needed = {Framework.DEEPSPEED: "deepspeed", Framework.HOROVOD: "horovod"}
        return tuple(package for f, package in needed.items() if f in frameworks)

    def redacted(self) -> ResolvedBench:
        """The same sweep with secret-looking --env values hidden: for printing and records."""
        spec = self.spec.redacted()
        return replace(self, spec=spec, launch=replace(self.launch, request=spec))


@dataclass(frozen=True)
class ResolvedRun:
    """A `dtrun run`, checked: the user's program under its launcher."""

    spec: RunSpec
    launch: ResolvedLaunch
    join_timeout_s: int  # how long nodes wait for each other

    def redacted(self) -> ResolvedRun:
        """The same run with secret-looking --env values and arguments hidden."""
        spec = self.spec.redacted()
        return replace(self, spec=spec, launch=replace(self.launch, request=spec))


def resolve_bench(spec: BenchSpec) -> ResolvedBench:
    check_bench(spec)
    launcher = lookup("launcher", spec.launcher, LAUNCHERS)
    if spec.program is not None:
        return _resolve_program(spec, launcher)
    workload = lookup("workload", spec.workload, WORKLOADS)
    if launcher.framework is None:
        raise PlanError(
            f"the {launcher.name} launcher cannot run dtrun's built-in workloads",
            why="they are PyTorch programs; the TensorFlow launcher lays out TF_CONFIG for "
            "TensorFlow programs",
            fix=f"run your own program with it: dtrun run --launcher {launcher.name} "
            "--nodes 2 -- python your_train.py",
        )
    strategy: Strategy | None = None
    framework = launcher.framework
    if workload.trains:
        strategy = lookup("strategy", strategy_name(spec, launcher.framework), STRATEGIES)
        framework = strategy.framework
        if framework is Framework.HOROVOD and launcher.framework is not Framework.HOROVOD:
            raise PlanError(
                f"--strategy horovod cannot run under {launcher.name}",
                why="hvd.init() needs the ranks that a Horovod launcher sets up",
                fix="pass --launcher horovodrun, or another --strategy (ddp, fsdp, ...)",
            )
    elif spec.strategy != StrategySpec() or spec.launch.zero_stage is not None:
        raise PlanError(
            f"the {spec.workload} workload trains no model",
            why="--strategy, --zero-stage and the pipeline options choose how the train "
            "workload trains",
            fix="leave them out, or pass --workload train",
        )
    module = workload.modules.get(framework)
    if module is None:  # pragma: no cover - every workload has a module for every framework
        raise PlanError(
            f"the {spec.workload} workload cannot run under {launcher.name}",
            why=f"it has no {framework} version",
            fix="pass another --launcher, e.g. torchrun",
        )
    points = _points(spec, strategy)
    return ResolvedBench(
        spec, ResolvedLaunch(spec, launcher), workload, strategy, framework, module, points
    )


def _resolve_program(spec: BenchSpec, launcher: Launcher) -> ResolvedBench:
    """`dtrun bench -- PROGRAM`: the user's program at every node count (docs/your-training.md).
    The built-in workloads' options do not apply to it."""
    if spec.workload != PROGRAM_WORKLOAD.name and spec.workload != "train":
        raise PlanError(
            f"--workload {spec.workload} and a program after -- are two different things to run",
            fix="leave out --workload to measure your program, or the program to run the "
            "built-in workload",
        )
    if spec.strategy != StrategySpec() or spec.launch.zero_stage is not None:
        raise PlanError(
            "--strategy, --zero-stage and the pipeline options choose how the built-in "
            "workload trains, and your program trains its own way",
            fix="leave them out (your program's own options say how it trains), or leave out "
            "the program to measure the built-in workload",
        )
    if spec.probe and launcher.framework is None:
        raise PlanError(
            f"--probe times torch.distributed all-reduces, and the {launcher.name} launcher "
            "starts no torch ranks",
            fix="leave out --probe, or pass a torch launcher (torchrun, deepspeed, mpirun)",
        )
    spec = replace(spec, workload=PROGRAM_WORKLOAD.name)
    framework = launcher.framework or Framework.TORCH
    points = tuple(
        Point(n, n * spec.procs_per_node, n * spec.procs_per_node, 0) for n in spec.node_counts
    )
    return ResolvedBench(
        spec, ResolvedLaunch(spec, launcher), PROGRAM_WORKLOAD, None, framework, "", points
    )


def resolve_run(spec: RunSpec) -> ResolvedRun:
    check_run(spec)
    launcher = lookup("launcher", spec.launcher, LAUNCHERS)
    timeout = int(spec.timeout_s) if spec.timeout_s is not None else DEFAULT_JOIN_TIMEOUT_S
    return ResolvedRun(spec, ResolvedLaunch(spec, launcher), max(1, timeout))


def _points(spec: BenchSpec, strategy: Strategy | None) -> tuple[Point, ...]:
    def replicas(nodes: int) -> int:
        world = nodes * spec.procs_per_node
        return world if strategy is None else strategy.replicas(spec, world)

    total = spec.global_batch
    if total is None:  # strong: --batch per replica at the fewest nodes
        total = spec.batch * replicas(min(spec.node_counts))
    points = []
    for nodes in spec.node_counts:
        world, count = nodes * spec.procs_per_node, replicas(nodes)
        batch = spec.batch if spec.mode is ScalingMode.WEAK else _split(spec, total, nodes, count)
        if strategy is not None:
            strategy.check(spec, world, batch)
        points.append(Point(nodes, world, count, batch))
    return tuple(points)


def _split(spec: BenchSpec, total: int, nodes: int, count: int) -> int:
    """Strong scaling: the fixed global batch split between the replicas of a point."""
    world = nodes * spec.procs_per_node
    if total % count:
        unit = "processes" if count == world else "pipelines"
        raise PlanError(
            f"strong scaling cannot split a global batch of {total} over {count} {unit}",
            why=f"{total} is not divisible by {count} ({nodes} nodes x "
            f"{spec.procs_per_node}{'' if count == world else ' / --pp-size'})",
            fix="pass a --global-batch divisible by every world size of the sweep",
        )
    return total // count
