"""run.json of a `dtrun run` that ended without recording how (docs/launchers.md): its guard
rewrites "running" to "unrecorded", and nothing else. The SIGKILL itself:
tests/e2e/test_failure.py."""

from __future__ import annotations

import contextlib
import errno
import json

import pytest

from dtrun.check.stopped import unrecorded_record
from dtrun.engines.embedded.inventory import embedded_inventory
from dtrun.errors import DiskFullError, RunDirWriteError, RunInterruptedError, RunTimeoutError
from dtrun.execute import LogCut
from dtrun.execute.guard import drop_guard, start_guard
from dtrun.plan.resolve import resolve_run
from dtrun.record.ended import UNRECORDED_RUN, guard_command, mark_unrecorded, settle
from dtrun.record.rundir import RunDir
from dtrun.spec.outcome import NodeResult
from dtrun.spec.request import Program, ProgramKind, RunSpec
from dtrun.sweep.program import run_program


def _record(tmp_path, status):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema": "dtrun.run/1", "status": status, "error": None}))
    return path


def test_a_run_json_still_running_is_marked_unrecorded_with_why(tmp_path):
    path = _record(tmp_path, "running")
    assert mark_unrecorded(path)
    data = json.loads(path.read_text())
    assert (data["schema"], data["status"], data["error"]) == (
        "dtrun.run/1", "unrecorded", UNRECORDED_RUN,
    )  # fmt: skip
    assert "SIGKILL" in data["error"] and data["updated_at"]
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left


def test_a_run_json_that_recorded_its_end_is_left_as_it_is(tmp_path):
    for status in ("ok", "failed", "timeout", "interrupted"):
        path = _record(tmp_path, status)
        before = path.read_bytes()
        assert not mark_unrecorded(path)
        assert path.read_bytes() == before


def test_a_link_at_run_json_is_not_written_through(tmp_path):
    target = _record(tmp_path, "running").rename(tmp_path / "elsewhere.json")
    before = target.read_bytes()
    (tmp_path / "run.json").symlink_to(target)
    assert not mark_unrecorded(tmp_path / "run.json")
    assert target.read_bytes() == before and (tmp_path / "run.json").is_symlink()


def test_the_guard_marks_run_json_when_its_pipe_closes_and_not_when_dropped(tmp_path):
    """dtrun's end, however it ends, closes the guard's pipe: the guard's own interpreter
    (-I -S, no PYTHONPATH) finds the package and rewrites the record."""
    path = _record(tmp_path, "running")
    dropped = start_guard(guard_command(path))
    drop_guard(dropped)  # dtrun recorded the end itself
    assert json.loads(path.read_text())["status"] == "running"
    guard = start_guard(guard_command(path))
    assert guard.stdin is not None
    guard.stdin.close()  # as when dtrun's process is gone
    assert guard.wait(timeout=60) == 0
    assert json.loads(path.read_text())["status"] == "unrecorded"


def test_the_guard_marks_a_run_json_given_relative_to_where_dtrun_started(tmp_path, monkeypatch):
    """`--output runs` (the default) gives a relative run directory; the guard runs from /,
    so its record is named from where dtrun started, or a killed run says "running" for ever."""
    monkeypatch.chdir(tmp_path)
    path = _record(tmp_path, "running").relative_to(tmp_path)
    guard = start_guard(guard_command(path))
    assert guard.stdin is not None
    guard.stdin.close()  # as when dtrun's process is gone
    assert guard.wait(timeout=60) == 0
    assert json.loads((tmp_path / path).read_text())["status"] == "unrecorded"


def test_a_killed_check_s_guard_writes_check_json_only_where_none_is(tmp_path):
    path = tmp_path / "check.json"
    missing = json.dumps(unrecorded_record())
    assert settle(str(path), missing)
    data = json.loads(path.read_text())
    assert (data["schema"], data["status"]) == ("dtrun.check-report/1", "unrecorded")
    assert "nodes" not in data and "SIGKILL" in data["error"]
    path.write_text('{"status": "interrupted"}')  # dtrun recorded the stop itself
    assert not settle(str(path), missing)
    assert json.loads(path.read_text()) == {"status": "interrupted"}


class _Launched:
    """An executor whose every node exits 0 at once."""

    on_stopping = None

    def run(self, plan, workdir, *, timeout_s, on_line):
        return tuple(
            NodeResult(node.name, node.address, 0, str(workdir / f"{node.name}.log"), 0.1)
            for node in plan.nodes
        )


