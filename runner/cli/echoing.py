"""The console's echo of node output, apart from the threads that read the nodes' pipes.

A thread that reads a node's pipe writes the node's log, then hands the line here and goes back
to reading: it never waits on the console. Showing a line costs about 1 us a character
(redaction, runner/redact/), so a program printing over about 1 MB/s was slowed by dtrun, and
dtrun timed its own console, not the program (benchmarks/echo_cost.py). One thread shows the
lines, in order; where the console falls behind by ``BACKLOG`` lines, the newer lines are not
shown and a note says how many, once the console has room again. Each node's log keeps them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable

from dtrun.errors import DtrunError

# Lines waiting for the console, all nodes together: about 0.2 s of showing at 200 characters a
# line, so the end of a command (``drain``) waits little, and memory stays small.
BACKLOG = 1000
# The longest the end of a command waits for the console to show what is waiting (a console
# written to a stopped pager would hold the command for ever).
DRAIN_S = 10.0

Show = Callable[[str, str], None]


def skipped_note(node: str, count: int) -> str:
    """The line shown in place of the lines the console fell too far behind to show."""
    lines = "line" if count == 1 else "lines"
    behind = "not shown (the console fell behind)"
    return f"dtrun: {count:,} {lines} of {node} {behind}: its log keeps them"


class Echo:
    """Lines handed over by any thread, shown by one, in order; ``show(node, line)`` shows one."""

    def __init__(self, backlog: int = BACKLOG) -> None:
        self.backlog = backlog
        self._waiting: collections.deque[tuple[Show, str, str]] = collections.deque()
        self._skipped: dict[str, tuple[Show, int]] = {}
        self._busy = False  # a line is being shown
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None

    def put(self, show: Show, node: str, line: str) -> None:
        """Hand a line over; never waits for the console."""
        with self._ready:
            if len(self._waiting) >= self.backlog:
                count = self._skipped.get(node, (show, 0))[1]
                self._skipped[node] = (show, count + 1)
                return
            self._note(node)  # the lines skipped before this one, where it was shown
            self._waiting.append((show, node, line))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="node echo", daemon=True)
                self._thread.start()
            self._ready.notify_all()

    def _note(self, node: str) -> None:
        skipped = self._skipped.pop(node, None)
        if skipped is not None:
            self._waiting.append((skipped[0], node, skipped_note(node, skipped[1])))

    def drain(self, timeout: float = DRAIN_S) -> bool:
        """Wait until every line handed over is shown (and a note for those that were not);
        False where the console took longer than ``timeout``."""
        with self._ready:
            for node in list(self._skipped):
                self._note(node)
            if self._waiting and self._thread is None:  # never so: put starts it
                return False
            self._ready.notify_all()
            return self._ready.wait_for(lambda: not self._waiting and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._waiting))
                show, node, line = self._waiting.popleft()
                self._busy = True
            try:
                with contextlib.suppress(DtrunError, OSError):  # stdout gone: the command says so
                    show(node, line)
            finally:
                with self._ready:
                    self._busy = False
                    self._ready.notify_all()
