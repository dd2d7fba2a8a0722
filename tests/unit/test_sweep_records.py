"""A sweep's records say what happened: a stop after the last launch is recorded as a stop, and
a full disk or a removed run directory ends the sweep with a message, not a traceback, leaving
no record that claims more than was written."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from dtrun import errors
from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.errors import (
    DamagedRunError,
    DiskFullError,
    NodeFailedError,
    RunDirWriteError,
    RunInterruptedError,
)
from dtrun.execute import Executor, LineSink, LogCut
from dtrun.record.rundir import RunDir, record_machine_noise
from dtrun.report.builder import ReportBuilder
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import RESULT_FILE, LaunchPlan
from dtrun.spec.outcome import NodeResult
from dtrun.spec.request import BenchSpec, HealthGate
from dtrun.sweep import run as sweep_run
from dtrun.sweep.run import run_sweep
from dtrun.workloads.files import CUT_LOGS, UNWRITTEN
from tests.conftest import fill, run_dtrun
from tests.factories import result_data
from tests.plans import sweep_plan


class Recorded(LocalExecutor):
    """An executor that runs nothing: each launch writes rank 0's result, as a node would;
    ``during(n, workdir)`` runs in the n-th launch (from 1)."""

    def __init__(self, during: Any = None) -> None:
        super().__init__()
        self.launches = 0
        self.during = during

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        self.launches += 1
        workdir.mkdir(parents=True, exist_ok=True)
        if self.during is not None:
            self.during(self.launches, workdir)
        data = result_data(world=plan.world_size, tokens_per_s=1000.0 * plan.nnodes)
        (workdir / RESULT_FILE).write_text(json.dumps(data))
        return tuple(
            NodeResult(launch.node.name, launch.node.address, 0, f"{launch.node.name}.log", 0.1)
            for launch in plan.launches
        )


class StoppedWhileReporting:
    """The report helper, with SIGTERM arriving while it builds (after the last launch)."""

    def build(self, run_dir: RunDir) -> None:
        errors.stopped_by(signal.SIGTERM)
        raise KeyboardInterrupt

    def close(self) -> None:
        pass


@pytest.fixture
def no_stop_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "_stop_signal", [])


def bench(run_id: str) -> BenchSpec:
    return BenchSpec(run_id=run_id, node_counts=(1, 2), steps=4, warmup=1, repeat=1)


def runs_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "runs.json").read_text())
    return data


def test_a_sigterm_after_the_last_launch_is_recorded_as_the_exit_code_says(
    tmp_path: Path, fixed_inventory: Inventory, monkeypatch: pytest.MonkeyPatch, no_stop_yet: None
):
    monkeypatch.setattr(sweep_run, "ReportBuilder", StoppedWhileReporting)
    with pytest.raises(RunInterruptedError) as raised:
        run_sweep(sweep_plan(fixed_inventory, bench("late")), tmp_path, Recorded())
    assert raised.value.exit_code == 143
    assert f"next: rebuild the report with `dtrun report {tmp_path / 'late'}`" in str(raised.value)
    runs = runs_of(tmp_path / "late")
    assert runs["status"] == "interrupted"  # not "complete", with dtrun exiting 143
    assert runs["error"].startswith("stopped by SIGTERM after its last launch")
    assert [(run["nodes"], run["status"]) for run in runs["runs"]] == [(1, "ok"), (2, "ok")]


def test_a_full_disk_mid_sweep_keeps_the_last_whole_record_and_says_so(
    small_disk: Callable[[int], Path], fixed_inventory: Inventory
):
    disk = small_disk(400)

    def full_from_the_second_launch(launch: int, workdir: Path) -> None:
        if launch == 2:
            fill(disk)

    with pytest.raises(DiskFullError) as raised:
        run_sweep(
            sweep_plan(fixed_inventory, bench("full")), disk, Recorded(full_from_the_second_launch)
        )
    run = disk / "full"
    assert raised.value.exit_code == 1
    assert f"the disk holding {run} is full" in str(raised.value)
    assert f"next: free space and run `dtrun report {run}`" in str(raised.value)
    runs = runs_of(run)  # as written after the first launch: nothing claimed beyond it
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(1, "ok")]
    assert not [path for path in run.rglob("*") if ".partial" in path.name]
    (disk / "filler").unlink()
    assert run_dtrun("report", str(run), cwd=disk).returncode == 0  # as the message says


class CutOnTheSecondLaunch(Recorded):
    """The second launch's node-1 log could not be written (a full disk under the launch, not
    under runs.json): the executor stopped its nodes and raised NodeLog's error with how each
    ended, as the embedded executor does."""

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        if self.launches == 0:
            return super().run(plan, workdir, timeout_s=timeout_s, on_line=on_line)
        nodes = tuple(
            NodeResult(
                launch.node.name,
                launch.node.address,
                None,
                str(workdir / f"{launch.node.name}.log"),
                0.5,
            )
            for launch in plan.launches
        )
        CUT_LOGS[str(workdir / "node-1.log")] = "No space left on device"  # as NodeLog has it
        cut = OSError(errno.ENOSPC, "No space left on device", str(workdir / "node-1.log"))
        raise LogCut(cut, nodes)


def test_a_launch_a_full_disk_stopped_is_recorded_failed_with_its_nodes_where_runs_json_fits(
    tmp_path: Path, fixed_inventory: Inventory
):
    """As `dtrun run` records it in run.json: the launch is in runs.json, failed, with each
    node's end and the full disk's words, beside the sweep's error. Before, runs.json had only
    the sweep's error: the launch that stopped it was missing."""
    with pytest.raises(DiskFullError) as raised:
        run_sweep(sweep_plan(fixed_inventory, bench("cut")), tmp_path, CutOnTheSecondLaunch())
    assert (
        "n2/r0/node-1.log could not be written, so the launch was stopped" in raised.value.message
    )
    runs = runs_of(tmp_path / "cut")
    assert runs["status"] == "failed" and runs["error"] == raised.value.message
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(1, "ok"), (2, "failed")]
    cut = runs["runs"][1]
    assert cut["error"] == raised.value.message
    assert [(n["node"], n["exit_code"]) for n in cut["node_results"]] == [
        (node.name, None) for node in fixed_inventory.nodes[:2]
    ]
    assert cut["node_results"][1]["log_cut"].startswith("No space left on device")


