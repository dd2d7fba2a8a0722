"""The sweep's Spark application, from dtrun's side: one driver process for every launch.

Starting a Spark application costs about 20 s on the development machine (a local-cluster's
master, workers and executor JVMs; a real cluster's executors); a sweep runs many launches. So,
as the Slurm engine keeps one allocation, the Spark engine starts the driver
(runner/engines/spark/driver.py, through ``spark-driver.sh``) when the cluster opens, which
starts Spark while dtrun plans the sweep, and keeps it until the engine closes: each launch is
one ``launch DIR`` line on the driver's stdin and ends with its ``dtrun-spark-done CODE`` line;
the driver's output in between is that launch's (``spark-driver.log`` in its directory, and the
console), and what it said before the first launch is that launch's too. A driver that ended
(Spark did not start) is started again at the next launch.

Stops: the driver runs in a session of its own, every process of the application carries its
tag (DTRUN_LAUNCH, passed to the executors as spark.executorEnv), and a guard
(runner/execute/guard.py) stops them all by that tag if dtrun is killed outright. ``close``
ends the application: end of file on the driver's stdin (it cancels what runs and stops
Spark), SIGTERM to its process group after ``end_wait_s`` and SIGKILL after ``grace_s`` more,
then every process left with its tag.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dtrun.engines.spark.driver import DONE
from dtrun.execute.guard import TAG, drop_guard, start_guard, stop_script
from dtrun.workloads.files import NodeLog, write_atomic

DRIVER_SCRIPT = "spark-driver.sh"
DRIVER_LOG = "spark-driver.log"
CANCEL_WAIT_S = 60.0  # how long a cancelled launch may take to end before the app is stopped
CANCEL_AGAIN_S = 1.0  # how often a launch cut short (a full disk) is cancelled until it ends
# how long a failed launch waits for Spark to say it lost an executor: the driver hears an
# executor's connection drop at once, and a job failed by that loss can end first (3 s: the
# wait on a failure whose other nodes Spark stopped, which writes no exit)
SETTLE_S = 3.0

Sink = Callable[[str], None]


class AppTimeout(Exception):
    """The launch ran past its time; it was cancelled (or, failing that, the app stopped)."""


class SparkApp:
    """The driver process of one sweep (module docstring); ``script`` renders its
    spark-driver.sh for a tag."""

    def __init__(
        self,
        script: Callable[[str], str],
        *,
        grace_s: float = 15.0,
        cancel_wait_s: float = CANCEL_WAIT_S,
        end_wait_s: float | None = None,
    ) -> None:
        self.script, self.grace_s, self.cancel_wait_s = script, grace_s, cancel_wait_s
        # how long ``close`` waits for the driver to end on its own before SIGTERM: grace_s
        # unless given (a driver writing its JVM's class data takes longer, driver.py)
        self.end_wait_s = grace_s if end_wait_s is None else end_wait_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.guard: subprocess.Popen[bytes] | None = None
        self.tag = ""
        self.dir: Path | None = None
        self.sink: Sink | None = None
        self.done: queue.Queue[int | None] = queue.Queue()
        self.pump: threading.Thread | None = None
        self.starts = 0  # applications started: one for a sweep whose Spark stayed up
        self.said: list[str] = []  # the driver's lines while no launch runs: the next one's
        self.lines = threading.Lock()
        self.cut: OSError | None = None  # a log of the launch the disk could not hold
        self.sent = False  # the launch under way was sent to the driver

    @property
    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(
        self,
        workdir: Path,
        on_line: Sink,
        timeout_s: float,
        *,
        settled: Callable[[], bool] | None = None,
    ) -> int | None:
        """Run the launch in ``workdir`` on the application, starting it if it is not up: the
        driver's code for it (0 done, 1 failed, 128+N stopped), None if the driver ended
        without one. AppTimeout past ``timeout_s``; the OSError of a log the disk could not
        hold (``cut_short``), once the launch it cancelled has ended. A failed launch keeps
        the driver's lines coming to its log until ``settled()`` or SETTLE_S: Spark may say
        it lost an executor after the job failed from that loss
        (runner/engines/spark/executor.py)."""
        self.start()
        assert self.proc is not None and self.proc.stdin is not None
        write_atomic(workdir / DRIVER_SCRIPT, self.script(self.tag).encode(), 0o700)
        self.cut, self.sent = None, False
        with NodeLog(workdir / DRIVER_LOG, on_error=self.cut_short) as log:

            def sink(line: str) -> None:
                log.write(f"{line}\n".encode())
                on_line(line)

            with self.lines:
                for line in self.said:
                    sink(line)
                self.said.clear()
                self.sink = sink
            try:
                if self.cut is not None:  # before the launch was sent: it does not start
                    raise self.cut
                self._send(f"launch {workdir}")
                self.sent = True
                try:
                    code = self._ended(timeout_s)
                except queue.Empty:
                    pass
                else:
                    if self.cut is not None:  # stopped for it: no failure of its own to settle
                        raise self.cut
                    if code not in (0, None) and settled is not None:
                        deadline = time.monotonic() + SETTLE_S
                        while not settled() and self._talking() and time.monotonic() < deadline:
                            time.sleep(0.05)
                    return code
                self._send("cancel")
                try:
                    self.done.get(timeout=self.cancel_wait_s)
                except queue.Empty:
                    self.close()
                raise AppTimeout
            finally:
                with self.lines:
                    self.sink = None

    def _ended(self, timeout_s: float) -> int | None:
        """The driver's code for the launch sent; queue.Empty past ``timeout_s``. A launch cut
        short is cancelled again every CANCEL_AGAIN_S until it ends: the driver drops a cancel
        that comes before its launch's job has started (nothing to cancel yet)."""
        deadline = time.monotonic() + timeout_s  # no --timeout: math.inf
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise queue.Empty
            try:
                return self.done.get(timeout=min(left, CANCEL_AGAIN_S))
            except queue.Empty:
                if self.cut is not None:
                    self._send("cancel")

    def cut_short(self, error: OSError) -> None:
        """A log of the launch under way the disk cannot hold (NodeLog: the driver's here, a
        node's on its executor): the launch is cancelled, as a failed node's job ends, and
        ``launch`` raises the first such error once the driver says the launch ended, a node's
        over the driver's: the driver's log holds the nodes' lines too, and may fill with
        those already on their way when a node's log stopped and said so."""
        first = self.cut is None
        if first or Path(self.cut.filename or "").name == DRIVER_LOG:  # type: ignore[union-attr]
            self.cut = error
            if first and self.sent:
                self._send("cancel")

    def start(self) -> None:
        """Start the driver, unless it is up."""
        if not self.up:
            self.close()
            self._start()

    def close(self) -> None:
        """End the application (module docstring) and remove its directory; nothing if none
        runs. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the driver cancels what runs and stops Spark
        try:
            proc.wait(timeout=self.end_wait_s)
        except subprocess.TimeoutExpired:
            self._signal(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
        self._sweep()
        if self.pump is not None:
            self.pump.join(timeout=5)
        if self.guard is not None:
            drop_guard(self.guard)
            self.guard = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def stop(self) -> None:
        """Stop at once (Ctrl-C, SIGTERM): the driver hears SIGTERM, cancels the job and stops
        Spark; then as ``close``."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal(self.proc, signal.SIGTERM)
        self.close()

    def _start(self) -> None:
        self.tag = secrets.token_hex(8)
        self.dir = Path(tempfile.mkdtemp(prefix="dtrun-spark-"))
        write_atomic(self.dir / DRIVER_SCRIPT, self.script(self.tag).encode(), 0o700)
        # dtrun SIGKILLed: its processes stopped, then the directory (Spark's home copy, 2 MB)
        # removed, as ``close`` would
        stop = f"{stop_script(self.tag, self.grace_s)}\nrm -rf -- {shlex.quote(str(self.dir))}\n"
        self.guard = start_guard(["bash", "-c", stop])
        self.done = queue.Queue()
        self.said = []
        self.proc = subprocess.Popen(
            ["bash", DRIVER_SCRIPT, str(self.dir)],
            cwd=self.dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Ctrl-C reaches dtrun, not Spark
            env={**os.environ, TAG: self.tag},
        )
        self.starts += 1
        self.pump = threading.Thread(
            target=self._pump, args=(self.proc, self.done), name="dtrun-spark-driver", daemon=True
        )
        self.pump.start()

    def _pump(self, proc: subprocess.Popen[bytes], done: queue.Queue[int | None]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode(errors="replace").rstrip("\r\n")
                head, _, code = line.partition(" ")
                if head == DONE and code.lstrip("-").isdigit():
                    done.put(int(code))
                    continue
                with self.lines:
                    if self.sink is not None:
                        self.sink(line)
                    else:
                        self.said.append(line)
        done.put(None)  # the driver ended: no launch of it ends any more

    def _talking(self) -> bool:
        """Whether more of the driver's lines may come: its output is still read (a driver
        whose Spark did not start, e.g. a silent master, ends after its launch)."""
        return self.pump is not None and self.pump.is_alive()

    def _send(self, command: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(OSError):  # a driver that ended says so through ``done``
            self.proc.stdin.write(f"{command}\n".encode())
            self.proc.stdin.flush()

    def _signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def _sweep(self) -> None:
        """Every process still carrying the application's tag on this machine: stopped."""
        subprocess.run(
            ["bash", "-c", stop_script(self.tag, self.grace_s)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