def _program_run(tmp_path, **hooks):
    spec = RunSpec(
        "stopped", procs_per_node=1, nodes=2, rdzv_port=29400,
        program=Program(ProgramKind.SCRIPT, "train.py"),
    )  # fmt: skip
    with pytest.raises(RunInterruptedError):
        run_program(resolve_run(spec), embedded_inventory(2), tmp_path, _Launched(), **hooks)  # type: ignore[arg-type]
    return json.loads((tmp_path / "stopped" / "run.json").read_text())


def test_a_ctrl_c_before_the_launch_starts_leaves_run_json_interrupted(tmp_path):
    def ctrl_c(run_dir, plan):
        raise KeyboardInterrupt

    record = _program_run(tmp_path, on_begin=ctrl_c)
    assert record["status"] == "interrupted"
    assert record["error"] == "interrupted by the user (Ctrl-C)"


def test_a_ctrl_c_as_the_guard_is_dropped_after_the_launch_is_recorded_as_interrupted(
    tmp_path, monkeypatch
):
    @contextlib.contextmanager
    def dropped_by_ctrl_c(command):
        yield
        raise KeyboardInterrupt

    monkeypatch.setattr("dtrun.sweep.program.guarded", dropped_by_ctrl_c)
    record = _program_run(tmp_path)
    assert record["status"] == "interrupted"  # the exit code says so too: not "ok"
    assert [node["exit_code"] for node in record["nodes"]] == [0, 0]


class _TimedOut(_Launched):
    def run(self, plan, workdir, *, timeout_s, on_line):
        raise RunTimeoutError("the program did not finish within 60 s")


def test_a_stop_whose_record_meets_a_full_disk_keeps_its_own_error(tmp_path, monkeypatch):
    written = RunDir.write_json

    def full_after_running(self, path, data):
        if data.get("status") != "running":
            raise RunDirWriteError(f"the disk holding {self.path} is full")
        written(self, path, data)

    monkeypatch.setattr(RunDir, "write_json", full_after_running)
    spec = RunSpec("full", procs_per_node=1, nodes=2, rdzv_port=29400,
                   program=Program(ProgramKind.SCRIPT, "train.py"))  # fmt: skip
    with pytest.raises(RunTimeoutError):  # the timeout's error and exit code, not the disk's
        run_program(resolve_run(spec), embedded_inventory(2), tmp_path, _TimedOut())  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["fifo", "sparse"])
def test_a_run_json_that_is_no_record_is_left_at_once_not_waited_on(tmp_path, kind):
    """The program runs inside the run directory and can put anything at run.json: a FIFO
    there left the guard waiting for a writer for ever after a SIGKILL (a process no stop
    ends), and a sparse 256 MiB file was read whole into its memory (a 2 GiB one: 4 GB)."""
    import os
    import stat
    import threading
    import tracemalloc

    path = tmp_path / "run.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with path.open("wb") as file:
            file.truncate(256 << 20)
    answer: list[bool] = []
    tracemalloc.start()
    try:
        guard = threading.Thread(target=lambda: answer.append(mark_unrecorded(path)), daemon=True)
        guard.start()
        guard.join(10)
        if guard.is_alive():  # let the read end: a writer opens and closes the FIFO
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer == [False]
    assert peak < 64 << 20  # no more than a record's most was read
    mode = path.lstat().st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else path.stat().st_size == 256 << 20


class _LogCut(_Launched):
    def run(self, plan, workdir, *, timeout_s, on_line):
        log = workdir / "node-0.log"  # the executor stopped every node: its log was cut
        stopped = tuple(
            NodeResult(node.name, node.address, None, str(workdir / f"{node.name}.log"), 0.1)
            for node in plan.nodes
        )
        raise LogCut(OSError(errno.ENOSPC, "No space left on device", str(log)), stopped)


def test_a_launch_stopped_by_a_full_disk_says_so_in_run_json_where_it_still_fits(tmp_path):
    spec = RunSpec("cut", procs_per_node=1, nodes=2, rdzv_port=29400,
                   program=Program(ProgramKind.SCRIPT, "train.py"))  # fmt: skip
    with pytest.raises(DiskFullError) as raised:
        run_program(resolve_run(spec), embedded_inventory(2), tmp_path, _LogCut())  # type: ignore[arg-type]
    assert "launch/node-0.log could not be written" in raised.value.message
    record = json.loads((tmp_path / "cut" / "run.json").read_text())
    assert record["status"] == "failed"  # not "running", read later as ended unrecorded
    assert record["error"] == raised.value.message
    # how each node ended: every one stopped for the cut log (before: no node recorded)
    assert [(n["node"], n["exit_code"]) for n in record["nodes"]] == [
        ("node-0", None),
        ("node-1", None),
    ]
