"""Why a write into a run directory failed, said to the user: a full disk, a read-only file
system, a link, a folder removed under dtrun (docs/report.md,
"Writing: whole files, no links, a full disk")."""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dtrun.errors import DiskFullError, DtrunError, RunDirWriteError, RunError
from dtrun.spec.outcome import NodeResult
from dtrun.workloads.files import CUT_LOGS, PARTIAL, UNWRITTEN, folder_identity


def write_error(exc: OSError, root: Path, path: Path | None = None) -> DtrunError | None:
    """What a failed write into run directory ``root`` means to the user, or None when the
    OSError is none a disk or the run directory explains (a bug: it keeps its traceback).
    Without ``path``, the file the OSError names (an executor's write), not its temporary."""
    if path is None and exc.filename is not None:
        path = Path(_TEMPORARY.sub(r"\1", os.fsdecode(exc.filename)))
    what = f"{path.relative_to(root) if path and path.is_relative_to(root) else path or root}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # a node log (NodeLog) is cut, not dropped, and its launch was stopped for it
        cut = path is not None and str(path) in CUT_LOGS
        return DiskFullError(
            f"the disk holding {root} is full ({_free_bytes(root):,} bytes free)",
            why=f"{what} could not be written{', so the launch was stopped' if cut else ''}; "
            f"results so far are kept in {root}, each file whole"
            f"{'' if cut else ' (the one being written was dropped)'}{_cut_here(root)}",
            # `dtrun report` reads a sweep's directory (it has a manifest), not `dtrun run`'s
            fix=f"free space and run `dtrun report {root}`"
            if (root / "manifest.json").is_file()
            else "free space and run the command again",
        )
    if exc.errno == errno.EROFS:
        return RunDirWriteError(
            f"{root} is on a read-only file system",
            why=f"{what} could not be written",
            fix="pass --output with a directory on a writable disk, or remount it read-write",
        )
    if exc.errno == errno.ENOENT and (gone := _gone(exc, root) or _emptied(exc)) is not None:
        meant = _TEMPORARY.sub(r"\1", str(exc.filename)) if exc.filename else what
        return removed(root, f"{meant} could not be written", gone)
    if exc.errno == errno.ELOOP:
        return RunDirWriteError(
            f"{what} in {root} is a symbolic link",
            why="dtrun writes no file through a link (it could point anywhere)",
            fix=f"remove the link from {root} and run the command again",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return RunDirWriteError(
            f"{what} in {root} cannot be written",
            why="permission denied",
            fix=f"run dtrun as a user who may write {root}",
        )
    return None


def first_cause(first: DtrunError | None, refused: DtrunError, record: str) -> DtrunError:
    """What to raise where a record (``record``: runs.json, run.json) could not be written:
    ``refused``, its write's error, unless a failure raised already stopped the run
    (``first``) by a write refused in the run directory (a full disk's first file), whose
    cause it keeps, adding that the record could not take it. A node's failure gives way: on
    a full disk it is most often the disk's doing (a Spark node stopped by its cut log, whose
    word did not reach dtrun)."""
    if first is None or first is refused or not isinstance(refused, RunDirWriteError):
        return refused
    if not isinstance(first, RunDirWriteError):
        return refused
    said = f"{record} could not take the entry either"
    if said not in first.why:  # once: a sweep writes runs.json after its launch and at its end
        same = isinstance(first, DiskFullError) and isinstance(refused, DiskFullError)
        first.why = "; ".join(filter(None, [first.why, said + ("" if same else f" ({refused})")]))
    return first


def unwritten(error: RunError, root: Path) -> DtrunError | None:
    """A failed launch whose node could not write its result.json on a full disk (its
    workload's `dtrun-unwritten: ERRNO FOLDER PATH` line in the node's log), said as that
    disk's failure, not the node's: in run directory ``root`` as write_error says it, elsewhere
    (a node's own disk, at the run directory's path too where an SSH node's workdir has it)
    naming the node. None for any other failure, a node's own."""
    found = _refused(error, root)
    if found is None:
        return None
    node, said, here = found
    if here is not None:
        return write_error(said, root, here)
    path = Path(str(said.filename))
    return DiskFullError(
        f"the disk holding {path.parent} on {node} is full",
        why=f"{node} could not write {path.name} there, so its launch failed",
        fix=f"free space on {node} and run the command again",
    )


def unwritten_here(error: RunError, root: Path) -> OSError | None:
    """unwritten's full disk where it is run directory ``root``'s: the node's write error
    naming its file as dtrun names it, for a caller to raise as its own write's (write_error
    explains it, with the launch's nodes kept: runner/sweep/runlaunch.py)."""
    found = _refused(error, root)
    if found is None or found[2] is None:
        return None
    return OSError(found[1].errno, found[1].strerror, str(found[2]))


def _refused(error: RunError, root: Path) -> tuple[str, OSError, Path | None] | None:
    """The first node of ``error`` whose log says a full disk refused its result file in this
    launch: the node, the write error said, and the file in ``root`` (None: elsewhere)."""
    for node in error.node_results:
        said, folder = _said_unwritten(Path(node.log_path))
        if said is None or said.errno not in (errno.ENOSPC, errno.EDQUOT):
            continue
        path = Path(str(said.filename))
        if not _of_this_launch(path, Path(node.log_path), root):
            continue  # an older run's line that a program printed (an old log): its output
        mine = folder is None or _same_folder(folder, path.parent)
        return node.node, said, _in_run_dir(path, root) if mine else None
    return None


def _same_folder(said: str, folder: Path) -> bool:
    """Whether the folder a node said (files.folder_identity) is ``folder`` here: under this
    kernel, the same device and inode (a node's own tmpfs at that path in a mount namespace
    of its own is another device); under another (another machine, whose device numbers are
    its own), the same inode, as shared storage (NFS) shows one folder to every machine."""
    here, there = folder_identity(folder).split(":"), said.split(":")
    if len(here) != 3 or len(there) != 3:  # no such folder here: the node's own
        return False
    return here[2] == there[2] and (here[0] != there[0] or here[1] == there[1])


def _in_run_dir(path: Path, root: Path) -> Path | None:
    """``path``, absolute as a node said it (its working directory: links resolved), as a
    path in run directory ``root`` as dtrun names it (`-o runs`: relative, maybe through a
    link); None where it is elsewhere (a node's own disk)."""
    for base in (root.absolute(), root.resolve()):
        if path.is_relative_to(base):
            return root / path.relative_to(base)
    return None


def _of_this_launch(path: Path, log: Path, root: Path) -> bool:
    """Whether the result file ``path`` a node's log names is this launch's: in the folder of
    the node's log (<id>/n2/r0 in ``root``, or that folder staged on the node, as
    remote_launch_dir has it), not one an older run's log named."""
    for base in (root.absolute(), root.resolve()):  # a node log's path may be resolved
        if log.parent.absolute().is_relative_to(base):
            want = (base.name, *log.parent.absolute().relative_to(base).parts)
            return path.parent.parts[-len(want) :] == want
    return False


# ERRNO, the folder's identity (files.folder_identity; none in an older dtrun's line), PATH
_UNWRITTEN_LINE = re.compile(rf"{re.escape(UNWRITTEN)} (\d+) (?:([^/\s]\S*) )?(/.*)$", re.MULTILINE)
_LOG_TAIL = 65536  # bytes of a node log read for that line: it comes just before the end


def _said_unwritten(log: Path) -> tuple[OSError | None, str | None]:
    """The write error a node's workload said (UNWRITTEN) in the end of its log, if any, and
    the identity of the folder it said it in ("-": unknown to the node; None: unsaid)."""
    try:
        with log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - _LOG_TAIL))
            tail = file.read().decode(errors="replace")
    except OSError:  # no log (the node never started), or it went with its folder
        return None, None
    found = _UNWRITTEN_LINE.findall(tail)
    if not found:
        return None, None
    code, folder, path = found[-1]
    said = OSError(int(code), os.strerror(int(code)), path.rstrip("\r"))
    return said, (None if folder in ("", "-") else folder)


