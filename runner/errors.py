"""One exception tree for dtrun.

Each error says what failed, why, and what to run next; the CLI prints ``str(error)`` without a
traceback and exits with ``error.exit_code``. Anything else that escapes is a bug and keeps its
traceback.
"""

from __future__ import annotations

import re
import signal
from typing import TYPE_CHECKING

from dtrun.spec.text import one_line

if TYPE_CHECKING:
    from dtrun.spec.outcome import NodeResult


class Lines(str):
    """Text whose line breaks are its own layout: lines dtrun laid out, each value in them on a
    line of its own and indented (``indent``), or made one line. A DtrunError keeps its breaks."""


def _laid_out(text: str) -> str:
    """A part of an error message: Lines as they are; any other text one line, its line breaks
    and control characters written as escapes (``\\n``), so that a value it quotes (a node's
    name from a result file, a path, a scheduler's words) cannot print a line of its own."""
    return text if isinstance(text, Lines) else one_line(text)


class DtrunError(Exception):
    """Base of every error dtrun expects and reports to the user. Its what, why and fix are one
    line each unless given as Lines; the message's own layout (``next:``) is added here."""

    exit_code = 1

    def __init__(self, what: str, *, why: str = "", fix: str = "") -> None:
        self.what = _laid_out(what)
        self.why = _laid_out(why)
        self.fix = _laid_out(fix)
        super().__init__(self.message)

    @property
    def message(self) -> Lines:
        """What, why and fix laid out; quoted whole in another error, it keeps its lines."""
        text = self.what
        if self.why:
            text += f": {self.why}"
        if self.fix:
            text += f"\n  next: {self.fix}"
        return Lines(text)


class UsageError(DtrunError):
    """Bad input from the user: options, node counts, files, directories."""

    exit_code = 2


class InventoryError(UsageError):
    """The inventory cannot be built or does not hold what was asked of it."""


class PlanError(UsageError):
    """The benchmark cannot be planned on this inventory."""


class UnsafeValueError(UsageError):
    """A value would reach a script or config unquoted (runner/render.py): input validation
    should have refused it first, so the message names the value and where it was going."""


class OutputDirError(UsageError):
    """The run directory cannot be created or written."""


class DamagedRunError(UsageError):
    """A file `dtrun report` or `dtrun compare` reads is missing, unreadable or not what dtrun
    writes; found before anything is written, so the run directory is left as it was."""


class RunDirWriteError(DtrunError):
    """A file could not be written into the run directory (a full or read-only disk, the
    directory removed, a link in the way); every file written before is whole and kept."""


class DiskFullError(RunDirWriteError):
    """The disk holding the run directory is full."""


class ResultError(DtrunError):
    """A result file is missing, malformed, or of an unknown schema version."""


class StoreError(DtrunError):
    """The results store (--results) cannot be used: no credentials, access denied, no bucket.

    Found before anything runs, so like a usage error it exits 2 and leaves nothing behind.
    """

    exit_code = 2


class UploadError(StoreError):
    """The run finished (however it ended) but its upload did not; the local copy is kept.

    Its own exit code, so a script can tell "results only on this machine" from a failed run.
    """

    exit_code = 3


class UploadInterruptedError(UploadError):
    """The user interrupted the upload (Ctrl-C); the local copy is kept."""

    exit_code = 130


class SiteError(DtrunError):
    """A service of the site that dtrun relies on does not answer (Slurm's munge or controller,
    a Spark master): not the user's input, so not exit 2; the message says which service and
    who can bring it back."""


class RunError(DtrunError):
    """A launch on the nodes failed."""

    node_results: tuple[NodeResult, ...] = ()  # how every node ended, set by the executor
    # the node the launch lost (its SSH connection dropped): a check goes on without it
    lost_node: str | None = None
    # False where losing it ended the rest too (Slurm's job gone with it): no retry can run
    others_held: bool = True


