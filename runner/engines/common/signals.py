"""Ctrl-C held back while a block starts or stops nodes, so that a node started is one stopped
(every engine's executor, and the Slurm job dtrun asks for)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ctrl-C waits until the block is done, then arrives as it would have.

    A Python handler, not a signal mask: the kernel may hand SIGINT to any thread that does not
    block it (the log pumps), and Python then runs the handler in the main thread anyway.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, None)  # Python's default raises KeyboardInterrupt
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
