"""Writes into a run directory: whole or not at all, never through a link, never outside it, and
a failure (a full or read-only disk, the directory removed) explained without a traceback."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from dtrun.errors import DiskFullError, NodeFailedError, RunDirWriteError
from dtrun.record.rundir import RunDir
from dtrun.record.writefail import (
    first_cause,
    unwritten,
    unwritten_here,
    with_cut_logs,
    write_error,
)
from dtrun.spec.cluster import Inventory
from dtrun.spec.outcome import NodeResult
from dtrun.spec.request import BenchSpec
from dtrun.workloads.files import UNWRITTEN, NodeLog, folder_identity, write_atomic
from dtrun.workloads.result import write_result
from tests.conftest import fill, run_dtrun
from tests.factories import fake_run_dir


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_write_replaces_the_file_whole_with_the_mode_asked(tmp_path: Path):
    target = tmp_path / "runs.json"
    target.write_text("old\n")
    write_atomic(target, b"new\n", 0o700)
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o700
    assert names(tmp_path) == ["runs.json"]  # no temporary file left


def test_a_link_at_the_target_is_refused_and_what_it_points_to_is_untouched(tmp_path: Path):
    precious = tmp_path / "precious"
    precious.write_text("mine\n")
    link = tmp_path / "report.md"
    link.symlink_to(precious)
    with pytest.raises(OSError, match="symbolic link") as raised:
        write_atomic(link, b"report\n")
    assert raised.value.errno == errno.ELOOP
    assert precious.read_text() == "mine\n"
    assert link.is_symlink()
    assert names(tmp_path) == ["precious", "report.md"]


def test_a_workloads_result_is_written_the_same_way(tmp_path: Path):
    """result.json on the nodes (Python 3.10, standard library only) refuses a link too."""
    (tmp_path / "elsewhere").write_text("x")
    (tmp_path / "result.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link"):
        write_result(tmp_path / "result.json", {"schema": "dtrun.train/1"})
    assert (tmp_path / "elsewhere").read_text() == "x"
    write_result(tmp_path / "fresh.json", {"a": 1})
    assert json.loads((tmp_path / "fresh.json").read_text()) == {"a": 1}


def test_a_directory_link_leaving_the_run_directory_is_refused(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "n1").symlink_to(outside)
    with pytest.raises(RunDirWriteError, match="symbolic link") as raised:
        RunDir(run).write(run / "n1" / "node-0.sh", "echo\n")
    assert "next: remove the link" in raised.value.message
    with pytest.raises(RunDirWriteError, match="symbolic link"):
        RunDir(run).makedirs(run / "n1" / "r0")
    assert list(outside.iterdir()) == []


def test_a_link_staying_inside_the_run_directory_is_followed(tmp_path: Path):
    (tmp_path / "plan").mkdir()
    (tmp_path / "latest").symlink_to(tmp_path / "plan")
    RunDir(tmp_path).write(tmp_path / "latest" / "x.sh", "echo\n")
    assert (tmp_path / "plan" / "x.sh").read_text() == "echo\n"


def failing_write(monkeypatch: pytest.MonkeyPatch, code: int, after: int = 0) -> None:
    """os.write fails with ``code`` once ``after`` bytes went through (as a disk fills up)."""
    real = os.write
    written = [0]

    def write(fd: int, data: bytes | memoryview) -> int:
        room = after - written[0]
        if room <= 0:
            raise OSError(code, os.strerror(code))
        done = real(fd, bytes(data[:room]))
        written[0] += done
        return done

    monkeypatch.setattr(os, "write", write)


def test_a_full_disk_keeps_the_old_file_leaves_no_partial_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    run_dir.write_json(run_dir.manifest, {"run_id": "run"})  # a sweep's: `dtrun report` reads it
    run_dir.write_json(run_dir.runs, {"runs": [1]})
    failing_write(monkeypatch, errno.ENOSPC, after=5)
    with pytest.raises(DiskFullError) as raised:
        run_dir.write_json(run_dir.runs, {"runs": [1, 2, 3]})
    message = raised.value.message
    assert message.startswith(f"the disk holding {run_dir.path} is full (")
    assert " bytes free)" in message
    assert f"results so far are kept in {run_dir.path}" in message
    assert f"next: free space and run `dtrun report {run_dir.path}`" in message
    assert raised.value.exit_code == 1
    assert json.loads(run_dir.runs.read_text()) == {"runs": [1]}  # no record claims more
    assert names(run_dir.path) == ["manifest.json", "runs.json"]


def test_a_full_disk_under_dtrun_run_says_to_run_it_again_not_to_build_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # `dtrun report` refuses a `dtrun run` directory (its record is run.json, no manifest)
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    run_dir.write_json(run_dir.path / "run.json", {"status": "running"})
    failing_write(monkeypatch, errno.ENOSPC, after=5)
    with pytest.raises(DiskFullError) as raised:
        run_dir.write_json(run_dir.path / "run.json", {"status": "ok"})
    message = raised.value.message
    assert message.startswith(f"the disk holding {run_dir.path} is full (")
    assert "dtrun report" not in message
    assert message.endswith("next: free space and run the command again")


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (errno.EROFS, "is on a read-only file system"),
        (errno.EDQUOT, "is full"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_each_write_failure_says_what_it_is(
    code: int, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    failing_write(monkeypatch, code)
    with pytest.raises(RunDirWriteError, match=says):
        RunDir(tmp_path).write(tmp_path / "report.md", "# report\n")
    assert names(tmp_path) == []


def test_a_run_directory_removed_while_writing_is_named(tmp_path: Path):
    run_dir = RunDir(tmp_path / "run")
    with pytest.raises(RunDirWriteError, match="was removed while dtrun was writing to it"):
        run_dir.write_json(run_dir.runs, {})


def test_a_run_directory_caught_midway_through_its_removal_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # `rm -rf` has removed dtrun's temporary file, not yet the folder: the rename finds no file
    def emptied(path: Path) -> None:
        for partial in path.parent.glob(".*.partial"):
            partial.unlink()

    monkeypatch.setattr("dtrun.workloads.files.refuse_link", emptied)
    run_dir = RunDir(tmp_path / "run")
    (tmp_path / "run").mkdir()
    with pytest.raises(RunDirWriteError, match=r"the run directory .* was removed while dtrun"):
        run_dir.write_json(run_dir.path / "manifest.json", {})


def test_a_bug_keeps_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    failing_write(monkeypatch, errno.EBADF)
    with pytest.raises(OSError) as raised:
        RunDir(tmp_path).write(tmp_path / "x", "x")
    assert not isinstance(raised.value, RunDirWriteError)


def test_report_on_a_full_disk_exits_1_leaving_every_file_whole(
    small_disk: Callable[[int], Path], fixed_inventory: Inventory
):
    disk = small_disk(400)
    run = disk / "a"
    fake_run_dir(run, BenchSpec(run_id="a", node_counts=(1, 2)), fixed_inventory,
                 {1: [1000.0], 2: [1800.0]})  # fmt: skip
    before = {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()}
    fill(disk)
    done = run_dtrun("report", str(run), cwd=disk.parent, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: the disk holding {run} is full (" in done.stderr
    assert f"next: free space and run `dtrun report {run}`" in done.stderr
    for path in run.rglob("*"):
        assert ".partial" not in path.name
        if path.is_file():  # each file as it was, or new and whole
            assert path.stat().st_size > 0, path
    for name, content in before.items():
        assert (run / name).read_bytes() == content
    (disk / "filler").unlink()
    again = run_dtrun("report", str(run), cwd=disk.parent, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (run / "report.html").stat().st_size > 0


def test_a_node_log_on_a_full_disk_stops_writing_and_lets_the_output_flow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The thread copying a node's output keeps reading: a node blocked on its pipe would
    hang the launch until --timeout."""
    with NodeLog(tmp_path / "node-0.log") as log:
        log.write(b"first\n")
        failing_write(monkeypatch, errno.ENOSPC)
        log.write(b"second\n")  # no error: remembered
        log.write(b"third\n")
        monkeypatch.undo()
        log.write(b"fourth\n")  # not written after a failure: the log ends where it broke
    assert log.error is not None
    assert log.error.errno == errno.ENOSPC
    assert (tmp_path / "node-0.log").read_bytes() == b"first\n"


