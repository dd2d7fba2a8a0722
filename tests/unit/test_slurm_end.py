"""How the end of dtrun's Slurm job is said and recorded: a cancel squeue cannot confirm after
a stop, a job an outside scancel left COMPLETING, and a --resume after such an end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from dtrun import errors
from dtrun.cli import session as sessions
from dtrun.cli.options import Launching
from dtrun.engines.base import Cluster, ClusterChoice
from dtrun.engines.registry import EngineOptions
from dtrun.engines.slurm.allocation import slurm_inventory
from dtrun.engines.slurm.engine import SlurmEngine
from dtrun.engines.slurm.job import _end_job
from dtrun.engines.slurm.shell import SlurmShell, cancel
from dtrun.errors import RunError, RunInterruptedError
from dtrun.record.resume import read_resume
from dtrun.record.rundir import amend, create_run_dir
from dtrun.record.runsfile import write_runs
from dtrun.record.writer import release_writer
from dtrun.report.build import build_report
from dtrun.spec.cluster import Node
from dtrun.spec.outcome import SweepStatus
from dtrun.spec.request import BenchSpec, Program, ProgramKind, RunSpec
from dtrun.sweep.run import run_sweep
from tests.factories import fake_run_dir
from tests.plans import sweep_plan
from tests.unit.test_sweep_records import Recorded

NODES = (Node("n1", "10.0.0.1", 8), Node("n2", "10.0.0.2", 8))


@dataclass(frozen=True)
class _Frozen(SlurmShell):
    """A controller stopped (SIGSTOP): every squeue times out. ``stop_at``: the squeue call
    during which a Ctrl-C reaches dtrun (0: none)."""

    stop_at: int = 0
    said: list[list[str]] = field(default_factory=list)

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        self.said.append(list(command))
        if command[0] != "squeue":
            return subprocess.CompletedProcess(list(command), 0, "", "")
        if len([c for c in self.said if c[0] == "squeue"]) == self.stop_at:
            os.kill(os.getpid(), signal.SIGINT)  # SIGTERM arrives as one (runner/cli/app.py)
        err = "slurm_load_jobs error: Socket timed out on send/recv operation\n"
        return subprocess.CompletedProcess(list(command), 1, "", err)


@pytest.fixture
def sigterm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(errors, "_stop_signal", [])
    errors.stopped_by(signal.SIGTERM)
    yield


def _session(tmp_path, monkeypatch, shell: SlurmShell) -> sessions.Session:
    inventory = slurm_inventory("slurm:job 25", NODES, gpus=8, python_bin="/v/bin", code_dir="/c")
    choice = ClusterChoice(EngineOptions(slurm=True), nodes=1)

    @contextlib.contextmanager
    def slurm_job(choice_: ClusterChoice, watch: sessions.StackWatch) -> Iterator[Cluster]:
        try:  # the job dtrun asked for, ended as the cluster closes (job.py _end_job)
            yield Cluster(inventory, None, choice, SlurmEngine())  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr("dtrun.engines.slurm.shell.CANCEL_WAIT_S", 0.0)
            # cancel's wait_s took the 60 s default at its definition: 60 s a test
            monkeypatch.setattr(cancel, "__kwdefaults__", {"wait_s": 0.0})
            _end_job(shell, "25", lambda _: None)

    monkeypatch.setattr(sessions, "opened", slurm_job)
    return sessions.Session(Launching(output=tmp_path), EngineOptions(slurm=True))


SPEC = RunSpec("r1", program=Program(ProgramKind.SCRIPT, "t.py"), procs_per_node=8)


def test_a_sigterm_d_run_whose_job_end_is_unconfirmed_exits_143_saying_so(
    tmp_path, monkeypatch, sigterm
):
    """Reproduced on Slurm with slurmctld stopped (SIGSTOP): a SIGTERM'd `dtrun run --slurm`
    exited 1, as a failed launch does, though the signal stopped it; tooling reads 143."""
    monkeypatch.setattr("dtrun.engines.slurm.shell.CANCEL_WAIT_S", 0.0)
    current = _session(tmp_path, monkeypatch, _Frozen())
    with pytest.raises(RunError, match="still unconfirmed") as raised, current.cluster(SPEC, 1):
        run_dir = create_run_dir(tmp_path, "r1")
        run_dir.write_json(run_dir.path / "run.json", {"status": "interrupted"})
        raise RunInterruptedError("dtrun stopped by SIGTERM")
    release_writer()
    assert raised.value.exit_code == 143
    said = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert said["status"] == "interrupted"
    assert "Slurm job 25 is still unconfirmed" in said["cleanup"]


def test_a_run_that_failed_on_its_own_keeps_exit_1_when_the_job_end_is_unconfirmed(
    tmp_path, monkeypatch, sigterm
):
    current = _session(tmp_path, monkeypatch, _Frozen())
    with pytest.raises(RunError, match="still unconfirmed") as raised, current.cluster(SPEC, 1):
        raise RunError("n1 failed with exit code 3")
    assert raised.value.exit_code == 1


def test_a_stop_while_the_cancel_goes_unconfirmed_keeps_both_and_exits_143(
    tmp_path, monkeypatch, sigterm
):
    """A SIGTERM (or a second Ctrl-C) while dtrun waited on a silent controller to confirm its
    cancel replaced the cancel's error with a bare stop: the terminal and the record lost
    that the job may still hold its nodes."""
    current = _session(tmp_path, monkeypatch, _Frozen(stop_at=2))
    with pytest.raises(RunInterruptedError) as raised, current.cluster(SPEC, 1):
        run_dir = create_run_dir(tmp_path, "r1")
        run_dir.write_json(run_dir.path / "run.json", {"status": "ok"})
        current.ended("the program", lambda error: None)
    release_writer()
    assert raised.value.exit_code == 143
    assert "stopped by SIGTERM while dtrun cancelled Slurm job 25" in raised.value.what
    assert "Slurm job 25 is still unconfirmed" in raised.value.why
    assert "`scancel 25`" in raised.value.fix
    said = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert "Slurm job 25 is still unconfirmed" in said["cleanup"]


@dataclass(frozen=True)
class _Completing(SlurmShell):
    """A job an outside scancel ended, still COMPLETING (its epilog runs) when dtrun looks,
    CANCELLED once scancel has been asked (scancel of a completing job does nothing)."""

    said: list[list[str]] = field(default_factory=list)

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        self.said.append(list(command))
        state = "CANCELLED" if any(c[0] == "scancel" for c in self.said) else "COMPLETING"
        if command[0] == "squeue" and "-t" not in command and state == "CANCELLED":
            return subprocess.CompletedProcess(list(command), 0, "", "")  # left the live list
        out = f"{state}|1:00|n[1-2]\n" if command[0] == "squeue" else ""
        return subprocess.CompletedProcess(list(command), 0, out, "")


def test_a_job_an_outside_scancel_left_completing_is_not_said_cancelled_by_dtrun():
    """A job an outside scancel had ended, still COMPLETING as dtrun closed, was said
    "cancelled; squeue no longer lists it": dtrun's doing, not the scancel's."""
    heard: list[str] = []
    _end_job(_Completing(), "9", heard.append)
    assert heard == ["Slurm job 9 had already ended (CANCELLED)"]


def test_a_running_job_is_cancelled_by_dtrun_and_said_so():
    @dataclass(frozen=True)
    class Running(_Completing):
        def run(
            self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
        ) -> subprocess.CompletedProcess[str]:
            done = super().run(command)
            return subprocess.CompletedProcess(
                done.args, 0, done.stdout.replace("COMPLETING", "RUNNING"), ""
            )

    heard: list[str] = []
    _end_job(Running(), "9", heard.append)
    assert heard == ["Slurm job 9 cancelled; squeue no longer lists it"]


def test_a_resume_keeps_the_cleanup_an_earlier_run_recorded_and_the_report_shows_it(
    tmp_path, fixed_inventory
):
    """A sweep whose Slurm job's cancel went unconfirmed, then `dtrun bench --resume`: the
    resume rewrote runs.json and the `cleanup` was gone, though the job may still have held
    its nodes; nothing in the record or the report said it had happened."""
    spec = BenchSpec("sw", node_counts=(1, 2), steps=4, warmup=1, repeat=1)
    run_dir = fake_run_dir(tmp_path / "sw", spec, fixed_inventory, {1: [1.0]})
    write_runs(run_dir, [], SweepStatus.INTERRUPTED, "stopped by SIGTERM")
    said = "Slurm job 25 is still unconfirmed (squeue: ...)\n  next: `scancel 25`"
    amend(run_dir, run_dir.runs, cleanup=said)  # as closed_recorded records it
    resumed = read_resume(run_dir.path, ())
    run_sweep(sweep_plan(fixed_inventory, resumed.spec), tmp_path, Recorded(), resumed=resumed)
    runs = json.loads(run_dir.runs.read_text())
    assert runs["status"] == SweepStatus.COMPLETE
    assert runs["earlier_cleanup"] == [said] and "cleanup" not in runs
    # and a second resume's own cleanup joins it, the earlier kept first
    amend(run_dir, run_dir.runs, cleanup="second", status="interrupted")
    assert read_resume(run_dir.path, ()).cleanups == (said, "second")
    build_report(run_dir)
    report = run_dir.report.read_text()
    section = report.split("## What dtrun could not tidy up")[1]
    assert f"```\n{said}\n```" in section and "```\nsecond\n```" in section


@pytest.mark.parametrize("reported", [True, False])
def test_an_unconfirmed_cancel_after_the_report_says_dtrun_report_adds_it(
    tmp_path, monkeypatch, sigterm, reported
):
    """The report a sweep builds before its cluster closes lacks the `cleanup` the close's
    error adds to runs.json (`dtrun report` shows it): the message did not say so."""
    current = _session(tmp_path, monkeypatch, _Frozen(stop_at=2))
    with pytest.raises(RunInterruptedError) as raised, current.cluster(SPEC, 1):
        run_dir = create_run_dir(tmp_path, "r1")
        write_runs(run_dir, [], SweepStatus.COMPLETE, None)
        if reported:
            run_dir.report.write_text("# dtrun r1\n")
        current.ended("the sweep", lambda error: None)
    release_writer()
    said = json.loads(run_dir.runs.read_text())["cleanup"]
    assert "Slurm job 25 is still unconfirmed" in said and "dtrun report" not in said
    hint = f"`dtrun report {tmp_path / 'r1'}` adds this to the report"
    assert raised.value.fix.startswith("once the controller answers")
    assert raised.value.fix.endswith(f"; {hint}") is reported
    assert raised.value.exit_code == 143
