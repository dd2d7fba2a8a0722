"""The health gate: before a sweep spends hours, each node's own all-reduce against a pass mark.

Azure's node health checks run NCCL's all-reduce on one VM with all its GPUs and compare the bus
bandwidth with a per-size threshold (shared/FACTS.md section 6). dtrun does the same with its
all-reduce workload, on every node the sweep will use, one node at a time, and writes
health.json. Below the mark it warns, or with --strict stops before the sweep. Where no pass
mark is known (the embedded CPU cluster, sizes without one) the gate is skipped and says so,
unless --health-threshold gives one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from runner.catalog import health_threshold
from runner.errors import DtrunError, HealthGateError
from runner.execute import Executor, LineSink, discard
from runner.plan import ALLREDUCE_MODULE, RESULT_FILE, allreduce_args, plan_launch
from runner.record import now_iso, read_json, write_json
from runner.results import AllreduceResult, load_result
from runner.spec import Accelerator, BenchSpec, Inventory, LaunchPlan, Node, Program, ProgramKind

HEALTH_SCHEMA = "dtrun.health/1"
HEALTH_FILE = "health.json"
HEALTH_DIR = "health"
DEFAULT_SIZE = {Accelerator.CUDA: "1G", Accelerator.CPU: "16M"}  # sizes with no catalog mark


@dataclass(frozen=True)
class GatePlan:
    """What the gate will check: every node, each alone, at one message size."""

    threshold_gbs: float
    threshold_source: str
    size: str
    procs_per_node: int
    nodes: tuple[Node, ...]


def plan_gate(inventory: Inventory, bench: BenchSpec) -> GatePlan | str:
    """The gate for this sweep, or why there is none."""
    gate = bench.health
    if not gate.enabled:
        return "turned off (--no-health-gate)"
    catalog = health_threshold(inventory.size)
    if gate.threshold_gbs is not None:
        threshold, source = gate.threshold_gbs, "--health-threshold"
        size = gate.size or (catalog[1] if catalog else DEFAULT_SIZE[inventory.accelerator])
    elif catalog is not None:
        threshold, size = catalog
        source = f"Azure's health-check pass mark for {inventory.size}"
        size = gate.size or size
    else:
        machine = "the embedded CPU cluster" if inventory.source == "embedded" else "this machine"
        return (
            f"no expected single-node bus bandwidth for {machine}; "
            "pass --health-threshold GBS to gate on your own figure"
        )
    nodes = inventory.nodes[: max(bench.node_counts)]
    # On GPUs a node is checked with all its GPUs, as the pass mark was measured; on CPUs with
    # the processes the sweep runs per node.
    procs = nodes[0].slots if inventory.accelerator is Accelerator.CUDA else bench.procs_per_node
    if procs < 2:
        return "one process per node: a single-node all-reduce would move no data"
    return GatePlan(threshold, source, size, procs, nodes)


def gate_launch(inventory: Inventory, bench: BenchSpec, gate: GatePlan, node: Node) -> LaunchPlan:
    """The all-reduce on ``node`` alone, with the gate's processes and message size."""
    alone = replace(inventory, nodes=(node,))
    request = replace(
        bench, run_id=f"{bench.run_id}-health-{node.name}", procs_per_node=gate.procs_per_node
    )
    args = allreduce_args(bench.allreduce, inventory, bench.timeout_s, sizes=gate.size)
    program = Program(ProgramKind.MODULE, ALLREDUCE_MODULE, args)
    return plan_launch(
        alone, request, 1, program, workload="health", join_timeout_s=int(bench.timeout_s)
    )


@dataclass(frozen=True)
class NodeHealth:
    node: str
    address: str
    busbw: float | None  # in-place busbw at the gate's size, GB/s; None: it did not run
    passed: bool
    error: str | None = None
    directory: str = ""  # relative to the run directory


