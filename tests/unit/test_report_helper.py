"""The report's helper process (runner/report/builder.py): where its work fails for a reason
dtrun explains (a full disk), that is the error; the work is not done a second time here. And a
SIGKILL to dtrun's whole process group leaves nothing of the helper's behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from dtrun.errors import DiskFullError
from dtrun.report.builder import ReportBuilder
from tests.paths import REPO


def _fail_as_a_full_disk(tries: Path) -> None:
    with tries.open("a") as file:
        file.write(f"{os.getpid()}\n")
    raise DiskFullError("the disk holding runs/x is full", why="report.html could not be written")


def test_an_error_dtrun_explains_in_the_helper_is_raised_once_not_retried_here(tmp_path: Path):
    # Retried here, the second try named another file than the one the first had left
    # unwritten (throughput.png, where report.html was missing).
    tries = tmp_path / "tries"
    builder = ReportBuilder()
    try:
        assert builder._helper is not None
        with pytest.raises(DiskFullError) as raised:
            builder.call(_fail_as_a_full_disk, tries)
    finally:
        builder.close()
    assert raised.value.why == "report.html could not be written"
    (pid,) = tries.read_text().split()
    assert int(pid) != os.getpid()  # the helper's try, and no other


# dtrun, its report helper started and answering, till its process group is killed
_KILLED = """
import os, signal
from dtrun.report.builder import ReportBuilder

builder = ReportBuilder()
print(builder.call(os.getpid), flush=True)  # the helper's pid
signal.pause()
"""


def _shared_memory_mapped(pid: int) -> set[int]:
    """The inodes of the files in /dev/shm that a process has mapped: a named POSIX semaphore is
    one (by inode: glibc maps a temporary name, then links it to the semaphore's)."""
    fields = (line.split(maxsplit=5) for line in Path(f"/proc/{pid}/maps").read_text().splitlines())
    return {
        int(field[4]) for field in fields if len(field) == 6 and field[5].startswith("/dev/shm/")
    }


def _in_dev_shm(inodes: set[int]) -> list[Path]:
    found = []
    for path in Path("/dev/shm").iterdir():
        with contextlib.suppress(FileNotFoundError):  # another's, removed meanwhile
            if path.lstat().st_ino in inodes:
                found.append(path)
    return sorted(found)


def _ended(process: psutil.Process) -> bool:
    """Once it has exited (reaped, or a zombie where nothing reaps the orphans), within 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this system")
def test_a_sigkill_to_dtrun_s_process_group_leaves_no_helper_and_nothing_in_dev_shm(
    tmp_path: Path,
):
    # A scheduler's stop (`kill -KILL -- -PGID`, `timeout -s KILL`): under multiprocessing, the
    # helper's queues' five semaphores (/dev/shm/sem.mp-*) were the resource tracker's to
    # unlink, and it was killed with dtrun's group: each such kill left five for good.
    mapped: set[int] = set()
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    ) as dtrun:  # fmt: skip
        try:
            assert dtrun.stdout is not None
            helper = psutil.Process(int(dtrun.stdout.readline()))
            mapped = _shared_memory_mapped(dtrun.pid) | _shared_memory_mapped(helper.pid)
            os.killpg(dtrun.pid, signal.SIGKILL)
            dtrun.wait()
            assert _ended(helper)  # gone with dtrun, though in a session of its own
            assert _in_dev_shm(mapped) == []
        finally:
            if dtrun.poll() is None:  # not reaped: its pid is still its group's
                os.killpg(dtrun.pid, signal.SIGKILL)
            for left in _in_dev_shm(mapped):  # what a failing run left, not left for good
                left.unlink(missing_ok=True)


class _Unsayable(Exception):
    """A failure that can neither travel (a lock in it) nor say itself (its repr raises)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _fail_unsayably() -> None:
    raise _Unsayable


def test_a_failure_that_can_neither_travel_nor_be_named_leaves_the_helper_answering(
    capfd: pytest.CaptureFixture[str],
):
    # Before, naming it for dtrun raised in the helper's own loop: the helper died, printing
    # three chained tracebacks on dtrun's terminal, and the next report was built here.
    builder = ReportBuilder()
    try:
        with pytest.raises(_Unsayable):  # done here again, as any failure that cannot travel
            builder.call(_fail_unsayably)
        assert builder.call(os.getpid) != os.getpid()  # the helper still answers
    finally:
        builder.close()
    assert "Traceback" not in capfd.readouterr().err


def _write_slowly(path: Path, started: Path, release: Path) -> None:
    """A report file written as write_atomic writes one, held mid-write until ``release``."""
    temporary = path.with_name(f".{path.name}.0000.partial")
    temporary.write_text("half")
    started.touch()
    for _ in range(600):  # at most 60 s, then on: a hang guard, not a timing
        if release.exists():
            break
        time.sleep(0.1)
    temporary.replace(path)


def test_closing_while_the_helper_writes_a_report_lets_it_finish_and_leaves_no_temporary_file(
    tmp_path: Path,
):
    # Before, close() killed the helper at once: a Ctrl-C while the report was being written
    # left `.report.md.<hex>.partial` in the run directory and no report.md.
    path, started, release = tmp_path / "report.md", tmp_path / "started", tmp_path / "release"
    builder = ReportBuilder()
    helper = builder._helper
    assert helper is not None
    helper.full_speed()  # as call() does
    helper.submit(_write_slowly, path, started, release)
    for _ in range(600):
        if started.exists():
            break
        time.sleep(0.1)
    assert started.exists()
    closing = threading.Thread(target=builder.close)
    closing.start()
    for _ in range(600):  # close() has shut the socket (the answers' thread saw it)
        if helper._gone:
            break
        time.sleep(0.01)
    release.touch()  # the write goes on only once close() has begun
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert path.read_text() == "half"
    assert not list(tmp_path.glob("*.partial"))
    assert not psutil.pid_exists(helper.pid) or _ended(psutil.Process(helper.pid))