def test_a_node_log_a_full_disk_cut_short_is_said_in_the_record_and_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The log stops where the disk filled; the launch's record and the full disk's message
    say which log, not "each file whole"."""
    path = tmp_path / "n1" / "r0" / "node-0.log"
    path.parent.mkdir(parents=True)
    with NodeLog(path) as log:
        log.write(b"first\n")
        failing_write(monkeypatch, errno.ENOSPC)
        log.write(b"second\n")
    monkeypatch.undo()
    node = NodeResult("node-0", "127.0.0.2", 0, str(path), 1.0)
    whole = NodeResult("node-1", "127.0.0.3", 0, str(tmp_path / "n1" / "r0" / "node-1.log"), 1.0)
    cut, kept = with_cut_logs([node, whole])
    assert cut.log_cut == "No space left on device: its later lines reached only the console"
    assert kept.log_cut is None
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "runs.json"))
    said = write_error(full, tmp_path)
    assert said is not None and "the node log n1/r0/node-0.log stops where the disk filled" in (
        str(said.why)
    )
    NodeLog(path).close()  # the launch run again (--resume): a new log, whole so far
    assert with_cut_logs([node])[0].log_cut is None


def test_a_node_log_a_full_disk_cut_is_the_error_that_stopped_its_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The executor hears the log's error once, naming the log, and stops the launch; the
    full disk's message says so, and calls the log cut rather than dropped."""
    path = tmp_path / "n2" / "r0" / "node-0.log"
    path.parent.mkdir(parents=True)
    heard: list[OSError] = []
    with NodeLog(path, on_error=heard.append) as log:
        log.write(b"first\n")
        failing_write(monkeypatch, errno.ENOSPC)
        log.write(b"second\n")
        log.write(b"third\n")
    monkeypatch.undo()
    assert heard == [log.error]
    assert (heard[0].errno, heard[0].filename) == (errno.ENOSPC, str(path))
    said = write_error(heard[0], tmp_path)
    assert isinstance(said, DiskFullError)
    assert "n2/r0/node-0.log could not be written, so the launch was stopped;" in said.message
    assert "dropped" not in said.message
    assert "the node log n2/r0/node-0.log stops where the disk filled" in said.message


