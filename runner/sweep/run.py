"""Running a sweep plan: the health gate's launches, then every point with its repeats, each
recorded as it ends.

Nothing finished is ever lost: runs.json is rewritten after every launch, and the summary and
report are rebuilt on the way out whether the sweep completed, failed or was interrupted.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.azure.prices import sweep_price
from dtrun.engines.base import Drain
from dtrun.engines.common.signals import sigint_deferred
from dtrun.errors import DtrunError, LaunchInterrupted, RunInterruptedError, interruption
from dtrun.execute import Executor, LineSink, discard
from dtrun.plan.sweep import Launch, SweepPlan
from dtrun.record.noise_sample import MachineSample
from dtrun.record.paid import paid_before
from dtrun.record.resume import Resumed
from dtrun.record.rundir import (
    RunDir,
    create_run_dir,
    record_machine_noise,
    record_resume,
    write_health,
    write_manifest,
    write_plans,
)
from dtrun.record.runsfile import write_runs
from dtrun.record.writefail import first_cause, write_error
from dtrun.report.builder import ReportBuilder
from dtrun.report.resultfile import Result
from dtrun.spec.cluster import Node
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import (
    GateStatus,
    Health,
    RunResult,
    RunStatus,
    SweepStatus,
)
from dtrun.sweep.beside import Beside
from dtrun.sweep.eviction import Command
from dtrun.sweep.gate import judge, refuse, skipped, written
from dtrun.sweep.runlaunch import Outcome, Ready, always_ready, run_launch

if TYPE_CHECKING:
    from dtrun.report.build import Report


def _ignore(*_: object) -> None:
    """A SweepEvents hook nobody listens to."""


@dataclass(frozen=True)
class SweepEvents:
    """What the caller hears while the sweep runs (the CLI draws progress from these)."""

    on_begin: Callable[[RunDir], None] = _ignore
    on_line: LineSink = discard
    on_start: Callable[[LaunchPlan, int], None] = _ignore
    on_done: Callable[[RunResult, Result | None], None] = _ignore
    on_gate_node: Callable[[Node, int, int], None] = _ignore  # a gate check starts
    on_health: Callable[[Health], None] = _ignore  # the gate's verdict


@dataclass
class Sweep:
    run_dir: RunDir
    runs: list[RunResult] = field(default_factory=list)
    report: Report | None = None
    health: Health | None = None
    # run_sweep(report_later=True): the report's files, written by write_report
    unwritten: Callable[[], None] | None = None

    def write_report(self) -> None:
        """The report's files, where run_sweep left them for later (after the summary)."""
        unwritten, self.unwritten = self.unwritten, None
        if unwritten is not None:
            unwritten()