# write_atomic's temporary name for NAME (runner/workloads/files.py)
_TEMPORARY = re.compile(rf"\.([^/]+)\.[0-9a-f]+{re.escape(PARTIAL)}$")


def _gone(exc: OSError, root: Path) -> Path | None:
    """The run directory, or the topmost folder in it, missing on the way to the file the
    OSError names: a program runs in its launch directory, and may remove it."""
    file = Path(str(exc.filename))
    parts = reversed(file.relative_to(root).parents) if file.is_relative_to(root) else [Path()]
    return next((root / part for part in parts if not (root / part).is_dir()), None)


def _emptied(exc: OSError) -> Path | None:
    """The folder whose files were being removed when dtrun's own temporary file went from it
    before it took its name (the folder itself not gone yet: a removal caught midway)."""
    if exc.filename is None or not _TEMPORARY.search(os.fsdecode(exc.filename)):
        return None
    return Path(os.fsdecode(exc.filename)).parent


def removed(root: Path, why: str, gone: Path | None = None) -> RunDirWriteError:
    part = f"{gone.relative_to(root)} in" if gone not in (None, root) else "the run directory"
    return RunDirWriteError(
        f"{part} {root} was removed while dtrun was writing to it",
        why=why,
        fix="leave a run directory in place until dtrun ends, and run the command again",
    )


def _free_bytes(root: Path) -> int:
    for where in (root, *root.parents):
        try:
            return shutil.disk_usage(where).free
        except OSError:
            continue
    return 0


def with_cut_logs(nodes: Sequence[NodeResult]) -> tuple[NodeResult, ...]:
    """The nodes, each whose log on this machine a write error cut short saying so
    (``log_cut``), for the launch's record."""
    return tuple(
        replace(node, log_cut=f"{why}: its later lines reached only the console")
        if node.log_cut is None and (why := CUT_LOGS.get(node.log_path))
        else node
        for node in nodes
    )


def _cut_here(root: Path) -> str:
    """The node logs in ``root`` a write error cut short, for a full disk's message."""
    cut = sorted(
        str(Path(path).relative_to(root)) for path in CUT_LOGS if Path(path).is_relative_to(root)
    )
    if not cut:
        return ""
    shown = ", ".join(cut[:3]) + (f" and {len(cut) - 3} more" if len(cut) > 3 else "")
    return f"; the node logs {shown} stop where the disk filled" if len(cut) > 1 else (
        f"; the node log {shown} stops where the disk filled"
    )  # fmt: skip
