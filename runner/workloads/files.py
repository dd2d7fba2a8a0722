"""Writing into a run directory: a file whole or not at all, a log that survives a full disk,
and never through a symbolic link.

The one way dtrun writes into a run directory, on this machine (runner/record/rundir.py) and on
the nodes (a workload's result.json), so it is the standard library only and Python 3.10.

The bytes go to a temporary file made beside the target with ``O_CREAT | O_EXCL | O_NOFOLLOW``
(a name that is already there, a link included, is never opened), then ``os.replace`` puts it
in the target's place (after ``fsync``, so a machine that crashes leaves the old file or the
new one, not an empty one): a reader sees the old file or the new one, never half of one, and a
link at the target's name is refused rather than written through. Whatever goes wrong (a full
disk, a read-only file system, the directory removed), the temporary file is removed and the
target is left as it was; the OSError is the caller's to explain.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

# Marks dtrun's temporary files: a run directory's readers and uploads skip names holding it.
PARTIAL = ".partial"
# The node logs a write error cut short in this process, by path: why (NodeLog). A launch's
# record says so per node (runner/sweep/runlaunch.py), as does a full disk's message.
CUT_LOGS: dict[str, str] = {}
# The line a workload prints on its node where its result.json could not be written
# (`dtrun-unwritten: ERRNO FOLDER PATH`, runner/workloads/result.py; FOLDER: folder_identity
# of PATH's folder): dtrun reads it in the node's log and names that disk (a full one) rather
# than the node, this machine's or the node's own (runner/record/writefail.py).
UNWRITTEN = "dtrun-unwritten:"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # Linux: random at each boot of a kernel


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` (file mode ``mode``) in one step; refuse a link at ``path``
    (OSError ELOOP)."""
    refuse_link(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}{PARTIAL}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask took bits off; the caller's mode is the one meant
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)  # on disk before it takes the name: a crash leaves old or new, whole
        finally:
            os.close(fd)
        refuse_link(path)  # made while this was writing: still not followed, but refused
        temporary.replace(path)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # the directory went away: nothing left to remove
            temporary.unlink()
        if isinstance(exc, OSError) and exc.filename is None:  # os.write's and fsync's: a full
            exc.filename = str(temporary)  # disk names the file (runner/record/writefail.py)
        raise


def folder_identity(folder: Path) -> str:
    """Which directory ``folder`` is, for another machine to compare: its kernel's boot id and
    the folder's device and inode (``BOOT:DEV:INO``); "-" where they cannot be read. One
    folder seen from a node and from this machine says the same; a node's own disk mounted at
    the same path (an SSH node whose launch directory has the run directory's path) does not."""
    try:
        boot = BOOT_ID.read_text().strip()
        found = folder.stat()
    except OSError:
        return "-"
    return f"{boot}:{found.st_dev}:{found.st_ino}" if boot and " " not in boot else "-"


def refuse_link(path: Path) -> None:
    """OSError ELOOP when ``path`` is a symbolic link (a write there would replace the link,
    and whoever put it there meant something else)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise OSError(errno.ELOOP, "it is a symbolic link; dtrun writes through none", str(path))


def name_too_long(path: Path) -> bool:
    """No file can have ``path``'s name (ENAMETOOLONG: a part over 255 bytes, or the whole over
    4,096): pathlib's exists() and is_dir() raise it, where they answer False for a name that
    is merely not there."""
    try:
        os.lstat(path)
    except OSError as exc:
        return exc.errno == errno.ENAMETOOLONG
    return False


class NodeLog:
    """A node's log, written as its output streams: opened without following a link, and
    on a full disk (or any write error) it stops writing and remembers why, so the thread
    copying a node's output goes on reading it (a node blocked on a full pipe would hang the
    launch) and the node's lines still reach the console. ``on_error`` hears that error once,
    naming the log: the executor stops the launch, as for a failed node (a launch whose logs
    and results cannot be kept ran on unseen until --timeout)."""

    def __init__(
        self,
        path: Path,
        *,
        append: bool = False,
        on_error: Callable[[OSError], object] | None = None,
    ) -> None:
        refuse_link(path)
        self.on_error = on_error
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_APPEND if append else os.O_TRUNC
        self.path = path
        CUT_LOGS.pop(str(path), None)  # an earlier launch's log of that name (--resume)
        self.error: OSError | None = None
        # O_NONBLOCK: a FIFO at the log's name (no reader) is refused at once, not waited on
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(
                errno.EEXIST, "it is not a plain file; dtrun writes a log there", str(path)
            )
        os.set_blocking(fd, True)
        self._fd: int | None = fd

    def write(self, data: bytes) -> None:
        """Straight to the file (no buffer: a line is in the log once its node printed it)."""
        if self.error is not None or self._fd is None:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            # os.write names no file: the log's path, for the caller's message (writefail.py)
            self.error = OSError(exc.errno, exc.strerror or str(exc), str(self.path))
            CUT_LOGS[str(self.path)] = exc.strerror or str(exc)
            if self.on_error is not None:
                self.on_error(self.error)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> NodeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