def test_a_result_a_full_disk_refused_after_every_node_ended_keeps_how_each_ended(
    tmp_path: Path,
):
    """A user's program ran to its end on every node; its result.json (the sweep's ``finish``)
    could not be written: the launch is recorded failed with the full disk's words and each
    node's end, as the executor returned it. Before, the record dropped every node."""
    from dtrun.plan.sweep import Launch
    from dtrun.spec.cluster import Node
    from dtrun.spec.launchplan import NodeLaunch
    from dtrun.spec.outcome import RunStatus
    from dtrun.sweep.runlaunch import always_ready, run_launch

    launches = tuple(
        NodeLaunch(Node(f"node-{i}", "127.0.0.1"), i, f"node-{i}.sh", "") for i in range(2)
    )
    plan = LaunchPlan("torchrun", "program", 2, 1, 2, 8, "r", "h", 1, launches)
    workdir = tmp_path / "n2" / "r0"
    ended = tuple(
        NodeResult(
            each.node.name, each.node.address, 0, str(workdir / f"{each.node.name}.log"), 1.0
        )
        for each in launches
    )

    class Ran:
        def run(self, *_: object, **__: object) -> tuple[NodeResult, ...]:
            return ended

    def finish(plan: LaunchPlan, workdir: Path, wall_s: float) -> None:
        temporary = workdir / f".{RESULT_FILE}.0a1b2c3d.partial"  # write_atomic's
        raise OSError(errno.ENOSPC, "No space left on device", str(temporary))

    executor = cast(Executor, Ran())
    outcome = run_launch(
        Launch(plan, "n2/r0"), tmp_path, executor, timeout_s=60, on_line=lambda *_: None,
        ready=always_ready, finish=finish,
    )  # fmt: skip
    assert isinstance(outcome.error, DiskFullError)
    assert f"n2/r0/{RESULT_FILE} could not be written" in outcome.error.message
    assert outcome.run.status is RunStatus.FAILED and outcome.run.node_results == ended