class _Runner:
    """One sweep plan under way: its run directory, its records, the launch it is in."""

    def __init__(
        self,
        plan: SweepPlan,
        run_dir: RunDir,
        executor: Executor,
        events: SweepEvents,
        ready: Ready,
        drain: Drain | None = None,
        evictions: Command | None = None,
        beside: Beside[ReportBuilder] | None = None,
    ) -> None:
        self.plan, self.executor, self.events, self.ready = plan, executor, events, ready
        self.drain, self.evictions = drain, evictions
        self.beside = beside or Beside(ReportBuilder)  # the record and the report helper
        self.report_later, self.record_failed = False, False  # run_sweep(report_later=True)
        self.leave_out = True  # launches in noise left out (a resumed older sweep's: not)
        self.sweep = Sweep(run_dir)
        self.status = SweepStatus.RUNNING
        self.error: str | None = None
        self.failure: DtrunError | None = None  # what failed the sweep: its first cause
        self.current: tuple[Launch, float] | None = None  # the point under way, and its start
        self.answered: set[str] = set()  # nodes that answered (readiness, program check)
        self.started = time.monotonic()  # the sweep's start: its run directory was just made
        # --resume: the earlier runs' records (wall times, launches without a result, cleanup)
        self.resumed: Resumed | None = None
        # --step-pattern: node 0's matching lines of the launch under way (arrival, groups)
        self.matched: list[tuple[float, dict[str, str | None]]] = []

    def launch(self, launch: Launch) -> Outcome:
        """Every launch of the sweep, the gate's and the points', runs through here."""
        # made here, not by the executor: a run directory removed under the sweep is named
        # (an executor's mkdir -p would make it again, empty)
        self.sweep.run_dir.makedirs(self.sweep.run_dir.path / launch.workdir)
        self.beside.start()  # the nodes start meanwhile; joined once this launch has ended
        outcome = run_launch(
            launch,
            self.sweep.run_dir.path,
            self.executor,
            timeout_s=self.plan.spec.timeout_s,
            on_line=self.on_line(launch.plan),
            ready=self.ready,
            evictions=self.evictions,
            finish=self.finish_program if launch.plan.workload == "program" else None,
            answered=self.answered,
        )
        try:
            self.beside.join()
        except BaseException:
            self.record_failed = True  # raised here; finish has nothing to report on
            raise
        return outcome

    def on_line(self, plan: LaunchPlan) -> LineSink:
        """The events' line sink; with --step-pattern, node 0's matching lines are kept with
        their arrival time for the launch's result."""
        pattern = self.plan.spec.step_pattern
        self.matched = []
        if plan.workload != "program" or pattern is None:
            return self.events.on_line
        from dtrun.plan.steppattern import step_matcher  # RE2: linear in a line's length

        match, first, sink = step_matcher(pattern), plan.launches[0].node.name, self.events.on_line

        def on_line(node: str, line: str) -> None:
            if node == first:
                found = match(line)  # a progress state too ("\r")
                if found is not None:
                    self.matched.append((time.monotonic(), found))
            sink(node, line)

        return on_line

    def finish_program(self, plan: LaunchPlan, workdir: Path, wall_s: float) -> None:
        """A user program's launch: its result.json from the step hook's records (or the
        step pattern's matches)."""
        from dtrun.sweep.programresult import write_program_result

        matched = list(self.matched) if self.plan.spec.step_pattern is not None else None
        write_program_result(self.plan.spec, plan, workdir, wall_s, matched)
        if self.plan.spec.probe and plan.world_size > 1:
            from dtrun.sweep.programprobe import probe_program

            run_dir, on_line = self.sweep.run_dir, self.events.on_line
            probe_program(self.plan, plan, workdir, self.executor, run_dir, on_line)

    def gate(self) -> Health:
        gate, path = self.plan.gate, self.sweep.run_dir.path
        if isinstance(gate, str):
            health = skipped(gate)
        else:
            outcomes = []
            for index, check in enumerate(gate.checks):
                self.events.on_gate_node(check.plan.nodes[0], index, len(gate.checks))
                outcomes.append(written(self.launch(check)))
            health = judge(gate, outcomes, strict=self.plan.spec.health.strict)
            if health.below and self.drain is not None:
                # --drain-failing: the scheduler keeps them out of this and later jobs
                health = replace(health, status=GateStatus.FAILED, note=self.drain(health.below))
        write_health(path, health)
        if health.status is GateStatus.FAILED:
            raise refuse(health, str(path))
        return health

    def points(self, resumed: Resumed | None = None) -> None:
        kept = resumed.is_done if resumed is not None else lambda nodes, repeat: False
        done = [kept(launch.plan.nnodes, launch.repeat) for launch in self.plan.launches]
        last = max((i for i, was in enumerate(done) if was), default=-1)
        for index, launch in enumerate(self.plan.launches):
            if done[index]:
                continue  # --resume: finished with a result before; kept as it was
            if self.plan.spec.until_decided and (index < last or not self.runs_next(launch)):
                continue  # stopped or waiting (runs_next), or a round a --resume left behind
            self.events.on_start(launch.plan, launch.repeat)
            self.current = (launch, time.monotonic())
            outcome = self.launch(launch)
            self.current = None
            if outcome.error is not None:  # recorded with its launch
                self.failed(outcome.error)  # a full disk stops the rest
            try:
                self.record(outcome.run)
            finally:  # its line even where runs.json refused it: then nothing else names it
                self.events.on_done(outcome.run, outcome.result)
            if outcome.error is not None:
                raise outcome.error

    def runs_next(self, launch: Launch) -> bool:
        """--until-decided: whether ``launch``'s node count launches again (decided.py)."""
        from dtrun.sweep.decided import launches_next

        runs, path = self.sweep.runs, self.sweep.run_dir.path
        return launches_next(self.plan, launch, runs, path, self.leave_out)

    def record(self, run: RunResult) -> None:
        self.sweep.runs.append(run)
        self.write_runs()

    def failed(self, error: DtrunError) -> None:
        self.status, self.error, self.failure = SweepStatus.FAILED, error.message, error

    def write_runs(self) -> None:
        """runs.json; where the sweep failed already, a write refused (a full disk, often that
        failure's cause) raises the failure, saying runs.json lacks it."""
        earlier = self.resumed or Resumed(self.sweep.run_dir, self.plan.spec, ())
        walls = (*earlier.walls, time.monotonic() - self.started)
        try:
            run_dir, runs, cleanup = self.sweep.run_dir, self.sweep.runs, earlier.cleanups
            write_runs(run_dir, runs, self.status, self.error, walls, earlier.replaced, cleanup)
        except DtrunError as refused:  # a write refused: the sweep's first cause is kept
            raise first_cause(self.failure, refused, "runs.json") from None

    def finish(self, sample: MachineSample | None, resumed: bool) -> None:
        """However the sweep ended: runs.json, the machine's sample, the report. Where the
        records cannot be written (a full disk, the run directory removed), no report is
        built on them: the error says so, and `dtrun report` builds it later. A stop (Ctrl-C,
        SIGTERM, SIGHUP) here, after the last launch, is recorded as one: runs.json and dtrun's
        exit code say the same. With report_later, a complete sweep's report is analysed here
        and its files left to Sweep.write_report."""
        run_dir = self.sweep.run_dir
        try:
            reporter = self.beside.join()
        except BaseException:
            if self.record_failed:
                return  # no manifest: nothing to record or report on (the launch raised why)
            raise
        try:
            try:
                # stopping already (a Ctrl-C, a failure): a Ctrl-C now is that stop, not a cut
                # in how it is recorded
                with sigint_deferred(replay=self.status is SweepStatus.COMPLETE):
                    self.write_runs()
                if sample is not None:  # after a Ctrl-C, not a moment more for it
                    interrupted = self.status is SweepStatus.INTERRUPTED
                    record_machine_noise(run_dir, sample.result(wait=not interrupted), resumed)
            except BaseException:
                reporter.close()
                raise
            if self.report_later and self.status is SweepStatus.COMPLETE:
                report = self.sweep.report = reporter.analyse(run_dir)
                self.sweep.unwritten = lambda: reporter.write(report)
            else:
                self.sweep.report = reporter.build(run_dir)
        except KeyboardInterrupt:
            if self.status is not SweepStatus.COMPLETE:  # stopped in a launch, or failed:
                # recorded as that already; said so, not as a bare stop that hides it
                rest = f"; run the rest with `dtrun bench --resume {run_dir.path}`"
                raise RunInterruptedError(
                    interruption(),
                    why="as the report was built, which may be unfinished, after: "
                    + (self.error or "").split("\n")[0],  # its first line: runs.json holds all
                    fix=f"rebuild the report with `dtrun report {run_dir.path}`"
                    + (rest if self.status is SweepStatus.INTERRUPTED else ""),
                ) from None
            self.status = SweepStatus.INTERRUPTED
            self.error = f"{interruption()} after its last launch: every launch ended and is "
            self.error += "recorded; the report may be unfinished"
            self.write_runs()
            raise RunInterruptedError(
                interruption(),
                why="every launch of the sweep had ended and is recorded, the report may be "
                "unfinished",
                fix=f"rebuild the report with `dtrun report {run_dir.path}`",
            ) from None

    def interrupted(self, stop: KeyboardInterrupt) -> None:
        """``stop``: with how each node of the launch under way ended, as its executor said
        (LaunchInterrupted), and how that launch had ended where the stop came as it stopped."""
        nodes = stop.node_results if isinstance(stop, LaunchInterrupted) else ()
        self.status, self.error = SweepStatus.INTERRUPTED, interruption(stop)
        if self.current is not None:
            launch, started = self.current
            wall = time.monotonic() - started
            self.sweep.runs.append(
                RunResult(
                    launch.plan.nnodes, launch.repeat, RunStatus.INTERRUPTED, wall,
                    launch.workdir, nodes, self.error,
                )
            )  # fmt: skip


