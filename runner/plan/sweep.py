"""The whole of a sweep as one frozen value, before anything runs: the health gate's launches,
every point with its repeats, and the environment the manifest records. `--dry-run` prints it;
dtrun.sweep runs it launch by launch. Also `dtrun run`'s single launch. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from dtrun.azure.sizefacts import health_threshold
from dtrun.plan.env import launch_env
from dtrun.plan.launchfiles import What, plan_launch, require_nodes
from dtrun.plan.resolve import Point, ResolvedBench, ResolvedRun
from dtrun.plan.strategies import StrategySetup, bf16
from dtrun.plan.workloads import ALLREDUCE_MODULE, allreduce_args
from dtrun.spec.cluster import Accelerator, Inventory, Node
from dtrun.spec.launchplan import STEP_DIR, EnvVar, LaunchPlan, point_dir
from dtrun.spec.request import BenchSpec, Program, ProgramKind

HEALTH_DIR = "health"  # the gate's launches, one directory per node, in the run directory
GATE_SIZE = {Accelerator.CUDA: "1G", Accelerator.CPU: "16M"}  # where the catalog has no mark


@dataclass(frozen=True)
class Launch:
    """One launch of a sweep (a gate check, or one repeat of a point), with where its files go."""

    plan: LaunchPlan
    workdir: str  # relative to the run directory: health/node-0, n2/r0
    repeat: int = 0


@dataclass(frozen=True)
class GatePlan:
    """What the health gate checks: every node of the sweep, each alone, at one message size."""

    threshold_gbs: float
    threshold_source: str
    size: str
    procs_per_node: int
    checks: tuple[Launch, ...]  # one per node

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(check.plan.nodes[0] for check in self.checks)


@dataclass(frozen=True)
class SweepPlan:
    """Every launch of a `dtrun bench` sweep, in the order they run."""

    resolved: ResolvedBench
    inventory: Inventory
    gate: GatePlan | str  # str: why there is no gate (health.json says "skipped" and why)
    points: tuple[LaunchPlan, ...]  # one per node count, smallest first
    launches: tuple[Launch, ...]  # every point with its repeats, in order
    environment: tuple[EnvVar, ...]  # the largest point's, as the manifest records it

    @property
    def spec(self) -> BenchSpec:
        return self.resolved.spec

    @property
    def gate_launches(self) -> tuple[Launch, ...]:
        return self.gate.checks if isinstance(self.gate, GatePlan) else ()


def plan_sweep(resolved: ResolvedBench, inventory: Inventory) -> SweepPlan:
    for point in resolved.points:  # smallest first: the first count that does not fit is named
        require_nodes(inventory, point.nodes)
    spec = resolved.spec
    points = tuple(plan_point(resolved, inventory, point) for point in resolved.points)
    if spec.until_decided:  # round by round, up to --max-launches (runner/report/sequential.py)
        order = [(plan, repeat) for repeat in range(spec.launches) for plan in points]
    else:
        order = [(plan, repeat) for plan in points for repeat in range(spec.launches)]
    launches = tuple(Launch(plan, point_dir(plan.nnodes, repeat), repeat) for plan, repeat in order)
    environment = launch_env(inventory, spec.redacted(), resolved.largest)
    return SweepPlan(
        resolved, inventory, plan_gate(resolved, inventory), points, launches, environment
    )


# `dtrun bench -- PROGRAM`: placeholders in the program's arguments, each point's own value
PLACEHOLDERS = ("nodes", "world_size", "procs_per_node")
# "{nodes}" filled in; "{{nodes}}" passed as "{nodes}", as str.format reads it. Other braces
# stay as they are: a JSON argument's own "}}" is no escape.
_PLACEHOLDER = re.compile(r"\{\{(NAME)\}\}|\{(NAME)\}".replace("NAME", "|".join(PLACEHOLDERS)))


def program_point(resolved: ResolvedBench, inventory: Inventory, point: Point) -> LaunchPlan:
    """The user's program on ``point.nodes`` nodes, its placeholders filled in, with the step
    hook on (docs/your-training.md)."""
    spec = resolved.spec
    assert spec.program is not None  # resolve_bench made this a program sweep
    values = {
        "nodes": point.nodes,
        "world_size": point.world_size,
        "procs_per_node": spec.procs_per_node,
    }

    def filled(arg: str) -> str:
        return _PLACEHOLDER.sub(lambda m: f"{{{m[1]}}}" if m[1] else str(values[m[2]]), arg)

    program = replace(spec.program, args=tuple(filled(arg) for arg in spec.program.args))
    why = 'dtrun bench -- PROGRAM: this point\'s values (docs/your-training.md "Placeholders")'
    env = (
        EnvVar("DTRUN_NODES", str(point.nodes), why),
        EnvVar("DTRUN_WORLD_SIZE", str(point.world_size), ""),
        EnvVar("DTRUN_PROCS_PER_NODE", str(spec.procs_per_node), ""),
        EnvVar("DTRUN_STEP_HOOK", "1", "the step hook times every optimizer step"),
        EnvVar("DTRUN_STEP_DIR", STEP_DIR, ""),  # in the launch directory, where ranks start
        EnvVar("DTRUN_WARMUP", str(spec.warmup), ""),  # the noise window starts after them
    )
    what = What(program, "program", int(spec.timeout_s), extra_env=env, step_hook=True)
    return plan_launch(inventory, resolved.launch, point.nodes, what)


def plan_point(resolved: ResolvedBench, inventory: Inventory, point: Point) -> LaunchPlan:
    """One node count of the sweep: the built-in workload on ``point.nodes`` nodes."""
    if resolved.spec.program is not None:
        return program_point(resolved, inventory, point)
    spec, strategy, workload = resolved.spec, resolved.strategy, resolved.workload
    batch = point.batch_per_replica
    setup = (
        strategy.setup(spec, inventory, batch, point.world_size)
        if strategy is not None
        else StrategySetup()
    )
    args = workload.args(spec, inventory, batch, bf16(spec, inventory))
    program = Program(ProgramKind.MODULE, resolved.module, (*args, *setup.args))
    what = What(
        program,
        workload.name,
        int(spec.timeout_s),
        batch if workload.trains else None,
        setup.files,
    )
    return plan_launch(inventory, resolved.launch, point.nodes, what)


def plan_gate(resolved: ResolvedBench, inventory: Inventory) -> GatePlan | str:
    """The health gate for this sweep, or why there is none."""
    spec = resolved.spec
    gate = spec.health
    if not gate.enabled:
        return "turned off (--no-health-gate)"
    catalog = health_threshold(inventory.size)
    if gate.threshold_gbs is not None:
        threshold, source = gate.threshold_gbs, "--health-threshold"
        size = gate.size or (catalog[1] if catalog else GATE_SIZE[inventory.accelerator])
    elif catalog is not None:
        threshold, size = catalog
        source = f"Azure's health-check pass mark for {inventory.size}"
        size = gate.size or size
    else:
        kind = inventory.accelerator.value.upper()
        return (
            f"no expected single-node bus bandwidth for {kind} nodes of no catalog size; "
            "--health-threshold GBS sets one"
        )
    nodes = inventory.nodes[: resolved.largest]
    # On GPUs a node is checked with all its GPUs, as the pass mark was measured; on CPUs with
    # the processes the sweep runs per node.
    procs = nodes[0].slots if inventory.accelerator is Accelerator.CUDA else spec.procs_per_node
    if procs < 2:
        return "one process per node: a single-node all-reduce would move no data"
    args = allreduce_args(spec.allreduce, inventory, spec.timeout_s, sizes=size)
    what = What(Program(ProgramKind.MODULE, ALLREDUCE_MODULE, args), "health", int(spec.timeout_s))
    checks = []
    for node in nodes:
        request = replace(spec, run_id=f"{spec.run_id}-health-{node.name}", procs_per_node=procs)
        alone = replace(inventory, nodes=(node,))
        plan = plan_launch(alone, replace(resolved.launch, request=request), 1, what)
        checks.append(Launch(plan, f"{HEALTH_DIR}/{node.name}"))
    return GatePlan(threshold, source, size, procs, tuple(checks))


def plan_run(resolved: ResolvedRun, inventory: Inventory) -> LaunchPlan:
    """`dtrun run`: the user's program on ``spec.nodes`` nodes."""
    spec = resolved.spec
    what = What(spec.program, "run", resolved.join_timeout_s)
    return plan_launch(inventory, resolved.launch, spec.nodes, what)
