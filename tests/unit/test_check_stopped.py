"""check.json of a check that did not finish (docs/check.md, "check.json"): run_check over a
cluster whose launch is stopped, times out or fails records how, with no verdict. The real
stops on the embedded cluster: tests/e2e/test_check.py."""

from __future__ import annotations

import errno
import json
import signal
from types import SimpleNamespace
from typing import Any

import pytest

from dtrun import errors
from dtrun.check.stopped import stopped_record
from dtrun.engines.embedded.inventory import embedded_inventory
from dtrun.engines.ssh.session import SshError
from dtrun.errors import (
    DiskFullError,
    DtrunError,
    LaunchInterrupted,
    NodeFailedError,
    RunError,
    RunInterruptedError,
    RunTimeoutError,
    stopped_by,
)
from dtrun.execute import LogCut
from dtrun.plan.resolve import resolve_run
from dtrun.spec.outcome import NodeResult
from dtrun.spec.request import Program, ProgramKind, RunSpec
from dtrun.sweep.check import run_check
from dtrun.workloads.files import CUT_LOGS, UNWRITTEN

RESULTS = (
    NodeResult("node-0", "127.0.0.1", None, "/r/check/node-0.log", 3.0),
    NodeResult("node-1", "127.0.0.1", -15, "/r/check/node-1.log", 3.0),
)


class _Executor:
    """Every node answers; the launch ends with ``stop``, else exits 0 having written
    ``result``."""

    def __init__(self, stop: BaseException | None, result: str | None = None) -> None:
        self.stop = stop
        self.result = result

    def command(self, commands):
        return {name: SimpleNamespace(error=None, exit_code=0) for name in commands}

    def run(self, plan, workdir, *, timeout_s, on_line):
        if self.stop is not None:
            raise self.stop
        if self.result is not None:  # rank 0's result, as written
            (workdir / "result.json").write_text(self.result)
        return RESULTS


def _run(tmp_path, stop: BaseException) -> None:
    """run_check, ended by ``stop``, which it raises again."""
    _run_on(tmp_path, _Executor(stop), type(stop))


def _run_on(tmp_path, executor: object, raises: type[BaseException]) -> BaseException:
    """run_check of two embedded nodes on ``executor``; what it raised, of type ``raises``."""
    cluster = SimpleNamespace(
        inventory=embedded_inventory(2), executor=executor, ready=lambda plan: None
    )
    spec = RunSpec(
        "stopped", procs_per_node=1, nodes=2, rdzv_port=29400,
        program=Program(ProgramKind.MODULE, "dtrun.workloads.check"), timeout_s=60.0,
    )  # fmt: skip
    with pytest.raises(raises) as raised:
        run_check(cluster, resolve_run(spec), tmp_path)  # type: ignore[arg-type]
    return raised.value


def _check(tmp_path, stop: BaseException) -> dict[str, Any]:
    _run(tmp_path, stop)
    record: dict[str, Any] = json.loads((tmp_path / "stopped" / "check.json").read_text())
    return record


@pytest.fixture
def sigterm(monkeypatch):
    monkeypatch.setattr(errors, "_stop_signal", [])
    stopped_by(signal.SIGTERM)


def test_a_check_stopped_by_sigterm_records_the_signal_each_node_and_no_verdict(tmp_path, sigterm):
    record = _check(tmp_path, LaunchInterrupted(RESULTS))
    assert record["schema"] == "dtrun.check-report/1"
    assert (record["status"], record["signal"], record["error"]) == (
        "interrupted", "SIGTERM", "stopped by SIGTERM",
    )  # fmt: skip
    assert [(n["node"], n["exit_code"]) for n in record["launch"]] == [
        ("node-0", None), ("node-1", -15),
    ]  # fmt: skip
    assert record["source"].startswith("embedded") and record["wall_s"] >= 0
    assert not {"nodes", "links", "groups"} & record.keys()  # no verdict of an unfinished check


def test_a_check_past_its_timeout_records_timeout_with_no_verdict(tmp_path):
    error = RunTimeoutError("the check ran past its timeout of 60 s")
    error.node_results = RESULTS
    record = _check(tmp_path, error)
    assert record["status"] == "timeout"
    assert record["error"].startswith("the check ran past its timeout of 60 s")
    assert len(record["launch"]) == 2 and "nodes" not in record


