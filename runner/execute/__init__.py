"""Executors run a LaunchPlan's node scripts and report how each node ended.

One interface, one return type: ``run`` returns every node's NodeResult when all nodes exit 0,
and otherwise raises a RunError (NodeFailedError, RunTimeoutError) after stopping every node.
A KeyboardInterrupt also stops every node before it propagates. Each engine's executor lives in
its package (runner/engines/<name>/executor.py); this package holds what they share: the
interface, the failure reading (failure.py), the stop every launch carries (guard.py) and the
success rule (success.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from dtrun.errors import LaunchInterrupted, RunError
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import NodeResult

if TYPE_CHECKING:
    from concurrent.futures import Future  # not imported for `dtrun --help`

T = TypeVar("T")
# How often the main thread's long waits wake: a stop signal the kernel gave to another of
# dtrun's threads is handled only once the main thread runs Python code again
# (runner/engines/common/threads.py says how that held a stop for good).
WAKE_S = 0.2


def result_of(future: Future[T]) -> T:
    """``future``'s result, waited for in WAKE_S steps: a stop signal that another thread took
    is handled within one."""
    while True:
        try:
            return future.result(timeout=WAKE_S)
        except TimeoutError:
            continue


def joined(thread: threading.Thread) -> None:
    """``thread`` ended, waited for in WAKE_S steps, as ``result_of`` waits."""
    while thread.is_alive():
        thread.join(WAKE_S)


LineSink = Callable[[str, str], None]  # (node name, one line of its output without newline)
StopSink = Callable[[int], None]  # hears, at once, how many nodes a stop (Ctrl-C...) is stopping


# What to do where a node's command ended before it said a word: the program check's and the
# staging's advice alike
LOGIN_SCRIPT_FIX = (
    "see what a command there says: `dtrun exec --hosts ... -- true`; a login script "
    "(~/.bashrc) that exits or fails ends every command on its node"
)


class LogCut(OSError):
    """A node log the disk could not hold (NodeLog's OSError, the same errno and file) that
    stopped its launch, or a result copied back from a node that this machine's disk refused
    once every node had ended (the SSH executor's), with how every node of it ended: the
    launch's record keeps them (runner/sweep/runlaunch.py), as a failed node's RunError does."""

    def __init__(self, error: OSError, node_results: tuple[NodeResult, ...]) -> None:
        super().__init__(error.errno, error.strerror, error.filename)
        self.node_results = node_results


def cut_by(error: OSError, cuts: Iterable[OSError | None]) -> OSError:
    """``error``, where it is one of ``cuts``, the launch's node logs' write errors (NodeLog's:
    the launch was cut short, for LogCut); any other OSError (the console's pipe gone, a bug)
    is raised again as it is, with its own type and traceback."""
    if any(error is cut for cut in cuts):
        return error
    raise error


def cut_ended(cut: OSError) -> RunError:
    """How a launch a node log's write error cut short ended, as LaunchInterrupted.ended says
    it where a stop signal came while its nodes stopped for that cut: the records then say
    both, as for a failed node (runner/errors.py ``interruption``)."""
    why = cut.strerror or "the disk could not hold it"
    return RunError(f"node log {cut.filename} could not be written ({why}); every node was stopped")


def cut_stop(cut: OSError, results: tuple[NodeResult, ...], late: list[int]) -> BaseException:
    """What a launch a node log cut short raises once its nodes are stopped: LogCut (the
    caller says why: runner/record/writefail.py), or LaunchInterrupted saying the cut too where
    a stop signal came while they stopped (``late``, sigint_deferred's)."""
    return LaunchInterrupted(results, cut_ended(cut)) if late else LogCut(cut, results)


def quiet_stop(running: int) -> None:
    """Hear nothing when a stop begins (the records still say the run was interrupted)."""


@dataclass(frozen=True)
class Answer:
    """How a short script ended on one node: its output and exit code, or why it did not run."""

    output: str = ""
    exit_code: int | None = None
    error: str | None = None  # the node could not be reached


class Executor(Protocol):
    on_stopping: StopSink  # called when Ctrl-C, SIGTERM or SIGHUP starts stopping a launch

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]: ...

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None, *, hold: bool = False
    ) -> dict[str, Answer]:
        """Run a short bash script on each named node at once (node name -> script), streaming
        its output to ``on_line`` when given. An unreachable node gets an error instead of an
        exit code; a refused login or an unknown host key raises at once. ``hold``: the next
        launch stages its files through each answering node's session, where the executor has
        sessions (SSH: one fewer to open a node); the others ignore it."""
        ...


def discard(node: str, line: str) -> None:
    """A LineSink that drops output (it is still saved in the node logs)."""
