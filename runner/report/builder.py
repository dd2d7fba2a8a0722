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

The helper is a plain Python child (``python -c``, this module's ``serve``) that takes pickled
work over a socket pair (``multiprocessing.connection.Connection``'s messages: a length, then
the pickle), one piece after another, and sends back each result in turn. Not
multiprocessing's ProcessPoolExecutor, as it was: its queues hold named POSIX semaphores
(/dev/shm/sem.mp-*) that only multiprocessing's resource tracker unlinks, and the tracker ran
in dtrun's process group, so a SIGKILL to the group (a job scheduler's stop, ``timeout -s
KILL``) left five names in /dev/shm for good on every such kill. A socket has no name: the
kernel closes it with whichever process ends, and the helper ends at once when dtrun's end
closes, however dtrun ended. When the helper cannot start or fails for any reason, the report
is built here instead: it is the same function either way.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import pickle
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from dtrun.record.rundir import RunDir
    from dtrun.report.build import Report

T = TypeVar("T")
AUTOGROUP = Path("/proc/self/autogroup")  # "/autogroup-<id> nice <n>" (sched(7), "autogroup")
CLOSE_WAIT_S = 10.0  # the most a closing dtrun waits for the helper to finish a report
# The helper's start: dtrun's sys.path (the checkout or wheel this dtrun runs from, not one the
# environment names), then serve. Nothing of dtrun's main script runs again in it.
SERVE = (
    "import sys; sys.path[:] = sys.argv[2:]; "
    "from dtrun.report.builder import serve; serve(int(sys.argv[1]))"
)


class HelperError(Exception):
    """The helper did not answer (it ended, or was closed) or its answer could not travel: the
    work is done here instead."""


class ReportBuilder:
    def __init__(self) -> None:
        self._helper: Helper | None = None
        try:
            self._helper = Helper()
            self._helper.submit(_warm_up)  # readies its tools while the nodes run
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
        from dtrun.execute import result_of

        if self._helper is not None:
            self._helper.full_speed()
            try:
                answer: Future[T] = self._helper.submit(_at_full_speed, work, *args)
                return result_of(answer)  # a stop the answers' thread takes is handled here
            except DtrunError:
                raise
            except Exception:  # the helper broke: the same work, here
                pass
        return work(*args)

    def close(self) -> None:
        if self._helper is not None:
            self._helper.close()
            self._helper = None


class Helper:
    """The helper process, from dtrun's side: ``submit`` sends it work and returns a future,
    which a thread of dtrun's resolves when the helper's answers come back, in order."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()  # both close-on-exec: the nodes inherit neither
        try:
            with theirs:
                self._process = subprocess.Popen(
                    [sys.executable, "-c", SERVE, str(theirs.fileno()), *sys.path],
                    stdin=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,  # Ctrl-C at the terminal is dtrun's; an autogroup
                )
        except BaseException:
            ours.close()
            raise
        self.pid = self._process.pid
        self._socket = ours  # for shutdown; the messages go through a Connection on a dup
        self._link = Connection(os.dup(ours.fileno()))
        self._lock = threading.Lock()  # the sends, and the order of the futures waiting
        self._waiting: collections.deque[Future[Any]] = collections.deque()
        self._gone = False
        self._fast = False  # its autogroup set back to nice 0 (full_speed)
        self._answers = threading.Thread(target=self._answer, name="dtrun-report-helper")
        self._answers.daemon = True
        self._answers.start()

    def full_speed(self) -> None:
        """The helper's autogroup to nice 0 from here, at once, once: a warm-up still under way
        would otherwise finish at nice 19 before the work sent after it (the kernel takes one
        such change every 0.1 s without privilege: not again)."""
        if not self._fast:
            self._fast = True
            _set_autogroup_nice(0, Path(f"/proc/{self.pid}/autogroup"))

    def submit(self, work: Callable[..., T], *args: object) -> Future[T]:
        message = pickle.dumps((work, args), protocol=pickle.HIGHEST_PROTOCOL)
        future: Future[T] = Future()
        with self._lock:
            if self._gone:
                raise HelperError("the report helper has ended")
            self._waiting.append(future)
            self._link.send_bytes(message)  # OSError: it ended
        return future

    def _answer(self) -> None:
        """Each answer to the future that waits longest; every one left fails at the end."""
        with contextlib.suppress(EOFError, OSError):
            while True:
                answer = self._link.recv_bytes()
                with self._lock:
                    future = self._waiting.popleft()
                try:
                    done, value = pickle.loads(answer)
                except Exception as exc:  # a result that cannot be rebuilt here
                    done, value = False, exc
                if done:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        with self._lock:
            self._gone = True
            waiting, self._waiting = self._waiting, collections.deque()
        for future in waiting:
            future.set_exception(HelperError("the report helper ended before it answered"))

    def close(self) -> None:
        """The helper gone and reaped. Closing the socket ends it at once when it is idle or
        warming up (``serve``); a report it is writing it finishes first, so that no
        temporary file is left in the run directory, and it is killed after CLOSE_WAIT_S."""
        self.full_speed()  # its ending, or the report it finishes, not held back at nice 19
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # the answers' thread ends at once
        try:
            self._process.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._answers.join()
        self._link.close()
        self._socket.close()


def serve(fd: int) -> None:
    """The helper's life: at the lowest priority, each piece of work dtrun sends, in turn, and
    its result (or the exception it raised) sent back. It ends when dtrun's end of the socket
    closes, however dtrun ended (a thread reads the socket all along): at once when it is idle
    or warming up; after the work under way otherwise, which may be writing the report's files
    (write_atomic's temporary file, killed mid-write, would stay in the run directory)."""
    link = Connection(fd)
    _set_autogroup_nice(19)  # its own session: its own autogroup
    os.nice(19)  # alone in its autogroup, this only ranks it where autogroups are off
    work: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    state = threading.Lock()  # ``writing`` and ``ended``, between the two threads
    writing = ended = False

    def leave() -> NoReturn:
        # Without tearing down the interpreter (matplotlib's modules and objects: 20 ms); the
        # helper has nothing to flush: it prints nothing, and its answers went out as made.
        os._exit(0)

    def read() -> None:
        nonlocal ended
        with contextlib.suppress(EOFError, OSError):
            while True:
                work.put(link.recv_bytes())
        with state:
            ended = True
            if not writing:
                leave()

    threading.Thread(target=read, name="dtrun-report-work", daemon=True).start()
    while True:
        message = work.get()
        try:
            function, args = pickle.loads(message)
            with state:
                if ended:
                    leave()
                writing = function is not _warm_up
            answer = pickle.dumps((True, function(*args)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:
            answer = _failure(exc)
        with state:
            writing = False
            if ended:
                leave()
        try:
            link.send_bytes(answer)
        except OSError:  # dtrun ended
            leave()


def _failure(exc: BaseException) -> bytes:
    """The exception as dtrun can rebuild it; one that cannot travel, named in another (by its
    type where it cannot say itself either: the helper answers, and prints no traceback)."""
    try:
        return pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        try:
            named = repr(exc)
        except Exception:
            named = type(exc).__qualname__
        return pickle.dumps((False, HelperError(f"the report helper failed: {named}")))


def _warm_up() -> None:
    from dtrun.report.build import warm_up_tools

    warm_up_tools()
    # What is loaded now stays till the helper exits: keep the collector off it, so the
    # helper's exit does not walk matplotlib's object graph (a tenth of a second).
    gc.freeze()


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