def test_a_node_that_fails_every_launch_is_named_as_the_failed_node(tmp_path):
    args = ("node-1", "127.0.0.1", 1, "/r/check/node-1.log", "boom")
    first = NodeFailedError(*args).message  # as the first launch said it
    record = _check(tmp_path, NodeFailedError(*args))  # retried without node-1; named again
    assert (record["status"], record["failed_node"]) == ("failed", "node-1")
    assert "node-1 (127.0.0.1) failed with exit code 1" in record["error"]
    assert record["unreachable"] == {"node-1": f"its launch failed: {first}"}


def test_a_secret_in_a_stop_s_message_is_masked_in_the_record(tmp_path):
    record = _check(tmp_path, RunError("node said HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456"))
    assert record["status"] == "failed"
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in json.dumps(record)


def test_a_stop_raised_as_run_interrupted_error_is_interrupted_not_failed(tmp_path, sigterm):
    record = _check(tmp_path, RunInterruptedError("stopped by SIGTERM"))
    assert (record["status"], record["signal"]) == ("interrupted", "SIGTERM")


def test_a_stop_on_a_full_disk_keeps_the_stop_s_own_error(tmp_path, monkeypatch):
    """check.json cannot be written: the timeout is still what is raised (exit code kept)."""
    from dtrun.errors import RunDirWriteError
    from dtrun.record.rundir import RunDir

    def full(self, path, data):
        raise RunDirWriteError(f"the disk holding {path} is full")

    monkeypatch.setattr(RunDir, "write_json", full)
    _run(tmp_path, RunTimeoutError("the launch did not finish within 60 s"))  # raises it again


@pytest.mark.parametrize(
    ("result", "says"),
    [(None, "rank 0 of the check writes it"), ('{"schema": "no"}', "result.json is damaged")],
)
def test_a_launch_that_ends_without_a_readable_result_is_recorded_failed(tmp_path, result, says):
    cluster = SimpleNamespace(
        inventory=embedded_inventory(2), executor=_Executor(None, result), ready=lambda p: None
    )
    spec = RunSpec(
        "stopped", procs_per_node=1, nodes=2, rdzv_port=29400,
        program=Program(ProgramKind.MODULE, "dtrun.workloads.check"), timeout_s=60.0,
    )  # fmt: skip
    with pytest.raises(RunError, match="ended without a result to judge"):  # exit 1: a failure
        run_check(cluster, resolve_run(spec), tmp_path)  # type: ignore[arg-type]
    record = json.loads((tmp_path / "stopped" / "check.json").read_text())
    assert record["status"] == "failed" and says in record["error"]
    assert "nodes" not in record and len(record["launch"]) == 2  # each node's exit, no verdict


class _LosesNode1:
    """node-1's connection drops in the first launch; the next launch, without it, times out."""

    def __init__(self) -> None:
        self.launched: list[list[str]] = []

    def command(self, commands):
        return {name: SimpleNamespace(error=None, exit_code=0) for name in commands}

    def run(self, plan, workdir, *, timeout_s, on_line):
        self.launched.append([launch.node.name for launch in plan.launches])
        if len(self.launched) == 1:
            lost = SshError("lost the SSH connection to node-1 (127.0.0.3)", why="reset")
            lost.lost_node = "node-1"
            raise lost
        raise RunTimeoutError("the check ran past its timeout of 60 s")


def test_a_node_lost_mid_check_is_named_and_the_check_goes_on_without_it(tmp_path):
    executor = _LosesNode1()
    raised = _run_on(tmp_path, executor, RunTimeoutError)
    assert executor.launched == [["node-0", "node-1"], ["node-0"]]
    record = json.loads((tmp_path / "stopped" / "check.json").read_text())
    label = next(iter(record["unreachable"]))
    # the retry's failure says what it ran without (a Slurm job ended with its lost first node
    # said only "Expired or invalid job")
    assert isinstance(raised, RunTimeoutError)
    assert raised.why.endswith(
        f"this launch ran without {label}, lost during the check: lost the SSH connection to "
        "node-1 (127.0.0.3): reset"
    )
    assert record["unreachable"][label].startswith(
        "lost during the check: lost the SSH connection to node-1 (127.0.0.3): reset"
    )