def test_a_node_log_is_not_opened_through_a_link(tmp_path: Path):
    (tmp_path / "elsewhere").write_text("x")
    (tmp_path / "node-0.log").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link"):
        NodeLog(tmp_path / "node-0.log")
    assert (tmp_path / "elsewhere").read_text() == "x"


@pytest.mark.parametrize("reader", [False, True])
def test_a_node_log_at_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path, reader: bool):
    """A FIFO left at a launch's log name (`--resume` of a shared run directory): opening it
    to write waited for a reader forever, and SIGTERM did not end the wait. In a child, so a
    wait fails the test instead of hanging it."""
    os.mkfifo(tmp_path / "node-0.log")
    held = os.open(tmp_path / "node-0.log", os.O_RDONLY | os.O_NONBLOCK) if reader else None
    child = "from pathlib import Path; from dtrun.workloads.files import NodeLog; import sys\n"
    child += "try: NodeLog(Path(sys.argv[1]))\nexcept OSError as exc: print('refused', exc)"
    try:
        done = subprocess.run(
            [sys.executable, "-c", child, str(tmp_path / "node-0.log")],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        if held is not None:
            os.close(held)
    assert done.stdout.startswith("refused"), done.stdout + done.stderr


def test_report_on_a_read_only_disk_says_so_not_permission_denied(
    small_disk: Callable[[int], Path], fixed_inventory: Inventory
):
    disk = small_disk(400)
    run = disk / "a"
    fake_run_dir(run, BenchSpec(run_id="a", node_counts=(1,)), fixed_inventory, {1: [1000.0]})
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    done = run_dtrun("report", str(run), cwd=disk.parent, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "it is on a read-only file system" in done.stderr
    assert "permission denied" not in done.stderr
    bench = run_dtrun("bench", "--nodes", "1", "-o", str(disk), cwd=disk.parent, timeout=120)
    assert bench.returncode == 2, bench.stderr
    assert f"cannot write the run directory {disk}/" in bench.stderr
    assert "Read-only file system" in bench.stderr


def test_a_file_is_on_disk_before_it_takes_its_name(tmp_path, monkeypatch):
    from dtrun.workloads import files

    order: list[str] = []
    real_fsync, real_replace = os.fsync, Path.replace

    def fsync(fd: int) -> None:
        order.append("fsync")
        real_fsync(fd)

    def replace(self: Path, to: Path) -> Path:
        order.append("rename")
        return real_replace(self, to)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(Path, "replace", replace)
    files.write_atomic(tmp_path / "runs.json", b"{}\n")
    assert order == ["fsync", "rename"]
    assert (tmp_path / "runs.json").read_bytes() == b"{}\n"


def test_a_link_met_by_an_executors_write_is_named_in_the_message(tmp_path: Path):
    """An executor's write fails with the OSError alone (the sweep explains it with the run
    directory): the message named the run directory as the link, not the file that is one."""
    from dtrun.record.writefail import write_error

    (tmp_path / "n2" / "r1").mkdir(parents=True)
    script = tmp_path / "n2" / "r1" / "node-0.sh"
    script.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError) as raised:
        write_atomic(script, b"echo\n")
    explained = write_error(raised.value, tmp_path)
    assert explained is not None
    assert explained.message.startswith(f"n2/r1/node-0.sh in {tmp_path} is a symbolic link")


def test_an_embedded_launch_a_cut_log_stopped_raises_it_with_how_every_node_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Node 0's log on a disk with no room (/dev/full), both nodes printing on: the embedded
    executor stops them and raises the log's OSError with each node's end (LogCut), for the
    launch's record. Before, the bare OSError left the record with no node."""
    import dtrun.engines.embedded.executor as embedded
    from dtrun.execute import LogCut
    from dtrun.spec.cluster import Node
    from dtrun.spec.launchplan import LaunchPlan, NodeLaunch

    class FullLog(NodeLog):
        def __init__(self, path: Path, **options: object) -> None:
            super().__init__(path, **options)  # type: ignore[arg-type]
            if path.name == "node-0.log":
                full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
                assert self._fd is not None
                os.dup2(full, self._fd)
                os.close(full)

    monkeypatch.setattr(embedded, "NodeLog", FullLog)
    spew = "while :; do echo xxxxxxxxxxxxxxxx; sleep 0.01; done\n"
    launches = tuple(
        NodeLaunch(Node(f"node-{i}", "127.0.0.1"), i, f"node-{i}.sh", spew) for i in range(2)
    )
    plan = LaunchPlan("torchrun", "train", 2, 1, 2, 8, "r", "h", 1, launches)
    with pytest.raises(OSError) as raised:
        embedded.LocalExecutor(grace_s=1.0).run(
            plan, tmp_path, timeout_s=120, on_line=lambda *_: None
        )
    assert (raised.value.errno, raised.value.filename) == (
        errno.ENOSPC,
        str(tmp_path / "node-0.log"),
    )
    assert isinstance(raised.value, LogCut)
    assert [(r.node, r.exit_code) for r in raised.value.node_results] == [
        ("node-0", None),
        ("node-1", None),
    ]


OTHER_BOOT = "7e1f0c1e-0000-4000-8000-000000000001"  # another machine's kernel


@pytest.mark.parametrize(
    ("disk", "seen_from_node"),
    [
        ("here", None),  # the node is this machine: the folder as it is
        ("the node's", None),  # staged elsewhere (SSH without shared storage)
        # at the run directory's path: another machine's folder (its inode another), or a
        # tmpfs of the node's own under this kernel (a mount namespace: another device)
        ("the node's", lambda boot, dev, ino: f"{OTHER_BOOT}:{dev}:{int(ino) + 1}"),
        ("the node's", lambda boot, dev, ino: f"{boot}:{int(dev) + 1}:{ino}"),
        # shared storage another machine mounts there too (NFS): its own device number
        ("here", lambda boot, dev, ino: f"{OTHER_BOOT}:{int(dev) + 7}:{ino}"),
    ],
    ids=["here", "elsewhere", "other machine", "own mount", "shared storage"],
)
def test_a_result_a_nodes_full_disk_refused_is_said_as_that_disk_not_the_node(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    disk: str,
    seen_from_node: Callable[[str, str, str], str] | None,
):
    """The workload says, in its node's log, which result.json the disk refused, and which
    folder that is (files.folder_identity); dtrun reads it there: the run directory's disk as
    write_error says it, or a node's own with the node named. Before, the node failed: "exit
    code 1". A node's own disk whose launch directory has the run directory's path (an SSH
    node whose workdir is the folder dtrun runs in) is the node's too; before, this machine's
    disk was said full, with this machine's free space."""
    run = tmp_path / "run"
    here = run / "health" / "node-0"  # the launch's folder here, and staged on its node
    where = tmp_path / "node-disk" / "runs" / "run" / "health" / "node-0"
    where = where if disk == "the node's" and seen_from_node is None else here
    for folder in {here, where}:
        folder.mkdir(parents=True, exist_ok=True)
    failing_write(monkeypatch, errno.ENOSPC)
    if seen_from_node is not None:
        boot, dev, ino = folder_identity(here).split(":")
        node_s = seen_from_node(boot, dev, ino)
        monkeypatch.setattr("dtrun.workloads.result.folder_identity", lambda _: node_s)
    with pytest.raises(OSError, match="No space left on device"):  # the node's traceback
        write_result(where / "result.json", {"schema": "dtrun.allreduce/1"})
    monkeypatch.undo()
    log = here / "node-0.log"
    log.write_text("".join(f"[rank0]: {line}\n" for line in capsys.readouterr().err.splitlines()))
    failed = NodeFailedError("node-0", "10.0.0.4", 1, str(log), "OSError: [Errno 28]")
    failed.node_results = (NodeResult("node-0", "10.0.0.4", 1, str(log), 1.0),)
    said = unwritten(failed, run)
    assert isinstance(said, DiskFullError) and said.exit_code == 1
    if disk == "here":
        assert said.message.startswith(f"the disk holding {run} is full (")
        assert "health/node-0/result.json could not be written" in said.message
    else:
        assert said.message.startswith(f"the disk holding {where} on node-0 is full")
        assert "bytes free" not in said.message  # this machine's free space is no figure of its
        assert "next: free space on node-0 and run the command again" in str(said)
    assert (unwritten_here(failed, run) is None) is (disk != "here")


def test_a_node_that_failed_on_its_own_is_no_disk_s_failure(tmp_path: Path):
    log = tmp_path / "node-0.log"
    log.write_text("[rank0]: RuntimeError: boom\n")
    failed = NodeFailedError("node-0", "10.0.0.4", 1, str(log), "RuntimeError: boom")
    failed.node_results = (NodeResult("node-0", "10.0.0.4", 1, str(log), 1.0),)
    assert unwritten(failed, tmp_path) is None


@pytest.mark.parametrize("named", ["relative", "through a link"])
def test_a_run_directory_named_relative_or_through_a_link_is_still_the_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
):
    """`-o runs` (the default) names the run directory relative to here; a node says the
    absolute path it wrote to, a link resolved (its working directory)."""
    (tmp_path / "disk" / "g" / "check").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    if named == "through a link":
        (tmp_path / "runs").symlink_to(tmp_path / "disk")
    run = Path("runs/g") if named == "through a link" else Path("disk/g")
    log = run / "check" / "node-0.log"
    log.write_text(f"{UNWRITTEN} {errno.ENOSPC} {tmp_path / 'disk/g/check/result.json'}\n")
    failed = NodeFailedError("node-0", "127.0.0.2", 1, str(log), "OSError: [Errno 28]")
    failed.node_results = (NodeResult("node-0", "127.0.0.2", 1, str(log), 1.0),)
    said = unwritten(failed, run)
    assert isinstance(said, DiskFullError)
    assert said.message.startswith(f"the disk holding {run} is full (")
    assert "check/result.json could not be written" in said.message


