"""A host's ProxyCommand (~/.ssh/config), run by asyncssh, with its stderr kept apart.

asyncssh runs the command itself (asyncssh/connection.py, ``_open_proxy``: the loop's
subprocess_exec, stderr left a pipe) and reads stderr into the SSH stream as it reads stdout:
a line the command writes there before the server's banner is taken for the banner, one after
it breaks the packets, and a command that fails is only "Connection lost". OpenSSH leaves the
command's stderr on the terminal. The session's loop (``ProxyLoop``) gives the command a
private file for stderr instead, and the error names the command and its last lines there.

Not a shell wrapper (`exec "$@" 2>>FILE`): asyncssh ends the connection when any of the
command's pipes closes, stderr's too, so the redirection alone would end it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dtrun.engines.ssh.endpoint import Endpoint
from dtrun.execute import WAKE_S
from dtrun.redact import Redactor, pem_lines, redact_cuts, redact_text, secret_args

P = TypeVar("P", bound=asyncio.BaseProtocol)
# The first of the argv that asyncssh is given: ``ProxyLoop`` takes it and the stderr file's
# path off, then runs the command's own words as asyncssh split them, never quoted again.
MARK = "dtrun-proxy-command-stderr-to"
SAID_LINES = 3  # the last lines of its stderr an error shows
LINE_CHARS = 200  # each cut to this
READ_BYTES = 64 * 1024  # from the end of the file


class ProxyLoop(asyncio.SelectorEventLoop):
    """The SSH session's event loop: a ProxyCommand marked by ``ProxyRun`` writes its stderr
    to its file (appending), not to the pipe asyncssh would read. It wakes every WAKE_S: a
    stop signal that one of its threads took (a name lookup's, a child watcher's waitpid) is
    handled within one, as a wait for a thread's result is (runner/engines/common/threads.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.proxies: list[asyncio.SubprocessTransport] = []  # each command started
        self._wake()

    def _wake(self) -> None:
        self.call_later(WAKE_S, self._wake)

    async def subprocess_exec(
        self, protocol_factory: Callable[[], P], program: Any, *args: Any, **kwargs: Any
    ) -> tuple[asyncio.SubprocessTransport, P]:
        if program != MARK or not args:
            return await super().subprocess_exec(protocol_factory, program, *args, **kwargs)
        path, command = args[0], args[1:]
        with Path(path).open("ab") as stderr:  # the child's own copy outlives this one
            kwargs.setdefault("stderr", stderr)
            started = await super().subprocess_exec(protocol_factory, *command, **kwargs)
        self.proxies = [*_running(self.proxies), started[0]]
        return started

    @staticmethod
    def stoppable(tasks: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
        """The tasks a closing session may cancel: all but those connecting a starting
        command's pipes (asyncio's ``_connect_pipes``). One cancelled leaves its pipes unset,
        and the command's start, cancelled too, waits for them for ever (base_subprocess.py:
        ``_wait`` after ``close``): dtrun hung when a node's error ended the command while
        another node's ProxyCommand was starting."""
        return [task for task in tasks if _coroutine_name(task) != _CONNECT_PIPES]

    async def proxies_ended(self, within_s: float = 5.0) -> None:
        """Wait until every command's end is known. asyncssh closes a connection without
        waiting for its command (connection.py: ``_cleanup`` drops the tunnel that
        ``wait_closed`` would wait for), and a loop closed first makes asyncio print "Loop ...
        that handles pid N is closed" raw on stderr. Stopped with SIGKILL, each ends at once."""
        deadline = self.time() + within_s
        while _running(self.proxies) and self.time() < deadline:
            await asyncio.sleep(0.01)


_CONNECT_PIPES = "BaseSubprocessTransport._connect_pipes"


def _coroutine_name(task: asyncio.Task[Any]) -> str:
    return str(getattr(task.get_coro(), "__qualname__", ""))


def _running(proxies: list[asyncio.SubprocessTransport]) -> list[asyncio.SubprocessTransport]:
    return [proxy for proxy in proxies if proxy.get_returncode() is None]


@dataclass(frozen=True)
class ProxyRun:
    """One connection's ProxyCommand, or none (``argv`` None: asyncssh runs no command)."""

    written: str = ""  # as ~/.ssh/config writes it (%h %p expanded)
    argv: tuple[str, ...] | None = None  # what asyncssh is given: MARK, the file, the command
    stderr: str = ""  # the file its stderr goes to

    @classmethod
    def of(cls, target: Endpoint, *, tunneled: bool) -> ProxyRun:
        """The ProxyCommand of one connection to ``target``: none where it goes through a jump
        host (the hosts file's `jump:` wins, as `ssh -J` does). Its stderr file is made in the
        temporary directory, readable by its owner only (mkstemp); ``remove`` it after."""
        if tunneled or not target.proxy_command:
            return cls()
        _quiet_early_reaping()
        handle, path = tempfile.mkstemp(prefix="dtrun-proxy-", suffix=".stderr")
        os.close(handle)
        return cls(target.proxy_written, (MARK, path, *target.proxy_command), path)

    def said(self) -> str:
        """What the error's why adds: the command and the last lines it wrote on stderr."""
        if self.argv is None:
            return ""
        # a password the command's words hold (`sshpass -p PW ssh -W %h:%p bastion`) too
        hide = Redactor.of(secret_args(self.argv[2:]))
        written = redact_text(_cut(hide.text(self.written)))
        return f"; its ProxyCommand `{written}` said {_tail(self.stderr, hide)}"

    def fix(self, target: Endpoint) -> str:
        """What to do when the node was not reached through the command ("" without one)."""
        if self.argv is None:
            return ""
        host = shlex.quote(target.host)
        return (
            f"`ssh {host} true` runs the same ProxyCommand (`ssh -G {host}` shows it): make that "
            "work, and check that the node's sshd answers behind it"
        )

    def remove(self) -> None:
        """Remove the stderr file: a command still running (the connection's) writes on, to no
        name."""
        if self.stderr:
            with contextlib.suppress(OSError):
                Path(self.stderr).unlink()


def _tail(path: str, hide: Redactor) -> str:
    try:
        with Path(path).open("rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - READ_BYTES))
            text = file.read().decode(errors="replace")
    except OSError:
        return "nothing dtrun could read"
    # a key printed line by line, a secret a line break cuts and a password of the command's
    # words (`ssh -v` says the command it runs), hidden before its last lines alone are quoted
    text = pem_lines(redact_cuts(hide.text(text)))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "nothing on stderr"
    return '"' + " | ".join(redact_text(_cut(line)) for line in lines[-SAID_LINES:]) + '"'


def _cut(line: str) -> str:
    # a long line's secrets masked first: the cut could keep a secret's start
    line = line if len(line) <= LINE_CHARS else redact_text(line)
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


# asyncio's subprocess transport, closing, polls the child (Popen.poll, a waitpid) and so may
# reap a command that has just exited before the child watcher's thread does; that thread then
# logs this warning, which Python prints raw on stderr (no logging is set up): CPython issues
# 86276 and 127049. The child is reaped either way, and asyncssh reads no exit status.
_REAPED_WORDS = (
    "Unknown child process pid",  # ThreadedChildWatcher, Python 3.11
    "child process pid",  # PidfdChildWatcher: "... exit status already read"
)


class _ReapedEarly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_REAPED_WORDS)


def _quiet_early_reaping() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(kept, _ReapedEarly) for kept in logger.filters):
        logger.addFilter(_ReapedEarly())