def test_a_check_that_ends_on_a_lost_node_names_it_as_the_failed_node():
    lost = SshError("lost the SSH connection to node-1 (127.0.0.3)", why="reset")
    lost.lost_node = "node-1"
    record = stopped_record(lost, 1.0, {}, {"node-1": "127.0.0.3"}, "hosts")
    assert (record["status"], record["failed_node"]) == ("failed", "127.0.0.3")


class _LosesTheJob(_LosesNode1):
    """node-0 lost, and the job that held every node with it (Slurm's batch host)."""

    def run(self, plan, workdir, *, timeout_s, on_line):
        self.launched.append([launch.node.name for launch in plan.launches])
        lost = RunError("Slurm lost node node-0 (node failure)", why="Slurm job 1 ended with it")
        lost.lost_node, lost.others_held = "node-0", False
        raise lost


def test_a_lost_node_that_took_the_others_with_it_ends_the_check_without_a_retry(tmp_path):
    """A retry without node-0 had nothing to run in: it failed "Expired or invalid job"."""
    executor = _LosesTheJob()
    assert "Slurm lost node node-0" in str(_run_on(tmp_path, executor, RunError))
    assert executor.launched == [["node-0", "node-1"]]
    record = json.loads((tmp_path / "stopped" / "check.json").read_text())
    assert (record["status"], record["failed_node"]) == ("failed", "node-0")
    assert record["unreachable"] == {}


class _ResultUnwritten(_LosesNode1):
    """Rank 0 on node-0 could not write result.json (a full disk): the workload said so in
    node-0's log (write_result's line, then its traceback) and exited 1, and the executor
    raised that node's failure, as the embedded executor does."""

    def run(self, plan, workdir, *, timeout_s, on_line):
        self.launched.append([launch.node.name for launch in plan.launches])
        log, said = workdir / "node-0.log", "OSError: [Errno 28] No space left on device"
        log.write_text(f"{UNWRITTEN} {errno.ENOSPC} {workdir / 'result.json'}\n[rank0]: {said}\n")
        failed = NodeFailedError("node-0", "127.0.0.2", 1, str(log), said)
        failed.node_results = (NodeResult("node-0", "127.0.0.2", 1, str(log), 1.0),)
        raise failed


def test_a_result_a_full_disk_refused_stops_the_check_as_a_full_disk_not_node_0(tmp_path):
    """Before, node-0 was put out of the check as failed and the check ran again without it."""
    executor = _ResultUnwritten()
    raised = _run_on(tmp_path, executor, DtrunError)
    assert executor.launched == [["node-0", "node-1"]]  # no retry without node-0
    assert isinstance(raised, DiskFullError) and raised.exit_code == 1
    run = tmp_path / "stopped"
    assert f"the disk holding {run} is full" in raised.message
    assert "check/result.json could not be written" in raised.message
    record = json.loads((run / "check.json").read_text())  # what the disk could still take
    assert (record["status"], record["error"]) == ("failed", raised.message)
    assert "failed_node" not in record and record["unreachable"] == {}
    assert [(n["node"], n["exit_code"]) for n in record["launch"]] == [("node-0", 1)]


def test_a_node_log_a_full_disk_cut_keeps_each_node_s_end_in_the_record(tmp_path, monkeypatch):
    """The launch a cut node log stopped (LogCut): the disk is the error, and check.json keeps
    how each node ended, as runs.json does for a sweep's launch. Before, "launch" was empty."""
    log = tmp_path / "stopped" / "check" / "node-1.log"
    monkeypatch.setitem(CUT_LOGS, str(log), "No space left on device")  # as NodeLog has it
    cut = OSError(errno.ENOSPC, "No space left on device", str(log))
    raised = _run_on(tmp_path, _Executor(LogCut(cut, RESULTS)), DiskFullError)
    assert isinstance(raised, DiskFullError)
    assert "check/node-1.log could not be written, so the launch was stopped" in raised.message
    record = json.loads((tmp_path / "stopped" / "check.json").read_text())
    assert (record["status"], record["error"]) == ("failed", raised.message)
    assert [(n["node"], n["exit_code"]) for n in record["launch"]] == [
        ("node-0", None), ("node-1", -15),
    ]  # fmt: skip