def test_a_full_disk_line_of_an_older_run_a_program_printed_is_its_output(tmp_path: Path):
    """A program that prints an older run's node log (which holds that run's full-disk line),
    then fails on its own: the failure is the node's, not a full disk of the older run's."""
    log = tmp_path / "runs" / "new" / "n1" / "r0" / "node-0.log"
    log.parent.mkdir(parents=True)
    old = tmp_path / "runs" / "old" / "n1" / "r0" / "result.json"
    log.write_text(f"[rank0]: {UNWRITTEN} {errno.ENOSPC} {old}\n[rank0]: RuntimeError: boom\n")
    failed = NodeFailedError("node-0", "127.0.0.2", 1, str(log), "RuntimeError: boom")
    failed.node_results = (NodeResult("node-0", "127.0.0.2", 1, str(log), 1.0),)
    assert unwritten(failed, tmp_path / "runs" / "new") is None


@pytest.mark.parametrize("on_its_own_disk", [False, True])
def test_a_probe_result_a_full_disk_refused_is_said_as_that_disk_not_the_probe_failing(
    tmp_path: Path, fixed_inventory: Inventory, on_its_own_disk: bool
):
    """--probe after a user's program: the probe's all-reduce could not write its result.json
    (a full disk; its node said so in its log and exited 1). The run directory's disk stops
    the launch as its full disk, naming the probe's file, each node's end kept; a node's own
    disk is said in the program's result. Before: "the all-reduce probe after the program
    failed: node-0 failed with exit code 1", and the launch went on as if nothing was full."""
    from dtrun.execute import Executor
    from dtrun.plan.sweep import Launch
    from dtrun.spec.launchplan import RESULT_FILE, LaunchPlan
    from dtrun.spec.outcome import RunStatus
    from dtrun.spec.request import Program, ProgramKind
    from dtrun.sweep.programprobe import probe_program
    from dtrun.sweep.programresult import program_result
    from dtrun.sweep.runlaunch import always_ready, run_launch
    from tests.plans import sweep_plan

    program = Program(ProgramKind.SCRIPT, "/w/train.py")
    bench = BenchSpec("p", program=program, node_counts=(2,), warmup=2, repeat=1, probe=True)
    sweep = sweep_plan(fixed_inventory, bench)
    run_dir = RunDir(tmp_path / "p")
    launch = Launch(sweep.launches[0].plan, "n2/r0")
    workdir = run_dir.path / launch.workdir
    ended = tuple(
        NodeResult(node.name, node.address, 0, str(workdir / f"{node.name}.log"), 1.0)
        for node in launch.plan.nodes
    )
    staged = tmp_path / "node-disk" / "runs" if on_its_own_disk else tmp_path

    class Probed:
        """The program's launch ends well; the probe's node 0 cannot write its result."""

        def run(self, plan: LaunchPlan, where: Path, **_: object) -> tuple[NodeResult, ...]:
            where.mkdir(parents=True, exist_ok=True)
            if where.name != "probe":
                return ended
            log = where / "node-0.log"
            refused = staged / "p" / "n2" / "r0" / "probe" / RESULT_FILE
            log.write_text(f"[rank0]: {UNWRITTEN} {errno.ENOSPC} {refused}\n")
            failed = NodeFailedError("node-0", "127.0.0.2", 1, str(log), "OSError: [Errno 28]")
            failed.node_results = (NodeResult("node-0", "127.0.0.2", 1, str(log), 1.0),)
            raise failed

    executor = cast(Executor, Probed())

    def finish(plan: LaunchPlan, where: Path, wall_s: float) -> None:
        ranks = {  # each rank's step records, as the step hook leaves them
            rank: {
                "schema": "dtrun.steps/1", "rank": rank, "node": f"node-{rank}",
                "step_ends_s": [1.0, 2.0, 3.0, 4.0], "params": 1024,
                "gradient_bytes": {"float32": 4096}, "param_digest": "d", "sharded": None,
                "errors": [],
            }
            for rank in range(plan.world_size)
        }  # fmt: skip
        data = program_result(sweep.spec, plan, ranks, wall_s, None)
        (where / RESULT_FILE).write_text(json.dumps(data))
        probe_program(sweep, plan, where, executor, run_dir, lambda *_: None)

    outcome = run_launch(
        launch, run_dir.path, executor, timeout_s=60, on_line=lambda *_: None,
        ready=always_ready, finish=finish,
    )  # fmt: skip
    if on_its_own_disk:
        said = json.loads((workdir / RESULT_FILE).read_text())["probe_error"]
        assert said == (
            "the all-reduce probe's result could not be kept: the disk holding "
            f"{staged / 'p' / 'n2' / 'r0' / 'probe'} on node-0 is full"
        )
    else:
        assert isinstance(outcome.error, DiskFullError)
        assert outcome.error.message.startswith(f"the disk holding {run_dir.path} is full (")
        assert f"n2/r0/probe/{RESULT_FILE} could not be written" in outcome.error.message
        assert outcome.run.status is RunStatus.FAILED and outcome.run.node_results == ended