def run_sweep(  # noqa: PLR0913 - the sweep, its collaborators, and the command to record
    plan: SweepPlan,
    output: Path,
    executor: Executor,
    events: SweepEvents | None = None,
    ready: Ready = always_ready,
    drain: Drain | None = None,
    resumed: Resumed | None = None,
    evictions: Command | None = None,
    *,
    command: Sequence[str] | None = None,
    report_later: bool = False,
    answered: Collection[str] = (),
) -> Sweep:
    """Run a sweep plan into output/<run-id>/: the gate, then every launch of every point.

    Raises the first RunError after recording it. ``ready`` runs before every launch (nodes
    reachable and, with --check, healthy). ``resumed`` (--resume): the run directory exists and
    its launches done are kept; only the others run, and the report covers them all.
    ``evictions`` (real machines over SSH): after a failed launch, ask the nodes whether one
    was evicted (runner/sweep/eviction.py). ``command``: dtrun's arguments as typed, recorded
    (secrets hidden) in manifest.json. ``report_later``: a complete sweep's report is analysed
    (Sweep.report) and its files written by Sweep.write_report, after the caller has shown it.
    ``answered``: nodes that answered before the sweep (the program check): gone later, they
    vanished (runner/sweep/eviction.py), as nodes that passed a readiness wait did.
    """
    events = events or SweepEvents()
    spec = plan.spec
    started = time.monotonic()
    inventory = plan.inventory
    price = sweep_price(spec.price_per_node_hour, inventory.size, inventory.region)
    now = datetime.datetime.now(datetime.UTC)
    if resumed is None:
        before = paid_before(output, inventory, now)
        run_dir = create_run_dir(output, spec.run_id)
        events.on_begin(run_dir)
    else:
        run_dir = resumed.run_dir
        events.on_begin(run_dir)
        before = paid_before(run_dir.path.parent, inventory, now)
    # plan/n<N>/: as rendered before its launches ran (a resumed point's kept launches keep
    # theirs, and each launch directory holds its own scripts)
    kept = {run.nodes for run in resumed.done} if resumed is not None else set()

    def record() -> ReportBuilder:
        """Beside the first launch: the run's record, then the report helper's start."""
        if resumed is None:
            write_manifest(run_dir, spec, inventory, plan.environment, price, before, command)
        else:
            record_resume(run_dir, inventory, len(resumed.done), before, command, spec.secrets())
        write_plans(run_dir, [point for point in plan.points if point.nnodes not in kept])
        return ReportBuilder()

    # On the embedded cluster the nodes are this machine: how busy it is as the sweep begins.
    sample = MachineSample() if plan.inventory.source == "embedded" else None
    sweeping = _Runner(plan, run_dir, executor, events, ready, drain, evictions, Beside(record))
    sweeping.started, sweeping.report_later = started, report_later
    sweeping.leave_out = resumed is None or resumed.leave_out
    sweeping.answered.update(answered)
    if resumed is not None:
        sweeping.sweep.runs.extend(resumed.done)
        sweeping.resumed = resumed
    try:
        try:
            sweeping.sweep.health = sweeping.gate()
        except DtrunError as exc:
            sweeping.failed(exc)
            raise
        events.on_health(sweeping.sweep.health)
        sweeping.points(resumed)
        sweeping.status = SweepStatus.COMPLETE
    except KeyboardInterrupt as stop:
        sweeping.interrupted(stop)
        raise RunInterruptedError(
            interruption(stop),
            why="every process dtrun started was stopped",
            fix=f"finished launches are kept in {run_dir.path}; run the rest with "
            f"`dtrun bench --resume {run_dir.path}` (or rebuild the report as it is with "
            f"`dtrun report {run_dir.path}`)",
        ) from None
    except OSError as exc:  # an executor's write: a full disk, the run directory removed
        explained = write_error(exc, run_dir.path)
        if explained is None:
            raise
        sweeping.failed(explained)
        raise explained from None
    finally:
        sweeping.finish(sample, resumed is not None)
    return sweeping.sweep