@dataclass(frozen=True)
class Health:
    status: str  # "passed", "warned", "failed" (--strict), "skipped"
    note: str = ""
    threshold_gbs: float | None = None
    threshold_source: str | None = None
    size: str | None = None
    procs_per_node: int | None = None
    nodes: tuple[NodeHealth, ...] = ()

    @property
    def below(self) -> tuple[NodeHealth, ...]:
        return tuple(node for node in self.nodes if not node.passed)

    def describe(self) -> str:
        if self.status == "skipped":
            return f"health gate skipped: {self.note}"
        checked = f"{len(self.nodes)} node(s) at {self.size}, pass mark {self.threshold_gbs:g} GB/s"
        if not self.below:
            return f"health gate passed: {checked}"
        names = ", ".join(
            f"{n.node} ({n.busbw:.1f} GB/s)" if n.busbw is not None else f"{n.node} (did not run)"
            for n in self.below
        )
        return f"health gate: {len(self.below)} below the mark ({names}); {checked}"


GateProgress = Callable[[Node, int, int], None]  # node, index, total: called as each starts


def _no_progress(node: Node, index: int, total: int) -> None:
    pass


def run_gate(
    inventory: Inventory,
    bench: BenchSpec,
    run_path: Path,
    executor: Executor,
    *,
    ready: Callable[[LaunchPlan], None],
    on_line: LineSink = discard,
    on_node: GateProgress = _no_progress,
) -> Health:
    """Check every node, write health.json, and raise HealthGateError under --strict."""
    planned = plan_gate(inventory, bench)
    if isinstance(planned, str):
        health = Health("skipped", note=planned)
        write_health(run_path, health)
        return health
    checks = []
    for index, node in enumerate(planned.nodes):
        on_node(node, index, len(planned.nodes))
        checks.append(_check(inventory, bench, planned, node, run_path, executor, ready, on_line))
    below = [check for check in checks if not check.passed]
    status = "passed" if not below else ("failed" if bench.health.strict else "warned")
    health = Health(
        status,
        threshold_gbs=planned.threshold_gbs,
        threshold_source=planned.threshold_source,
        size=planned.size,
        procs_per_node=planned.procs_per_node,
        nodes=tuple(checks),
    )
    write_health(run_path, health)
    if status == "failed":
        raise HealthGateError(
            health.describe(),
            why="--strict stops the sweep before it runs on unhealthy nodes",
            fix=f"read {run_path / HEALTH_DIR}, replace or reboot those nodes, or run without "
            "--strict to sweep anyway",
        )
    return health


def _check(
    inventory: Inventory,
    bench: BenchSpec,
    gate: GatePlan,
    node: Node,
    run_path: Path,
    executor: Executor,
    ready: Callable[[LaunchPlan], None],
    on_line: LineSink,
) -> NodeHealth:
    plan = gate_launch(inventory, bench, gate, node)
    workdir = run_path / HEALTH_DIR / node.name
    relative = str(workdir.relative_to(run_path))
    try:
        ready(plan)
        executor.run(plan, workdir, timeout_s=bench.timeout_s, on_line=on_line)
        result = load_result(workdir / RESULT_FILE)
    except KeyboardInterrupt:
        raise
    except DtrunError as exc:
        return NodeHealth(node.name, node.address, None, False, exc.message, relative)
    if not isinstance(result, AllreduceResult):  # pragma: no cover - the module writes one
        return NodeHealth(node.name, node.address, None, False, "not an all-reduce result")
    busbw = result.largest.in_place.busbw
    error = f"{result.wrong} wrong elements" if result.wrong else None
    passed = busbw >= gate.threshold_gbs and not result.wrong
    return NodeHealth(node.name, node.address, busbw, passed, error, relative)


def write_health(run_path: Path, health: Health) -> None:
    data: dict[str, Any] = {"schema": HEALTH_SCHEMA, "checked_at": now_iso(), **asdict(health)}
    write_json(run_path / HEALTH_FILE, data)


def read_health(run_path: Path) -> dict[str, Any] | None:
    path = run_path / HEALTH_FILE
    return read_json(path) if path.exists() else None