class ResultUnwrittenAtTheGate(Recorded):
    """The health gate's check on node-0 ran, and its all-reduce could not write result.json
    (a full disk): the workload said so in its node log (write_result's line, then its
    traceback) and exited 1, and the executor raised that node's failure, as the embedded
    executor does. Every other launch runs as Recorded's."""

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        if workdir.parent.name != "health":
            return super().run(plan, workdir, timeout_s=timeout_s, on_line=on_line)
        node, log = plan.launches[0].node, workdir / "node-0.log"
        said = "OSError: [Errno 28] No space left on device"
        log.write_text(f"{UNWRITTEN} {errno.ENOSPC} {workdir / RESULT_FILE}\n[rank0]: {said}\n")
        failed = NodeFailedError(node.name, node.address, 1, str(log), said)
        failed.node_results = (NodeResult(node.name, node.address, 1, str(log), 0.5),)
        raise failed


def test_a_gate_check_whose_result_a_full_disk_refused_stops_the_sweep_as_a_full_disk(
    tmp_path: Path, fixed_inventory: Inventory
):
    """Not node-0 judged unhealthy (the gate warned and the sweep went on): the disk is named,
    as for a node log the disk cut, and nothing is said of node-0's health."""
    spec = BenchSpec(
        run_id="gate", node_counts=(1,), steps=4, warmup=1, repeat=1, procs_per_node=2,
        health=HealthGate(threshold_gbs=0.001),
    )  # fmt: skip
    executor = ResultUnwrittenAtTheGate()
    with pytest.raises(errors.DtrunError) as raised:
        run_sweep(sweep_plan(fixed_inventory, spec), tmp_path, executor)
    run = tmp_path / "gate"
    # before: node-0 below the mark ("failed with exit code 1"), and the sweep went on
    assert not (run / "health.json").exists(), (run / "health.json").read_text()
    assert executor.launches == 0  # no point ran after it
    assert isinstance(raised.value, DiskFullError) and raised.value.exit_code == 1
    assert f"the disk holding {run} is full" in raised.value.message
    assert f"health/node-0/{RESULT_FILE} could not be written" in raised.value.message
    runs = runs_of(run)
    assert runs["status"] == "failed" and runs["error"] == raised.value.message


def test_a_launch_directory_its_program_removed_is_named_and_recorded(
    tmp_path: Path, fixed_inventory: Inventory
):
    def remove_own(launch: int, workdir: Path) -> None:
        shutil.rmtree(workdir)  # what a program may do to the directory it runs in

    with pytest.raises(RunDirWriteError) as raised:
        run_sweep(sweep_plan(fixed_inventory, bench("own")), tmp_path, Recorded(remove_own))
    assert raised.value.exit_code == 1
    assert f"n1/r0 in {tmp_path / 'own'} was removed while dtrun was writing to it" in str(
        raised.value
    )
    assert f"{tmp_path / 'own' / 'n1' / 'r0' / RESULT_FILE} could not be written" in str(
        raised.value
    )
    runs = runs_of(tmp_path / "own")
    assert runs["status"] == "failed"
    assert "n1/r0" in runs["error"]


def test_a_run_directory_removed_during_the_sweep_is_named(
    tmp_path: Path, fixed_inventory: Inventory
):
    def remove_it(launch: int, workdir: Path) -> None:
        # the run's record is written beside the first launch (runner/sweep/beside.py): a file
        # made while the tree is removed leaves it not empty, so remove until it is gone
        while launch == 1 and (tmp_path / "gone").exists():
            shutil.rmtree(tmp_path / "gone", ignore_errors=True)

    with pytest.raises(RunDirWriteError, match="was removed while dtrun was writing to it"):
        run_sweep(sweep_plan(fixed_inventory, bench("gone")), tmp_path, Recorded(remove_it))
    assert not (tmp_path / "gone").exists()  # not made again, empty, by a later launch