class _Hangs(_LosesNode1):
    """node-1's check stops making progress after its start (its process SIGSTOPped, its sshd
    and torchrun alive): node-0 says, every 5 s up to ``waited_to`` s, that it waits on the
    others, as the workload's Watch does; at 60 s the launch times out with both running."""

    def __init__(self, clock: list[float], waited_to: float) -> None:
        super().__init__()
        self.clock, self.waited_to = clock, waited_to

    def run(self, plan, workdir, *, timeout_s, on_line):
        self.launched.append([launch.node.name for launch in plan.launches])
        on_line("node-0", "dtrun: rank 0 of 2 started")
        on_line("node-1", "dtrun: rank 1 of 2 started")
        on_line("node-0", "dtrun: checking 2 nodes (2 processes)")
        for second in range(10, int(self.waited_to) + 1, 5):
            self.clock[0] = float(second)
            on_line("node-0", f"dtrun: rank 0 has waited {second - 5} s for the others at "
                    "pair round 1's all-reduces, cycle 2")  # fmt: skip
        self.clock[0] = 60.0
        error = RunTimeoutError(
            "the launch on 2 nodes did not finish within 60 s",
            why="still running when stopped: node-0, node-1",
            fix="raise --timeout, or read the node logs for where it hung",
        )
        error.node_results = RESULTS
        raise error


def _hang(tmp_path, monkeypatch, waited_to: float) -> tuple[RunTimeoutError, dict[str, Any]]:
    clock = [0.0]
    monkeypatch.setattr(
        "dtrun.check.stopped.time", SimpleNamespace(monotonic=lambda: clock[0]), raising=False
    )
    raised = _run_on(tmp_path, _Hangs(clock, waited_to), RunTimeoutError)
    assert isinstance(raised, RunTimeoutError)
    return raised, json.loads((tmp_path / "stopped" / "check.json").read_text())


def test_a_check_that_times_out_names_the_node_that_stopped_making_progress(tmp_path, monkeypatch):
    """Before, the error said only "still running when stopped: node-0, node-1", though the
    point of a check is the node that holds the rest back."""
    raised, record = _hang(tmp_path, monkeypatch, waited_to=55)
    assert raised.why == (
        "still running when stopped: node-0, node-1; node-1 said nothing for 55 s while the "
        "others waited at pair round 1's all-reduces, cycle 2: stopped making progress (a "
        "process stopped or stuck, a host frozen)"
    )
    assert raised.fix.startswith("read /r/check/node-1.log for where it stopped")
    assert (record["status"], record["hung_nodes"]) == ("timeout", ["node-1"])
    assert "node-1 said nothing for 55 s" in record["error"]


def test_a_check_that_times_out_with_no_rank_waiting_near_its_end_names_no_node(
    tmp_path, monkeypatch
):
    """node-0 last waited at 20 s, 40 s before the deadline: every rank was busy or silent
    then (a check too long for its --timeout), so no silence tells a hung node apart."""
    raised, record = _hang(tmp_path, monkeypatch, waited_to=20)
    assert raised.why == "still running when stopped: node-0, node-1"
    assert record["status"] == "timeout" and "hung_nodes" not in record


def test_a_node_one_of_whose_ranks_stopped_is_named_though_its_others_wait():
    """node-1's rank 3 stopped; its rank 2, like node-0's ranks, waits on it and says so."""
    from dtrun.check.stopped import Progress

    clock = [0.0]
    progress = Progress(lambda node, line: None, clock=lambda: clock[0])
    for rank in range(4):
        progress(f"node-{rank // 2}", f"dtrun: rank {rank} of 4 started")
    clock[0] = 50.0
    for rank in (0, 1, 2):
        said = f"dtrun: rank {rank} has waited 45 s for the others at the groups' set-up"
        progress(f"node-{rank // 2}", said)
    assert progress.hung(timeout_s=60) == (
        [("node-1", 50.0, "said nothing")],
        "the groups' set-up",
    )


