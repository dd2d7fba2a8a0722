"""Copying files to and from a node over SSH. To a node: through the exec channel, in one
`sh -s` script; back: by SFTP, or through the exec channel where the node's sshd offers no SFTP
subsystem (some sites disable it), as Ansible's ssh connection does (its transfer method
"smart": SFTP, then piped over the session).

The files to a node go in one `sh -s` script read from standard input (any login shell runs
`sh -s` alike, and no file's content or path is on a command line): each file is decoded from
base64 (which the launch wrapper already needs on every node) into a temporary file beside it,
given its mode, then renamed over the target, so a node never holds a half-written script.
Paths are quoted for sh. One channel a node: SFTP took four requests or more a file, about
100 ms of dtrun's CPU a node for a launch's 29 files (issue 41, docs/benchmarks.md). dtrun's
own code goes only to a node that lacks it (exec_put). A file is read back with `cat`, its
absence told apart from a failure by the exit status.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import functools
import hashlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from dtrun.engines.ssh.remote import STAGE
from dtrun.engines.ssh.session import SshError
from dtrun.execute import LOGIN_SCRIPT_FIX
from dtrun.workloads.files import write_atomic

if TYPE_CHECKING:
    import asyncssh

    from dtrun.spec.cluster import Node

Files = dict[str, tuple[bytes, int]]  # remote path -> (content, mode)
_END = "DTRUN_END_OF_FILE"  # never in base64's alphabet, so no content line can end the here-doc
_ABSENT = 3  # the exit status of a read whose file is not there


def no_sftp(exc: BaseException) -> bool:
    """The node's sshd refused the SFTP subsystem (no `Subsystem sftp` line) or it ended at
    once (its sftp-server missing): the files go through the exec channel instead."""
    import asyncssh

    if isinstance(exc, asyncssh.ChannelOpenError):
        return exc.code == asyncssh.OPEN_REQUEST_SESSION_FAILED
    return isinstance(exc, asyncssh.SFTPError)


@functools.lru_cache(maxsize=256)
def _base64(content: bytes) -> str:
    """Once per content: the code files are the same for every node (bytes keep their hash)."""
    return base64.encodebytes(content).decode().rstrip("\n")


def put_script(files: Files) -> str:
    """The sh script that writes ``files`` atomically (temporary file, mode, rename)."""
    # sh runs no EXIT trap for a signal that kills it (logind ending a session's processes,
    # an admin's kill): each is an exit here, so no half-written file stays
    lines = ["set -e", "umask 077", "tmp=", "trap 'rm -f \"$tmp\"' EXIT"]
    lines.append("trap 'exit 1' HUP INT PIPE TERM")
    made = ""
    for path, (content, mode) in files.items():
        target = shlex.quote(path)
        parent = str(PurePosixPath(path).parent)
        if parent != made:  # once for a run of files in one directory
            lines.append(f"mkdir -p -- {shlex.quote(parent)}")
            made = parent
        lines += [
            f"tmp={shlex.quote(path + '.dtrun-part.')}$$",
            f"base64 -d > \"$tmp\" <<'{_END}'",
            _base64(content),
            _END,
            f'chmod {mode:o} "$tmp"',
            f'mv -f -- "$tmp" {target}',
        ]
    lines.append("tmp=")
    return "\n".join(lines) + "\n"


async def exec_put(
    connection: asyncssh.SSHClientConnection,
    node: Node,
    files: Files,
    code: Files | None = None,
    held: asyncssh.SSHClientProcess[str] | None = None,
) -> bool:
    """Write ``files`` through the exec channel, and ``code`` (dtrun's workload code) only where
    the node does not hold it already; an SshError naming the node if sh fails. Returns whether
    the code was sent. ``held``: the node's held session (remote.py, STAGE) instead of a new
    channel.

    The code is most of what a first launch sends a node (180 KB, 2.6 ms of dtrun's CPU a node
    on loopback, docs/benchmarks.md), and the same from one run to the next. The script asks
    the node first: `sha256sum -c` against the files' digests. Only a node that answers
    "wanted" gets the code, in the same channel (`sh -s` reads its script as it comes).

    A held session's stderr comes with its output (remote.run_command): sh's message is read
    there."""
    script = put_script(files)
    if held is not None:
        held.stdin.write(STAGE)  # the held session becomes `sh -s`
        process = held
    else:
        process = await connection.create_process("sh -s")
    before = ""  # what sh said before its answer: a failure's message, where held
    if not code or not checkable(code):  # a path sha256sum would escape: sent every time
        process.stdin.write(script + (put_script(code) if code else ""))
        sent = bool(code)
    else:
        process.stdin.write(script + code_check_script(code))
        sent = False
        while line := await process.stdout.readline():
            if line.strip() in (_THERE, _WANTED):
                sent = line.strip() == _WANTED
                break
            before += line
        if sent:
            process.stdin.write(put_script(code))
    process.stdin.write_eof()
    result = await process.wait(check=False)
    said = _said(result, held, before)
    if held is not None and result.exit_signal is not None and not said.strip():
        # killed before its STAGE came, the news of its end not yet read when it was chosen
        # (the executor takes only an open one): staged anew, on a channel of its own
        return await exec_put(connection, node, files, code)
    return _finish(node, result, said, sent=sent)


def _said(result: asyncssh.SSHCompletedProcess, held: object, before: str = "") -> str:
    """What sh said on its stderr; where the session was held, its output, from ``before``
    (what was read of it before its answer) on."""
    if held is None:
        return str(result.stderr or "")
    return before + str(result.stdout or "")


def _finish(
    node: Node, result: asyncssh.SSHCompletedProcess, said: str, sent: bool = False
) -> bool:
    if result.exit_status == 0:
        return sent
    why = f"`sh -s` exited {result.exit_status} writing them through the SSH session"
    fix = "check that the node's disk has room and its sh has base64 and mkdir; "
    fix += "`dtrun exec --hosts ... -- df -h` shows every node's disks"
    if not said.strip():  # ended before sh said a word: as a login script that exits does
        why, fix = f"{why}, and said nothing", LOGIN_SCRIPT_FIX
    else:
        why = f"{why}: {_tail(said)}"
    raise SshError(
        f"cannot write the launch files on {node.name} ({node.address})", why=why, fix=fix
    )


_THERE, _WANTED = "dtrun-code-there", "dtrun-code-wanted"


@functools.lru_cache(maxsize=256)
def _sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def checkable(code: Files) -> bool:
    """Whether sha256sum reads every path as written: it escapes a name with a newline or a
    backslash (the hosts file's workdir is the user's)."""
    return not any("\n" in path or "\\" in path for path in code)


def code_check_script(code: Files) -> str:
    """sh lines that end the script (exit 0) where every file of ``code`` is on the node with
    this content, and ask for it otherwise. A missing sha256sum asks too."""
    digests = "\n".join(f"{_sha256(content)}  {path}" for path, (content, _) in code.items())
    return (
        f"if sha256sum -c --status --strict - 2>/dev/null <<'{_END}'\n{digests}\n{_END}\n"
        f"then echo {_THERE}; exit 0; fi\necho {_WANTED}\n"
    )


async def sftp_get(
    connection: asyncssh.SSHClientConnection, remote: str, local: Path
) -> bool | None:
    """Copy ``remote`` here by SFTP: whether it was there; None where the node offers no SFTP."""
    try:
        client = await connection.start_sftp_client()
    except Exception as exc:
        if no_sftp(exc):
            return None
        raise
    async with client as sftp:
        if not await sftp.exists(remote):
            return False
        part = _part(local)
        with _none_left(part):
            await sftp.get(remote, str(part))
    part.replace(local)
    return True


async def exec_get(
    connection: asyncssh.SSHClientConnection, node: Node, remote: str, local: Path
) -> bool:
    """Copy ``remote`` here through the exec channel if it is there."""
    path = shlex.quote(remote)
    script = f"if [ -f {path} ]; then exec cat -- {path}; fi\nexit {_ABSENT}\n"
    result = await connection.run("sh -s", input=script.encode(), encoding=None, check=False)
    if result.exit_status == _ABSENT:
        return False
    if result.exit_status != 0:
        stderr = result.stderr if isinstance(result.stderr, bytes) else b""
        raise SshError(
            f"cannot read {remote} on {node.name} ({node.address})",
            why=f"`cat` exited {result.exit_status}: {_tail(stderr.decode(errors='replace'))}",
            fix="check the file's permissions on the node",
        )
    stdout = result.stdout if isinstance(result.stdout, bytes) else b""
    _write_here(local, stdout)
    return True


def _write_here(local: Path, data: bytes) -> None:
    """Write a copied file into the run directory whole: temporary file, then rename."""
    part = _part(local)
    with _none_left(part):
        part.write_bytes(data)
    part.replace(local)


@contextlib.contextmanager
def _none_left(part: Path) -> Iterator[None]:
    """A copy's temporary file, removed where the copy failed (a full disk here)."""
    try:
        yield
    except BaseException:
        part.unlink(missing_ok=True)
        raise


# This machine's disk refusing a copied file: no other node's copy of it would fit either
_REFUSED_HERE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


@contextlib.contextmanager
def next_node_unless_here(local: Path) -> Iterator[None]:
    """Copying ``local`` back from one node of several: an OSError (the connection dropped)
    leaves the next node to try, but this machine's disk refusing the copy (full, read-only)
    is raised naming ``local``, for the run directory's error (runner/record/writefail.py),
    not passed over as if the launch had left no result (its node failed)."""
    try:
        yield
    except OSError as exc:
        if refused_here(exc):
            raise OSError(exc.errno, exc.strerror, str(local)) from exc


def refused_here(error: OSError) -> bool:
    """Whether this machine's disk refused a file copied back (full, read-only)."""
    return error.errno in _REFUSED_HERE


def _part(local: Path) -> Path:
    return local.with_name(f".{local.name}.part")


def _tail(text: object, lines: int = 3) -> str:
    shown = str(text or "").strip().splitlines()[-lines:]
    return " | ".join(shown) or "no message"


# A step record's name as the step hook writes it (runner/workloads/stephook/_dtrun_stephook.py)
_STEP_NAME = re.compile(r"rank-(?:\d{1,9}|pid\d{1,9})\.json")
_STEP_LIMIT = 64 * 1024 * 1024  # each file; the hook writes a float per step


async def exec_get_steps(
    connection: asyncssh.SSHClientConnection, node: Node, remote: str, local: Path
) -> int:
    """Copy the step hook's records (``remote``/rank-*.json) of a node's ranks into ``local``
    through the exec channel (with or without SFTP); returns how many. Names other than the
    hook's are not copied."""
    path = shlex.quote(remote)
    script = (
        f"for f in {path}/rank-*.json; do\n"
        '  case "${f##*/}" in *[!A-Za-z0-9.-]*) continue ;; esac\n'
        '  [ -f "$f" ] && [ ! -L "$f" ] || continue\n'
        f'  [ "$(wc -c < "$f")" -le {_STEP_LIMIT} ] || continue\n'
        '  printf "%s\\n" "${f##*/}"; base64 -w0 < "$f"; echo\n'
        "done\n"
    )
    result = await connection.run("sh -s", input=script, check=False)
    if result.exit_status != 0:
        raise SshError(
            f"cannot read the step records in {remote} on {node.name} ({node.address})",
            why=f"the listing exited {result.exit_status}: {_tail(result.stderr)}",
            fix="check the directory's permissions on the node",
        )
    lines = str(result.stdout).splitlines()
    copied = 0
    for name, body in zip(lines[0::2], lines[1::2], strict=False):
        if not _STEP_NAME.fullmatch(name):
            continue
        try:
            data = base64.b64decode(body, validate=True)
        except binascii.Error:
            continue
        local.mkdir(parents=True, exist_ok=True)
        write_atomic(local / name, data)
        copied += 1
    return copied
