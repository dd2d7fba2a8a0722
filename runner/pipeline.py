"""The sweep: for each node count and repeat, plan -> execute -> collect, recording as it goes.
And `dtrun run`: the user's own program, planned, executed and recorded once.

Nothing finished is ever lost: runs.json is rewritten after every launch, and the summary and
report are rebuilt on the way out whether the sweep completed, failed or was interrupted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import DtrunError, RunError, RunInterruptedError, RunTimeoutError
from runner.execute import Executor, LineSink, discard
from runner.health import GateProgress, Health, run_gate
from runner.plan import RESULT_FILE, build_plan, build_run_plan, launch_env
from runner.record import (
    RunDir,
    create_run_dir,
    launch_dir,
    write_manifest,
    write_plans,
    write_run_record,
    write_runs,
)
from runner.report import Report
from runner.report_builder import ReportBuilder
from runner.results import Result, load_result
from runner.spec import (
    BenchSpec,
    Inventory,
    LaunchPlan,
    Node,
    NodeResult,
    RunResult,
    RunSpec,
    RunStatus,
)


def _ignore_begin(run_dir: RunDir) -> None:
    pass


def _ignore_start(plan: LaunchPlan, repeat: int) -> None:
    pass


def _ignore_done(run: RunResult, result: Result | None) -> None:
    pass


def _ignore_node(node: Node, index: int, total: int) -> None:
    pass


def _ignore_health(health: Health) -> None:
    pass


@dataclass(frozen=True)
class SweepEvents:
    """What the caller hears while the sweep runs (the CLI draws progress from these)."""

    on_begin: Callable[[RunDir], None] = _ignore_begin
    on_line: LineSink = discard
    on_start: Callable[[LaunchPlan, int], None] = _ignore_start
    on_done: Callable[[RunResult, Result | None], None] = _ignore_done
    on_gate_node: GateProgress = _ignore_node  # the health gate starts checking a node
    on_health: Callable[[Health], None] = _ignore_health  # the gate's verdict


@dataclass
class Sweep:
    run_dir: RunDir
    runs: list[RunResult] = field(default_factory=list)
    report: Report | None = None
    health: Health | None = None


def plan_sweep(inventory: Inventory, bench: BenchSpec) -> dict[int, LaunchPlan]:
    """Every node count's plan, built before anything runs so bad input fails first."""
    return {nodes: build_plan(inventory, bench, nodes) for nodes in bench.node_counts}


def _always_ready(plan: LaunchPlan) -> None:
    pass


Ready = Callable[[LaunchPlan], None]  # the readiness barrier before a launch; raises if not


def run_sweep(
    inventory: Inventory,
    bench: BenchSpec,
    output: Path,
    executor: Executor,
    events: SweepEvents | None = None,
    ready: Ready = _always_ready,
) -> Sweep:
    """Plan every point, then run the sweep into output/<run-id>/.

    Raises the first RunError after recording it; bad input fails before the directory exists.
    ``ready`` runs before every launch (nodes reachable and, with --check, healthy).
    """
    events = events or SweepEvents()
    plans = plan_sweep(inventory, bench)
    run_dir = create_run_dir(output, bench.run_id)
    events.on_begin(run_dir)
    largest = max(plans)
    write_manifest(run_dir, bench, inventory, launch_env(inventory, bench.redacted(), largest))
    write_plans(run_dir, plans)
    reporter = ReportBuilder()  # readies its tools while the nodes run
    sweep = Sweep(run_dir)
    status, error = "running", None
    current: tuple[int, int, float] | None = None  # the launch under way: nodes, repeat, start
    try:
        try:
            sweep.health = run_gate(
                inventory,
                bench,
                run_dir.path,
                executor,
                ready=ready,
                on_line=events.on_line,
                on_node=events.on_gate_node,
            )
        except DtrunError as exc:
            status, error = "failed", exc.message
            raise
        events.on_health(sweep.health)
        for nodes, plan in plans.items():
            for repeat in range(bench.repeat):
                events.on_start(plan, repeat)
                current = (nodes, repeat, time.monotonic())
                run, result, failure = _launch(
                    plan, repeat, run_dir, bench, executor, events, ready
                )
                current = None
                sweep.runs.append(run)
                write_runs(run_dir, sweep.runs, status, error)
                events.on_done(run, result)
                if failure is not None:
                    status, error = "failed", failure.message
                    raise failure
        status = "complete"
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user (Ctrl-C)"
        if current is not None:
            nodes, repeat, started = current
            workdir = run_dir.point(nodes, repeat).relative_to(run_dir.path)
            sweep.runs.append(
                RunResult(
                    nodes,
                    repeat,
                    RunStatus.INTERRUPTED,
                    time.monotonic() - started,
                    str(workdir),
                    (),
                    error,
                )
            )
        raise RunInterruptedError(
            "interrupted",
            why="every process dtrun started was stopped",
            fix=f"finished launches are kept in {run_dir.path}; rebuild the report with "
            f"`dtrun report {run_dir.path}`",
        ) from None
    finally:
        write_runs(run_dir, sweep.runs, status, error)
        sweep.report = reporter.build(run_dir)
    return sweep