def _heard(progress, clock, at, node, line):
    clock[0] = at
    progress(node, line)


def test_a_rank_that_stops_right_after_start_is_named_at_a_timeout_30_s_past_it():
    """Every rank started at 10 s; rank 1 stopped at once. At a 40 s --timeout it had been
    silent 30 s: before, a rank was named only once silent more than 30 s (the waiting ranks
    alone spoke, a working one was as silent as a hung one), so a --timeout had to pass
    start-up plus about 35 s. Now every rank speaks every 5 s, and 15 s of silence tells."""
    from dtrun.check.stopped import Progress

    clock = [0.0]
    progress = Progress(lambda node, line: None, clock=lambda: clock[0])
    for rank in range(3):
        _heard(progress, clock, 10.0, f"node-{rank}", f"dtrun: rank {rank} of 3 started")
    for at in (15.0, 20.0, 25.0, 30.0, 35.0, 40.0):
        for rank in (0, 2):
            _heard(progress, clock, at, f"node-{rank}",
                   f"dtrun: rank {rank} has waited {at - 15:.0f} s for the others at the "
                   "groups' set-up")  # fmt: skip
    assert progress.hung(timeout_s=40) == (
        [("node-1", 30.0, "said nothing")],
        "the groups' set-up",
    )


def test_a_rank_at_work_that_says_so_is_not_named_until_it_works_past_any_step():
    """One node at a time on CPUs: the others wait while rank 1 computes, as while it hangs.
    Saying it works, it is not named; working 30 s and more without waiting, it is stuck."""
    from dtrun.check.stopped import Progress

    clock = [0.0]
    progress = Progress(lambda node, line: None, clock=lambda: clock[0])
    for rank in range(2):
        _heard(progress, clock, 0.0, f"node-{rank}", f"dtrun: rank {rank} of 2 started")
    for at in range(5, 41, 5):
        _heard(progress, clock, at, "node-1", f"dtrun: rank 1 has worked {at} s since it last "
               "waited")  # fmt: skip
        _heard(progress, clock, at, "node-0",
               f"dtrun: rank 0 has waited {at} s for the others at the barrier before node-1's "
               "compute, cycle 1")  # fmt: skip
        if at == 25:
            assert progress.hung(timeout_s=25) == ([], "the barrier before node-1's compute, "
                                                       "cycle 1")  # fmt: skip
    assert progress.hung(timeout_s=40) == (
        [("node-1", 40.0, "worked without waiting on the others")],
        "the barrier before node-1's compute, cycle 1",
    )


def test_the_workload_s_lines_while_it_waits_on_the_others_are_heard(monkeypatch, capsys):
    """The contract between the workload's Watch and Progress: a rank's start, and every
    HEARTBEAT_S its wait on the others or its own work."""
    from dtrun.check.stopped import Progress
    from dtrun.workloads import check

    monkeypatch.setattr(check, "HEARTBEAT_S", 0.01)
    watch = check.Watch(rank=3, world=4)
    heard: list[str] = []
    progress = Progress(lambda node, line: heard.append(line))

    def hear(until: str) -> None:
        said = ""
        for _ in range(1000):  # 10 s at most: a Watch that never says it fails, not hangs
            said += capsys.readouterr().out
            if until in said:
                break
            watch.done.wait(0.01)
        assert until in said, said
        for line in said.splitlines():
            progress("node-1", line)

    try:
        hear("has worked")
        assert set(progress.working) == {3}  # at work since it started
        with watch.at("pair round 2's all-reduces, cycle 1"):
            hear("has waited")
    finally:
        watch.done.set()
    assert heard[0] == "dtrun: rank 3 of 4 started"
    assert any(line.startswith("dtrun: rank 3 has worked ") for line in heard)
    assert set(progress.heard) == {3} and progress.waited is not None
    assert progress.waited[1] == "pair round 2's all-reduces, cycle 1"
