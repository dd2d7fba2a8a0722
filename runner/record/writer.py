"""Which dtrun writes a run directory: the one that holds the lock on its ``.dtrun-writer``.

The kernel drops an flock(2) lock when its holder ends, however it ends (SIGKILL, out of
memory, a crash), so a run directory whose runs.json still says "running" while nobody holds
the lock was left by a dtrun that ended without recording how; and a second dtrun (`--resume`
in another terminal) cannot write into a run directory the first still writes
(docs/report.md, "Writing: whole files, no links, a full disk").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

from dtrun.errors import DamagedRunError, OutputDirError, UsageError

LOCK_FILE = ".dtrun-writer"
UNRECORDED = (
    "running as last recorded, yet no dtrun holds the run directory: it ended without "
    "recording how (SIGKILL, out of memory, or its machine stopped)"
)
_held: list[int] = []  # the lock this process holds: one run directory at a time


def hold_writer(run_path: Path) -> None:
    """Take ``run_path``'s writer lock for the rest of this process (or until it takes another
    run directory's); refused while another dtrun holds it."""
    try:
        fd = os.open(run_path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(0, "not a file")  # a FIFO there: not ours to lock
    except OSError as exc:
        raise OutputDirError(
            f"cannot take {run_path} for writing",
            why=f"{LOCK_FILE}: {exc.strerror or exc}",
            fix=f"remove {run_path / LOCK_FILE} if it is a link or not a file, and run again",
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputDirError(
            f"another dtrun is writing {run_path}",
            why="two writers would mix their launches in one record",
            fix="wait for it to end, or stop it (Ctrl-C where it runs), then run this again",
        ) from None
    release_writer()
    _held.append(fd)


def release_writer() -> None:
    while _held:
        with contextlib.suppress(OSError):
            os.close(_held.pop())


def holds_writer(run_path: Path) -> bool:
    """Whether this process holds ``run_path``'s writer lock: the run directory is its own."""
    try:
        mine = [os.fstat(fd) for fd in _held]
        there = os.lstat(run_path / LOCK_FILE)
    except OSError:
        return False
    return any((held.st_dev, held.st_ino) == (there.st_dev, there.st_ino) for held in mine)


def writer_alive(run_path: Path) -> bool | None:
    """Whether a dtrun holds ``run_path`` for writing now; None where no lock file says (a run
    directory from before the lock, or copied without it)."""
    try:
        fd = os.open(run_path / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def no_launch_recorded(run_path: Path, runs: Path) -> None:
    """runs.json is written as the first launch ends. Before: a dtrun still in that launch, or
    one that ended in it without recording how, as the lock says; nothing raised where no
    lock file says, or runs.json is there (the reader's own message stands)."""
    if runs.exists() or runs.is_symlink():
        return
    alive = writer_alive(run_path)
    if alive:
        raise UsageError(
            f"{run_path} has no launch recorded yet",
            why="a dtrun is running its first launch; runs.json is written as that ends",
            fix="wait for the first launch to end, then run this again",
        )
    if alive is False:
        raise DamagedRunError(
            f"{runs} is missing",
            why="the sweep recorded no launch: its dtrun ended in its first launch without "
            "recording how (SIGKILL, out of memory, or its machine stopped)",
            fix=f"run the sweep again: dtrun bench --rerun {run_path}",
        )
