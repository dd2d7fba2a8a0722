"""The sweep's report, built in a helper process that got its tools ready while the nodes ran.

matplotlib's import, its fonts, the Markdown parser and the report templates cost about half a
second of CPU. Paid after the last launch, that is half a second on every `dtrun bench`; paid
in a thread of dtrun's own, it comes out of the nodes' CPU on the embedded cluster (the
kernel's autogroups share the CPU between sessions, whatever a thread's nice value), which
slows the launch by as much. A helper process in a session of its own, at the lowest priority
(nice 19, and its autogroup's nice 19), takes only the CPU the nodes leave idle.

    builder = ReportBuilder()           # at the start of the sweep
    ...
    report = builder.build(run_dir)     # at the end: the same files as build_report

The helper is a single-worker ``concurrent.futures.ProcessPoolExecutor``. When it cannot start
or fails for any reason, the report is built here instead: it is the same function either way.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from runner.record.rundir import RunDir
from runner.report.build import Report, build_report, warm_up_tools


class ReportBuilder:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        try:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),  # no copy of dtrun's threads
                initializer=_lowest_priority,
            )
            self._pool.submit(_warm_up)  # starts the helper now, and readies its tools
        except Exception:
            self.close()

    def build(self, run_dir: RunDir) -> Report:
        """build_report(run_dir), in the helper when it is there and working."""
        try:
            if self._pool is not None:
                with contextlib.suppress(Exception):  # whatever went wrong there, build it here
                    return self._pool.submit(build_report, run_dir).result()
        finally:
            self.close()
        return build_report(run_dir)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _warm_up() -> None:
    warm_up_tools()
    # What is loaded now stays till the helper exits: keep the collector off it, so the
    # helper's exit does not walk matplotlib's object graph (a tenth of a second).
    gc.freeze()


def _lowest_priority() -> None:
    """The helper's start: out of dtrun's session and to the back of the CPU queue, and gone
    with dtrun however dtrun ends (a SIGKILLed dtrun's helper would otherwise wait for work
    forever: its task queue's pipe is held open by its own copy of the queue)."""
    os.setsid()  # Ctrl-C at the terminal is dtrun's to handle; and an autogroup of its own
    with contextlib.suppress(OSError):  # kernels without autogroups have no such file
        Path("/proc/self/autogroup").write_text("19")
    os.nice(19)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="dtrun-report-parent-watch", daemon=True).start()
