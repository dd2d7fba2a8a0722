"""The sweep's report, built in a helper process that got its tools ready while the nodes ran.

matplotlib's import, its fonts, the Markdown parser and the report templates cost about half a
second of CPU. Paid after the last launch, that is half a second on every `dtrun bench`; paid
in a thread of dtrun's own, it comes out of the nodes' CPU on the embedded cluster (the
kernel's autogroups share the CPU between sessions, whatever a thread's nice value), which
slows the launch by as much. A helper process in a session of its own, at the lowest priority
(nice 19, and its autogroup's nice 19), takes only the CPU the nodes leave idle. Once the nodes
are done dtrun waits for the report, so the helper builds it at full speed: it sets its
autogroup's nice back to 0 first (which needs no privilege). Left at 19, a helper on a machine
busy with other work got about 1.5% of a core, and a 0.2 s report took 11 s (issue 29).

    builder = ReportBuilder()           # at the start of the sweep
    ...
    report = builder.build(run_dir)     # at the end: the same files as build_report
    # or: the figures first (the summary printed), the files after
    report = builder.analyse(run_dir)
    builder.write(report)

When dtrun waits for the helper it first sets the helper's autogroup back to nice 0 itself: a
helper still readying its tools at nice 19 on a machine busy with other work would otherwise
finish that first at 1.5% of a core (83 s before a report, under a load average of 65).

The helper is a single-worker ``concurrent.futures.ProcessPoolExecutor``. When it cannot start
or fails for any reason, the report is built here instead: it is the same function either way.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from dtrun.record.rundir import RunDir
    from dtrun.report.build import Report

T = TypeVar("T")
AUTOGROUP = Path("/proc/self/autogroup")  # "/autogroup-<id> nice <n>" (sched(7), "autogroup")


class ReportBuilder:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        try:
            with _hangup_blocked():
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),  # no copy of dtrun's threads
                    initializer=_lowest_priority,
                )
            with _main_left_out():
                self._pool.submit(_warm_up)  # starts the helper now, and readies its tools
        except Exception:
            self.close()

    def build(self, run_dir: RunDir) -> Report:
        """build_report(run_dir), in the helper when it is there and working."""
        from dtrun.report.build import build_report

        try:
            return self.call(build_report, run_dir)
        finally:
            self.close()

    def analyse(self, run_dir: RunDir) -> Report:
        """analyse(run_dir): every figure, nothing written; ``write`` writes the files."""
        from dtrun.report.build import analyse

        try:
            return self.call(analyse, run_dir)
        except BaseException:
            self.close()
            raise

    def write(self, report: Report) -> None:
        """write_report(report): the analysed report's files, in the helper when it works."""
        from dtrun.report.build import write_report

        try:
            self.call(write_report, report)
        finally:
            self.close()

    def call(self, work: Callable[..., T], *args: object) -> T:
        """``work(*args)`` in the helper at full speed, or here where the helper is not working
        (whatever else went wrong there). An error dtrun explains (a full disk) is the work's
        own: raised as it is, not tried again here, where it would name another file."""
        from dtrun.errors import DtrunError

        if self._pool is not None:
            self._full_speed()
            try:
                return self._pool.submit(_at_full_speed, work, *args).result()
            except DtrunError:
                raise
            except Exception:  # the helper broke: the same work, here
                pass
        return work(*args)

    def _full_speed(self) -> None:
        """The helper's autogroup to nice 0 from here, at once: a warm-up still under way
        (queued before ``work``) would otherwise finish at nice 19 first."""
        pids = getattr(self._pool, "_processes", None) or {}  # the pool's worker, by pid
        for pid in list(pids):
            _set_autogroup_nice(0, Path(f"/proc/{pid}/autogroup"))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


@contextlib.contextmanager
def _hangup_blocked() -> Iterator[None]:
    """SIGHUP blocked in this thread while the pool makes its queues: their semaphores start
    multiprocessing's resource tracker, in dtrun's process group, and it keeps this thread's
    mask (it unblocks only SIGINT and SIGTERM, which it ignores). A SIGHUP to the group (a
    closed terminal) ended it, and dtrun's cleanup then printed a KeyError traceback from the
    tracker it started again for every semaphore. dtrun's other threads still take SIGHUP."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextlib.contextmanager
def _main_left_out() -> Iterator[None]:
    """The helper starts without running dtrun's main script again.

    multiprocessing's spawn runs the parent's ``__main__`` file in the child (as ``__mp_main__``,
    for functions defined there) before the child's own work: for the ``dtrun`` console script,
    ``dtrun.cli.app`` and every command's options, 0.1-0.2 s of CPU at full priority in dtrun's
    session while the nodes start (their torchrun took 0.1-0.2 s longer to start its ranks).
    The helper's work is in this module; it needs nothing of the main script. A ``__main__``
    without ``__file__`` is not run again (``multiprocessing.spawn.get_preparation_data``,
    read in the parent as the pool starts its worker, inside ``submit``)."""
    main = sys.modules.get("__main__")
    path = main.__dict__.pop("__file__", None) if main is not None else None
    try:
        yield
    finally:
        if main is not None and path is not None:
            main.__file__ = path


def _warm_up() -> None:
    from dtrun.report.build import warm_up_tools

    warm_up_tools()
    # What is loaded now stays till the helper exits: keep the collector off it, so the
    # helper's exit does not walk matplotlib's object graph (a tenth of a second).
    gc.freeze()


def _lowest_priority() -> None:
    """The helper's start: out of dtrun's session and to the back of the CPU queue, and gone
    with dtrun however dtrun ends (a SIGKILLed dtrun's helper would otherwise wait for work
    forever: its task queue's pipe is held open by its own copy of the queue)."""
    os.setsid()  # Ctrl-C at the terminal is dtrun's to handle; and an autogroup of its own
    _set_autogroup_nice(19)
    os.nice(19)  # alone in its autogroup, this only ranks it where autogroups are off
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="dtrun-report-parent-watch", daemon=True).start()
    # Its work done, the helper leaves without tearing down the interpreter (matplotlib's
    # modules and objects: 20 ms that dtrun waits for in ReportBuilder.close). The pool's
    # results travel over a pipe written before this runs; the helper prints nothing.
    atexit.register(os._exit, 0)


def _at_full_speed(work: Callable[..., T], *args: object) -> T:
    """dtrun is waiting for this: the helper's autogroup back to nice 0 first. Where there are
    no autogroups the helper stays at nice 19 (an unprivileged process cannot raise its own
    priority), as before."""
    if autogroup_nice() != 0:  # dtrun set it already, most often: no second change to wait for
        _set_autogroup_nice(0)
    return work(*args)


def _set_autogroup_nice(nice: int, autogroup: Path = AUTOGROUP) -> bool:
    """This session's autogroup (or ``autogroup``, a process of this user's) to ``nice`` (0 to
    19 needs no privilege); False where the kernel has none. Without CAP_SYS_ADMIN the kernel
    takes one such change every 0.1 s from the whole machine and answers EAGAIN in between: try
    again."""
    for _ in range(5):
        try:
            autogroup.write_text(str(nice))
        except BlockingIOError:
            time.sleep(0.1)
        except OSError:  # a kernel without autogroups has no such file
            return False
        else:
            return True
    return False


def autogroup_nice() -> int | None:
    """The nice value of this process's autogroup; None where the kernel has none."""
    try:
        return int(AUTOGROUP.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
