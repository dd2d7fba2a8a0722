"""`dtrun run`: the user's own program, planned, executed once and recorded in run.json."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtrun.errors import (
    DtrunError,
    LaunchInterrupted,
    RunDirWriteError,
    RunError,
    RunInterruptedError,
    interruption,
)
from dtrun.execute import Executor, LineSink, LogCut, discard
from dtrun.execute.guard import guarded
from dtrun.plan.resolve import ResolvedRun
from dtrun.plan.sweep import plan_run
from dtrun.record.ended import guard_command
from dtrun.record.rundir import (
    RunDir,
    create_run_dir,
    launch_dir,
    record_stop_after_run,
    write_run_record,
)
from dtrun.record.writefail import write_error
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import NodeResult, RunStatus
from dtrun.sweep.runlaunch import Ready, always_ready, status_of


@dataclass(frozen=True)
class ProgramRun:
    """A finished `dtrun run`: where it ran and how every node ended."""

    run_dir: RunDir
    launch_dir: Path
    plan: LaunchPlan
    nodes: tuple[NodeResult, ...]
    wall_s: float


def run_program(  # noqa: PLR0913 - the cluster's parts and hooks, given by its caller
    resolved: ResolvedRun,
    inventory: Inventory,
    output: Path,
    executor: Executor,
    on_line: LineSink = discard,
    on_begin: Callable[[RunDir, LaunchPlan], None] | None = None,
    ready: Ready = always_ready,
    check: Ready = always_ready,
    command: Sequence[str] | None = None,
) -> ProgramRun:
    """Plan the user's program, run it once in output/<run-id>/launch/, record it.

    ``check`` looks at the plan before anything is written (the program is on every node);
    a failed, timed-out or interrupted run is recorded in run.json before its error is raised;
    ``command``: dtrun's arguments as typed, recorded there (redacted).
    """
    spec = resolved.spec
    plan = plan_run(resolved, inventory)
    started = time.monotonic()  # the wait for the nodes counts from the check's first look
    check(plan)
    run_dir = create_run_dir(output, spec.run_id)
    workdir = launch_dir(run_dir)
    write_run_record(run_dir, spec, inventory, plan, status=RunStatus.RUNNING, command=command)
    try:
        # SIGKILL runs none of the code below: the guard says so in run.json (record/ended.py)
        with guarded(guard_command(run_dir.path / "run.json")):  # dropped once run.json says
            return _launch(resolved, inventory, run_dir, workdir, plan, started, executor,
                           on_line, on_begin, ready, command)  # fmt: skip
    except KeyboardInterrupt:  # outside the launch's own handler: before it, or the guard's drop
        with contextlib.suppress(OSError, ValueError, DtrunError):  # the stop is what is said
            record_stop_after_run(run_dir, interruption())
        raise _interrupted(workdir) from None


def _launch(  # noqa: PLR0913 - run_program's state, handed on
    resolved: ResolvedRun,
    inventory: Inventory,
    run_dir: RunDir,
    workdir: Path,
    plan: LaunchPlan,
    started: float,
    executor: Executor,
    on_line: LineSink,
    on_begin: Callable[[RunDir, LaunchPlan], None] | None,
    ready: Ready,
    command: Sequence[str] | None,
) -> ProgramRun:
    spec = resolved.spec
    if on_begin is not None:
        on_begin(run_dir, plan)
    timeout = spec.timeout_s if spec.timeout_s is not None else math.inf
    try:
        ready(plan)
        run_dir.makedirs(workdir)
        nodes = executor.run(plan, workdir, timeout_s=timeout, on_line=on_line)
    except OSError as exc:  # an executor's write: a full disk, the run directory removed
        explained = write_error(exc, run_dir.path)
        if explained is None:
            raise
        with contextlib.suppress(RunDirWriteError):  # run.json says why, where it still can
            write_run_record(
                run_dir, spec, inventory, plan, status=RunStatus.FAILED, error=explained.message,
                wall_s=time.monotonic() - started, command=command,
                nodes=exc.node_results if isinstance(exc, LogCut) else (),
            )  # fmt: skip
        raise explained from None
    # a stop's record that cannot be written (a full disk) leaves the stop's own error and
    # exit code, not the disk's
    except RunError as exc:
        with contextlib.suppress(RunDirWriteError):
            write_run_record(
                run_dir, spec, inventory, plan, status=status_of(exc), error=exc.message,
                wall_s=time.monotonic() - started, nodes=exc.node_results, command=command,
            )  # fmt: skip
        raise
    except KeyboardInterrupt as stop:
        with contextlib.suppress(RunDirWriteError):
            write_run_record(
                run_dir, spec, inventory, plan, status=RunStatus.INTERRUPTED,
                error=interruption(stop), wall_s=time.monotonic() - started,
                nodes=stop.node_results if isinstance(stop, LaunchInterrupted) else (),
                command=command,
            )  # fmt: skip
        raise _interrupted(workdir, stop) from None
    wall = time.monotonic() - started
    write_run_record(
        run_dir, spec, inventory, plan, status=RunStatus.OK, wall_s=wall, nodes=nodes,
        command=command,
    )  # fmt: skip
    return ProgramRun(run_dir, workdir, plan, nodes, wall)


def _interrupted(workdir: Path, stop: KeyboardInterrupt | None = None) -> RunInterruptedError:
    return RunInterruptedError(
        interruption(stop),
        why="every process dtrun started was stopped",
        fix=f"node logs are kept in {workdir}",
    )
