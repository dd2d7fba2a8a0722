"""Work done beside the sweep's first launch: the run's record (manifest.json, plan/) and the
report helper's start begin once the first launch's nodes are starting, so that the nodes do
not wait for them (issue 41: dtrun's fixed cost; docs/bench.md "The run directory")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from dtrun.execute import joined

T = TypeVar("T")


class Beside(Generic[T]):
    """``work()`` in a thread of its own from ``start``; ``join`` waits for its value or raises
    what it raised (and runs it first where nothing started it)."""

    def __init__(self, work: Callable[[], T]) -> None:
        self._work = work
        self._value: T | None = None
        self._error: BaseException | None = None
        self._started = False
        self._thread = threading.Thread(target=self._run, name="dtrun-beside", daemon=True)

    def _run(self) -> None:
        try:
            self._value = self._work()
        except BaseException as exc:  # handed to join, in the thread that waits for it
            self._error = exc

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def join(self) -> T:
        self.start()
        joined(self._thread)  # a stop another thread takes is handled meanwhile
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value] # set: the work returned
