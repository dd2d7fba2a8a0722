"""Ctrl-C held back while a block starts or stops nodes, so that a node started is one stopped
(every engine's executor, and the Slurm job dtrun asks for)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_deferred(*, replay: bool = True) -> Iterator[list[int]]:
    """Ctrl-C waits until the block is done, then arrives as it would have; the list it gives
    holds the Ctrl-Cs held back (SIGTERM, SIGHUP and SIGQUIT arrive as one: runner/cli/app.py).

    ``replay=False``, for a block that stops nodes: a Ctrl-C held back is not raised again,
    and the caller, reading the list, raises the stop with how every node ended
    (LaunchInterrupted). A second Ctrl-C while a first one's stop is under way is that stop:
    raised again, it would end dtrun before the records say how each node ended.

    A Python handler, not a signal mask: the kernel may hand SIGINT to any thread that does not
    block it (the log pumps), and Python then runs the handler in the main thread anyway.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and replay:
            if callable(previous):
                previous(signal.SIGINT, None)  # Python's default raises KeyboardInterrupt
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