def _launch(
    plan: LaunchPlan,
    repeat: int,
    run_dir: RunDir,
    bench: BenchSpec,
    executor: Executor,
    events: SweepEvents,
    ready: Ready,
) -> tuple[RunResult, Result | None, DtrunError | None]:
    """One launch of one plan; a failure comes back as a value so it can be recorded first."""
    workdir = run_dir.point(plan.nnodes, repeat)
    relative = str(workdir.relative_to(run_dir.path))
    started = time.monotonic()
    try:
        ready(plan)
        nodes = executor.run(plan, workdir, timeout_s=bench.timeout_s, on_line=events.on_line)
        result = load_result(workdir / RESULT_FILE)
    except DtrunError as exc:
        status = RunStatus.TIMEOUT if isinstance(exc, RunTimeoutError) else RunStatus.FAILED
        node_results = exc.node_results if isinstance(exc, RunError) else ()
        run = RunResult(
            plan.nnodes,
            repeat,
            status,
            time.monotonic() - started,
            relative,
            node_results,
            exc.message,
        )
        return run, None, exc
    run = RunResult(plan.nnodes, repeat, RunStatus.OK, time.monotonic() - started, relative, nodes)
    return run, result, None


@dataclass(frozen=True)
class ProgramRun:
    """A finished `dtrun run`: where it ran and how every node ended."""

    run_dir: RunDir
    launch_dir: Path
    plan: LaunchPlan
    nodes: tuple[NodeResult, ...]
    wall_s: float


def run_program(
    inventory: Inventory,
    spec: RunSpec,
    output: Path,
    executor: Executor,
    on_line: LineSink = discard,
    on_begin: Callable[[RunDir, LaunchPlan], None] | None = None,
    ready: Ready = _always_ready,
) -> ProgramRun:
    """`dtrun run`: plan the user's program, run it once in output/<run-id>/launch/, record it.

    Bad input fails before the directory exists; a failed, timed-out or interrupted run is
    recorded in run.json before its error is raised.
    """
    plan = build_run_plan(inventory, spec)
    run_dir = create_run_dir(output, spec.run_id)
    workdir = launch_dir(run_dir)
    write_run_record(run_dir, spec, inventory, plan, status="running")
    if on_begin is not None:
        on_begin(run_dir, plan)
    started = time.monotonic()
    timeout = spec.timeout_s if spec.timeout_s is not None else math.inf
    try:
        ready(plan)
        nodes = executor.run(plan, workdir, timeout_s=timeout, on_line=on_line)
    except RunError as exc:
        status = RunStatus.TIMEOUT if isinstance(exc, RunTimeoutError) else RunStatus.FAILED
        write_run_record(
            run_dir,
            spec,
            inventory,
            plan,
            status=status.value,
            error=exc.message,
            wall_s=time.monotonic() - started,
            nodes=exc.node_results,
        )
        raise
    except KeyboardInterrupt:
        error = "interrupted by the user (Ctrl-C)"
        write_run_record(
            run_dir,
            spec,
            inventory,
            plan,
            status=RunStatus.INTERRUPTED.value,
            error=error,
            wall_s=time.monotonic() - started,
        )
        raise RunInterruptedError(
            "interrupted",
            why="every process dtrun started was stopped",
            fix=f"node logs are kept in {workdir}",
        ) from None
    wall = time.monotonic() - started
    write_run_record(
        run_dir, spec, inventory, plan, status=RunStatus.OK.value, wall_s=wall, nodes=nodes
    )
    return ProgramRun(run_dir, workdir, plan, nodes, wall)
