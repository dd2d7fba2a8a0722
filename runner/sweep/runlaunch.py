"""One launch of a sweep plan, executed: its node scripts run, its result read, how it ended
returned as a value (the caller records it). Every launch of a sweep, health-gate checks and
points alike, goes through ``run_launch``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dtrun.errors import DtrunError, RunError, RunInterruptedError, RunTimeoutError
from dtrun.execute import Executor, LineSink, LogCut
from dtrun.plan.sweep import Launch
from dtrun.record.writefail import unwritten, write_error
from dtrun.report.resultfile import Result, load_result
from dtrun.spec.launchplan import RESULT_FILE, STEP_DIR, LaunchPlan
from dtrun.spec.outcome import NodeResult, RunResult, RunStatus
from dtrun.sweep.earlyexit import early_exit
from dtrun.sweep.eviction import Command, EvictedError, check_eviction

Ready = Callable[[LaunchPlan], None]  # the readiness barrier before a launch; raises if not
Finish = Callable[[LaunchPlan, Path, float], None]  # result.json from (plan, workdir, wall s)


def always_ready(plan: LaunchPlan) -> None:
    pass


def _remove_step_records(folder: Path) -> None:
    """An earlier attempt's step records (--resume reruns a launch in its directory): the
    step hook's own files only, and no link followed."""
    if folder.is_symlink():
        folder.unlink()
    elif folder.is_dir():
        for path in folder.glob("rank-*.json"):
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Outcome:
    """How one launch ended; a failure comes back as a value so it can be recorded first."""

    run: RunResult
    result: Result | None = None  # the workload's result.json, when it ended well
    error: DtrunError | None = None


def status_of(error: DtrunError) -> RunStatus:
    if isinstance(error, EvictedError):
        return RunStatus.EVICTED
    return RunStatus.TIMEOUT if isinstance(error, RunTimeoutError) else RunStatus.FAILED


def run_launch(  # noqa: PLR0913 - the launch, where it runs, and the sweep's hooks, by keyword
    launch: Launch,
    run_path: Path,
    executor: Executor,
    *,
    timeout_s: float,
    on_line: LineSink,
    ready: Ready,
    evictions: Command | None = None,
    finish: Finish | None = None,
    answered: set[str] | None = None,
) -> Outcome:
    """Wait for the launch's nodes, run it into run_path/<its workdir>, read its result.
    ``evictions``: on real machines, how to ask the nodes whether one was evicted when the
    launch failed (runner/sweep/eviction.py). ``finish`` makes the launch's result.json from
    what its processes left (a user's program: runner/sweep/programresult.py). ``answered``:
    the nodes that passed a readiness wait earlier in the sweep, this launch's added once its
    own passes; a node outside it that fails is not taken for evicted (it never answered).
    A write the run directory could not take (a full disk) is the launch's failure too,
    explained (runner/record/writefail.py): it is recorded like any other."""
    plan = launch.plan
    workdir = run_path / launch.workdir
    # an earlier attempt's result (--resume runs failed launches again in their directories)
    (workdir / RESULT_FILE).unlink(missing_ok=True)
    _remove_step_records(workdir / STEP_DIR)
    started = time.monotonic()
    nodes: tuple[NodeResult, ...] = ()  # how each node ended, once the executor says
    try:
        ready(plan)
        if answered is not None:
            answered.update(node.name for node in plan.every_node)
        ran = time.monotonic()
        nodes = executor.run(plan, workdir, timeout_s=timeout_s, on_line=on_line)
        if finish is not None:
            finish(plan, workdir, time.monotonic() - ran)
        result = load_result(workdir / RESULT_FILE)
    except OSError as caught:  # an executor's write: a full disk, the run directory removed
        explained = write_error(caught, run_path)
        if explained is None:
            raise
        # how each node ended: a node log the disk could not hold stopped them (LogCut), or
        # they ended and their result could not be written (``finish``: result.json)
        nodes = caught.node_results if isinstance(caught, LogCut) else nodes
        wall = time.monotonic() - started
        run = RunResult(
            plan.nnodes, launch.repeat, RunStatus.FAILED, wall, launch.workdir, nodes,
            explained.message,
        )  # fmt: skip
        return Outcome(run, error=explained)
    except DtrunError as caught:
        exc = caught
        ended = caught.node_results if isinstance(caught, RunError) else ()
        # a node that failed or was lost, not dtrun stopping the launch itself
        stopped = (RunTimeoutError, RunInterruptedError, EvictedError)
        if isinstance(exc, RunError) and not isinstance(exc, stopped):
            # a node whose disk could not take its result.json: the disk failed, not the node
            exc = unwritten(exc, run_path) or exc
            # a rank that ended early, cleanly, is named before the peers it left failing
            exc = early_exit(exc, workdir / STEP_DIR)
        if evictions is not None and isinstance(exc, RunError) and not isinstance(exc, stopped):
            exc = check_eviction(evictions, plan, exc, str(run_path), answered)
        node_results = exc.node_results if isinstance(exc, RunError) else ended
        wall = time.monotonic() - started
        run = RunResult(
            plan.nnodes, launch.repeat, status_of(exc), wall, launch.workdir, node_results,
            exc.message,
        )  # fmt: skip
        return Outcome(run, error=exc)
    wall = time.monotonic() - started
    return Outcome(
        RunResult(plan.nnodes, launch.repeat, RunStatus.OK, wall, launch.workdir, nodes), result
    )