class NodeFailedError(RunError):
    """One node's launch exited non-zero; the other nodes were stopped."""

    def __init__(self, node: str, address: str, exit_code: int, log_path: str, detail: str) -> None:
        """``detail``: what the node's log says of the failure (dtrun.execute.failure.explain),
        its failing rank's own error first; empty when the log is."""
        self.node = node
        self.exit_code_of_node = exit_code
        self.log_path = log_path
        self.detail = detail
        fix = f"read {log_path}, fix the cause, and run again"
        taken = _PORT_TAKEN.search(detail)
        if taken:  # torch's TCPStore could not listen: another run holds the port
            fix = (
                f"port {taken[1]} is taken on {node}: another run (a second dtrun on the same "
                "machine) or program listens there; pass --port with a free one, or wait for it"
            )
        super().__init__(
            f"{node} ({address}) failed with {describe_exit(exit_code)}; "
            "the other nodes were stopped",
            why=Lines(detail) if detail else f"{log_path} is empty",  # explain's layout
            fix=fix,
        )


# torch's TCPStore when its port is in use (torch/csrc/distributed/c10d/socket.cpp's message)
_PORT_TAKEN = re.compile(r"port: (\d+), useIpv6: \w+, code: -98, name: EADDRINUSE")


class RunTimeoutError(RunError):
    """A launch ran past its timeout; every node was stopped."""

    # the nodes that had stopped making progress, where the launch could tell (a check's:
    # runner/check/stopped.py, Progress), the most silent first
    hung_nodes: tuple[str, ...] = ()


class HealthGateError(RunError):
    """--strict: a node's single-node all-reduce was below the expected bus bandwidth."""

    exit_code = 4


# SIGTERM and SIGHUP stop dtrun the way Ctrl-C does (runner/cli/app.py turns them into SIGINT);
# the first one that arrived decides the exit code and the words in the records.
_stop_signal: list[signal.Signals] = []


def stopped_by(signum: int) -> None:
    """Remember the signal that is stopping dtrun (the first one counts)."""
    if not _stop_signal:
        _stop_signal.append(signal.Signals(signum))


def stop_signal() -> signal.Signals:
    """The signal stopping dtrun. Asked with none remembered, the stop is a real Ctrl-C (SIGINT
    keeps Python's own handler, which asyncio's Ctrl-C handling needs, so nothing remembers
    it): it is remembered now, and a SIGTERM after it does not rename the stop."""
    if not _stop_signal:
        _stop_signal.append(signal.SIGINT)
    return _stop_signal[0]


def interruption(stop: BaseException | None = None) -> str:
    """What stopped the run, as records say it; ``stop``, the interruption raised: where it
    came while the launch was stopping after its own end (LaunchInterrupted.ended), that end
    is said first."""
    signum = stop_signal()
    said = (
        "interrupted by the user (Ctrl-C)"
        if signum is signal.SIGINT
        else f"stopped by {signum.name}"
    )
    ended = getattr(stop, "ended", None)
    return said if ended is None else f"{ended.what}; {said} during that stop"


def interrupted_exit_code() -> int:
    """128 + the signal, as shells report a process a signal stopped: 130, 143, 129."""
    return 128 + int(stop_signal())


class RunInterruptedError(RunError):
    """Ctrl-C, SIGTERM or SIGHUP stopped the run; every process dtrun started was stopped."""

    def __init__(self, what: str, *, why: str = "", fix: str = "") -> None:
        super().__init__(what, why=why, fix=fix)
        self.exit_code = interrupted_exit_code()


class LaunchInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGTERM, SIGHUP) stopped a launch; raised by an executor once every node is
    stopped, with how each node ended (its exit code, or None where the stop ended it), so the
    records say each node's state, not none."""

    def __init__(self, node_results: tuple[NodeResult, ...], ended: RunError | None = None) -> None:
        """``ended``: how the launch had ended (a failed node, its timeout) where the stop came
        while dtrun stopped its other nodes for that, so the records say both."""
        super().__init__()
        self.node_results = node_results
        self.ended = ended


def describe_exit(code: int) -> str:
    """``exit code 1`` or ``signal SIGKILL`` (asyncio reports a signal as a negative code)."""
    if code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def indent(text: str, prefix: str = "    ") -> Lines:
    """Each line of ``text`` behind ``prefix``: no line of it reads as one of the message's."""
    return Lines("\n".join(prefix + line for line in text.splitlines()))