def test_a_fifo_the_program_left_at_manifest_json_is_refused_not_waited_on(tmp_path):
    """The program runs two levels below the manifest, which dtrun reads back at the sweep's
    end to add the machine's noise: a FIFO left there blocked that read for ever."""
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    os.mkfifo(run_dir.manifest)
    raised: list[BaseException] = []

    def add_noise() -> None:
        try:
            record_machine_noise(run_dir, None)
        except BaseException as exc:  # what it raised is the answer
            raised.append(exc)

    reader = threading.Thread(target=add_noise, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # let the read end: a writer opens and closes the FIFO
        os.close(os.open(run_dir.manifest, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert len(raised) == 1 and isinstance(raised[0], DamagedRunError)
    assert "FIFO" in raised[0].why


def test_a_gate_check_a_full_disk_refused_is_named_where_runs_json_is_refused_too(
    small_disk: Callable[[int], Path], fixed_inventory: Inventory, monkeypatch: pytest.MonkeyPatch
):
    """One full disk, the run directory's: the gate check's result.json was refused, then
    runs.json too as the sweep ended. The first file refused is the cause said; before, the
    runs.json write's error replaced it."""
    disk = small_disk(400)
    recorded = threading.Event()  # the run's record is written beside the first launch
    builder = ReportBuilder

    def record() -> ReportBuilder:
        recorded.set()  # the manifest and plans written: the disk fills after them
        return builder()

    class FullAtTheGate(ResultUnwrittenAtTheGate):
        def run(
            self,
            plan: LaunchPlan,
            workdir: Path,
            *,
            timeout_s: float,
            on_line: LineSink,
            tag: str | None = None,
        ) -> tuple[NodeResult, ...]:
            assert recorded.wait(30)
            try:
                return super().run(plan, workdir, timeout_s=timeout_s, on_line=on_line)
            finally:
                fill(disk)  # after its log: the node said what it could not write

    monkeypatch.setattr(sweep_run, "ReportBuilder", record)
    spec = BenchSpec(
        run_id="gate", node_counts=(1,), steps=4, warmup=1, repeat=1, procs_per_node=2,
        health=HealthGate(threshold_gbs=0.001),
    )  # fmt: skip
    with pytest.raises(DiskFullError) as raised:
        run_sweep(sweep_plan(fixed_inventory, spec), disk, FullAtTheGate())
    assert f"the disk holding {disk / 'gate'} is full" in raised.value.message
    assert f"health/node-0/{RESULT_FILE} could not be written" in raised.value.message
    assert "runs.json could not take the entry either" in raised.value.message


def test_a_failed_launch_is_still_reported_done_where_runs_json_refuses_it(
    small_disk: Callable[[int], Path], fixed_inventory: Inventory
):
    """The second launch failed on a full disk and runs.json could not take it either: the
    progress line for that launch (on_done: `x 2 nodes, launch 1: failed after ...`) was never
    printed, so neither the screen nor any record named the launch that failed."""
    from dtrun.spec.outcome import RunResult
    from dtrun.sweep.run import SweepEvents

    disk = small_disk(400)
    heard: list[tuple[int, str]] = []

    def on_done(run: RunResult, result: object) -> None:
        heard.append((run.nodes, run.status.value))

    def full_from_the_second_launch(launch: int, workdir: Path) -> None:
        if launch == 2:
            fill(disk)

    with pytest.raises(DiskFullError) as raised:
        run_sweep(
            sweep_plan(fixed_inventory, bench("told")),
            disk,
            Recorded(full_from_the_second_launch),
            SweepEvents(on_done=on_done),
        )
    assert f"the disk holding {disk / 'told'} is full" in raised.value.message
    assert [(r["nodes"], r["status"]) for r in runs_of(disk / "told")["runs"]] == [(1, "ok")]
    assert heard == [(1, "ok"), (2, "failed")]


class FailsFirstLaunch(Recorded):
    """Every node of the first launch exits 1."""

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        node = plan.launches[0].node
        failed = NodeFailedError(node.name, node.address, 1, f"{node.name}.log", "")
        failed.node_results = (NodeResult(node.name, node.address, 1, f"{node.name}.log", 0.5),)
        raise failed


def test_a_sigterm_while_a_failed_sweep_s_report_is_built_keeps_the_failure_and_the_next_step(
    tmp_path: Path, fixed_inventory: Inventory, monkeypatch: pytest.MonkeyPatch, no_stop_yet: None
):
    """Not a bare "stopped by SIGTERM": the failure, that the report may be unfinished, and
    the command that rebuilds it; runs.json keeps the failure (docs/bench.md, Signals)."""
    monkeypatch.setattr(sweep_run, "ReportBuilder", StoppedWhileReporting)
    with pytest.raises(RunInterruptedError) as raised:
        run_sweep(sweep_plan(fixed_inventory, bench("failed")), tmp_path, FailsFirstLaunch())
    said = str(raised.value)
    assert raised.value.exit_code == 143 and "failed with exit code 1" in said
    assert f"next: rebuild the report with `dtrun report {tmp_path / 'failed'}`" in said
    assert runs_of(tmp_path / "failed")["status"] == "failed"
