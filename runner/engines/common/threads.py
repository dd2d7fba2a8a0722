"""Threads that never hold dtrun open: a stop (Ctrl-C, SIGTERM, SIGHUP) ends dtrun within
seconds even while one of them is stuck (a `Match exec` command of ~/.ssh/config that never
ends, a config `Include` naming a FIFO, a name lookup that never answers).

concurrent.futures.ThreadPoolExecutor joins its threads twice: its shutdown (``with``'s end)
and, at exit, every thread it ever started (Python's own atexit hook); a stuck one kept dtrun
running after the stop had said so, for good. These threads are daemons, and shutdown never
waits for them: whoever needs a call's result waits for its Future, which Ctrl-C interrupts.

That wait wakes every WAKE_S. A stop signal sent to dtrun goes to whichever of its threads the
kernel picks (signal(7)); Python runs its handler in the main thread only, the next time that
thread runs Python code (the signal module's docs). A signal taken by a thread stuck in a
`Match exec` command's waitpid left the main thread asleep in a lock's wait for good: once in
a fresh clone's unit tests (tests/unit/test_stuck_thread_stop.py).
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from dtrun.execute import result_of

T = TypeVar("T")
_Work = tuple[Future[Any], Callable[[], Any]]


class DaemonThreads(ThreadPoolExecutor):
    """At most ``max_workers`` daemon threads, started as work comes; a call still running at
    shutdown or at dtrun's exit is left behind, never waited for. A ThreadPoolExecutor only to
    asyncio, whose set_default_executor takes no other kind: every public method is its own, and
    none of ThreadPoolExecutor's threads is ever started."""

    def __init__(self, max_workers: int = 32, name: str = "dtrun-worker") -> None:
        super().__init__(max_workers=1)  # its bookkeeping, never used
        self._most = max(1, max_workers)
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # threads waiting for work
        self._started = 0
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.put((future, functools.partial(fn, *args, **kwargs)))
            if not self._idle.acquire(blocking=False) and self._started < self._most:
                self._started += 1
                name = f"{self._name}-{self._started}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[T]:
        """Executor.map's results, in order, each waited for by ``result_of``; ``timeout`` and
        ``chunksize`` are not used (no caller gives them)."""
        futures = [self.submit(fn, *args) for args in zip(*iterables, strict=False)]

        def results() -> Iterator[T]:
            try:
                for future in futures:
                    yield result_of(future)
            finally:
                for future in futures:
                    future.cancel()

        return results()

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            future, call = work
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:  # the waiter's to raise
                    future.set_exception(exc)
            del work, future, call  # no reference to a result kept while idle
            self._idle.release()
        self._work.put(None)  # the next idle thread ends too

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more work; ``cancel_futures``: work not started is cancelled. ``wait`` is
        accepted and not honoured: a stuck call must not hold the caller (module docstring)."""
        with self._lock:
            self._shut = True
        if cancel_futures:
            while True:
                try:
                    work = self._work.get_nowait()
                except queue.Empty:
                    break
                if work is not None:
                    work[0].cancel()
        self._work.put(None)