def test_a_write_a_full_disk_refused_under_a_launch_names_its_file_not_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A write of dtrun's own during a launch (a user program's result.json, made from its
    step records by write_atomic) that a full disk refuses: os.write's OSError names no file,
    so the launch's error said "the disk holding runs/x is full: runs/x could not be
    written". Now it names the file."""
    run = tmp_path / "run"
    (run / "n2" / "r0").mkdir(parents=True)
    failing_write(monkeypatch, errno.ENOSPC)
    with pytest.raises(OSError) as raised:
        write_atomic(run / "n2" / "r0" / "result.json", b"{}")
    monkeypatch.undo()
    said = write_error(raised.value, run)  # as run_launch explains a ``finish``'s OSError
    assert isinstance(said, DiskFullError)
    assert "n2/r0/result.json could not be written" in said.message
    assert names(run / "n2" / "r0") == []  # no partial left


def test_a_node_failure_gives_way_to_the_full_disk_that_refused_the_record():
    """A Spark node stopped by its cut log, whose word did not reach dtrun (TorchDistributor's
    log server down), failed its launch; then runs.json was refused. The disk is the error, as
    before first_cause (a fresh-clone e2e run said "spark-driver ... failed" with a traceback);
    a full disk's first refused file keeps its place."""
    node = NodeFailedError("spark-driver", "127.0.0.1", 1, "/r/n2/r0/spark-driver.log", "boom")
    disk = DiskFullError("the disk holding /r is full (0 bytes free): runs.json could not ...")
    assert first_cause(node, disk, "runs.json") is disk
    gate = DiskFullError("the disk holding /r is full: health/node-0/result.json could not ...")
    assert first_cause(gate, disk, "runs.json") is gate
    assert "runs.json could not take the entry either" in gate.why
