"""The Spark driver of a sweep: ``python -m dtrun.engines.spark.driver MASTER APP_DIR
[RUN_ID CODE_DIR]``.

Started by the Spark engine (runner/engines/spark/app.py) on this machine when the cluster
opens, and kept until the sweep ends, as the Slurm engine keeps one allocation: the Spark
application (its SparkSession, and under local-cluster the master, workers and executor JVMs)
starts once, at once when given RUN_ID and CODE_DIR (while dtrun plans the sweep), else at the
first launch, and every launch of the sweep is one barrier stage on it. It reads commands on
stdin, one a line:

- ``launch DIR``: run the launch whose files are in DIR (spark.json, node-R.sh), then print
  ``dtrun-spark-done CODE``: 0 done; 1 failed, and DIR/spark-failure.json says why (which node
  failed, each node's ``.exit`` file says); 128 + N stopped by signal N;
- ``cancel``: cancel the launch running now (dtrun's --timeout);
- end of file: cancel what runs, stop the session and exit 0.

A launch runs TorchDistributor, torchrun on each task running ``node_main`` (runner/engines/
spark/distributor.py), or ``horovod.spark.run(node_main, num_proc=N, nics=[NIC])``; each task's
``node_main`` (runner/engines/spark/node.py) runs that node's rendered script. A failed launch
fails its job, not the application: the next launch runs on the same executors (a lost executor
is replaced by Spark's master). If Spark did not start, the driver says why and exits after that
launch; dtrun starts a new one for the next. On SIGTERM, SIGHUP or SIGINT it cancels the job,
stops the session and exits 128 + the signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import queue
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from dtrun.engines.spark.cds import RECORD_WAIT_S, Archives, archives
from dtrun.engines.spark.failures import (
    FAILURE_FILE,
    Failure,
    executor_wait_s,
    master_unreachable,
    no_executors,
    no_slots,
    report,
    spark_said,
    task_failure,
)
from dtrun.engines.spark.node import TAG, Relay, node_main
from dtrun.engines.spark.session import (
    CHECK_EVERY_S,
    LIGHT_JVM,
    await_executors,
    executors_exit,
    jvm_exited,
    local_executors,
    local_home,
    registered_executors,
    session,
)
from dtrun.spec.text import plural

GROUP = "dtrun-launch"
KEPT_WORK = "spark-work"  # where they are kept: in the launch that started the application
DONE = "dtrun-spark-done"  # then the launch's code: the line that ends each launch's output


def tasks_running(spark: Any) -> int:
    """The most tasks one stage of this application runs at once now: a launch's barrier stage
    runs all of its tasks together, several on one executor where it has the cores (a standalone
    worker's executor takes every core of the worker by default)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        stages = (tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds())
        return max((info.numActiveTasks for info in stages if info is not None), default=0)
    except Exception:  # the context is stopping: no answer is not a count
        return 0


def executor_asks(spark: Any) -> str:
    """What each executor asks of a worker, as this application's configuration says."""
    try:
        conf = spark.sparkContext.getConf()
        memory, cores = conf.get("spark.executor.memory", "1g"), conf.get("spark.executor.cores")
    except Exception:
        return "1g of memory (Spark's default)"
    return f"{memory} of memory" + (f" and {cores} cores" if cores else "")


def keep_work(work: Path | None, launch_dir: str) -> None:
    """The local-cluster's work directory (its executors' logs), into the directory of the
    launch that started the application, as spark-work/."""
    kept = Path(launch_dir) / KEPT_WORK
    if work is None or not launch_dir or not work.is_dir():  # no launch ran: nowhere to keep
        return
    if kept.is_symlink():  # a link is not followed
        return
    with contextlib.suppress(OSError):  # a full disk loses the executors' logs, not the sweep
        kept.mkdir(exist_ok=True)
        for app in work.iterdir():  # app-ID/EXECUTOR/{stdout,stderr}
            if not (kept / app.name).exists():
                shutil.move(str(app), str(kept / app.name))


def launch(spark: Any, config: dict[str, Any], launch_dir: str, here: bool) -> None:
    """One launch's barrier stage; ``here``: every executor runs on this machine
    (local-cluster), so TorchDistributor's MASTER_PORT is a port free here (distributor.py)."""
    names, launcher = config["nodes"], config["launcher"]
    spark.sparkContext.setJobGroup(GROUP, f"dtrun {config['run_id']}", interruptOnCancel=True)
    if launcher == "torchdistributor":
        from dtrun.engines.spark.distributor import NodeDistributor, free_port

        port = free_port() if here else None
        NodeDistributor(config["world_size"], port).run_nodes(launch_dir, names)
    elif launcher == "horovod-spark":
        import horovod.spark

        with Relay.of_driver(spark.sparkContext.getConf(), sys.stdout) as relay:
            horovod.spark.run(
                node_main,
                args=(launch_dir, names, config["master_port"], relay.address),
                num_proc=len(names),
                start_timeout=config["start_timeout_s"],
                # local-cluster: lo; else the interfaces all hosts share (docs/spark.md)
                nics=[config["interface"]] if config["interface"] == "lo" else None,
                use_gloo=True, verbose=0,
            )  # fmt: skip
    else:  # pragma: no cover - the plan only writes the two
        raise ValueError(f"not a Spark launcher: {launcher}")


class Driver:
    """The sweep's Spark application and the launches dtrun sends it (module docstring)."""

    def __init__(self, master: str, app_dir: Path, app: dict[str, Any] | None = None) -> None:
        self.master, self.app_dir = master, app_dir
        self.app = app  # run_id, python, code_dir: start at once, before the first launch
        self.spark: Any = None
        self.begun = False
        self.failed: Failure | None = None
        self.started = time.monotonic()
        self.launches = 0  # launches begun; the one running now, if any, is this one
        self.running: int | None = None
        self.stopped: list[int] = []
        self.commands: queue.Queue[str | None] = queue.Queue()
        self.cancels: queue.Queue[tuple[int | None, str]] = queue.Queue()
        self.work: Path | None = None  # a local-cluster's work directory (own_spark_home)
        self.first_launch = ""  # the directory of the launch that started the application
        self.archives: Archives | None = None  # a local-cluster's class data (cds.py)

    def on_signal(self, signum: int, _: object) -> None:
        self.stopped.append(signum)
        self.commands.put(None)
        self.cancels.put((None, f"signal {signum}"))

    def read_commands(self, commands: TextIO) -> None:
        for line in commands:
            word, _, rest = line.strip().partition(" ")
            if word == "launch":
                self.commands.put(rest)
            elif word == "cancel":
                self.cancels.put((self.running, "dtrun asked"))
        self.commands.put(None)  # dtrun is done with the application, or gone
        self.cancels.put((None, "dtrun closed the application"))

    def cancel_jobs(self) -> None:
        """Not in the signal handler: the main thread is inside a py4j call then. horovod.spark
        runs its job under a group of its own, so every job of this session is cancelled;
        ``launch`` None cancels whatever runs, a number only that launch."""
        while True:
            launch, reason = self.cancels.get()
            if self.spark is None or (launch is not None and launch != self.running):
                continue
            print(f"dtrun-spark: stopping: cancelling the job ({reason})", flush=True)
            with contextlib.suppress(Exception):  # the session may be stopping already
                self.spark.sparkContext.cancelAllJobs()

    def watch_executors(self, number: int, needed: int, wait_s: int, starved: list[int]) -> None:
        """Cancel launch ``number`` when Spark has not given it an executor per node, nor started
        its ``needed`` tasks on fewer, within wait_s (plus one barrier check, which says Spark's
        own words first for TorchDistributor)."""
        deadline = time.monotonic() + wait_s + 2 * CHECK_EVERY_S
        while self.running == number:
            count = registered_executors(self.spark)
            if count < 0 or count >= needed or tasks_running(self.spark) >= needed:
                return
            if time.monotonic() > deadline:
                starved.append(count)
                self.cancels.put((number, "no executors"))
                return
            time.sleep(1.0)

    def start(self, config: dict[str, Any]) -> None:
        """Start the application: ``spark`` when it is up, else ``failed`` says why (nothing
        when it was stopped). A local-cluster's executors are waited for: they register after
        the session starts, and a barrier stage without them would wait a whole slot check."""
        self.begun = True
        self.failed = master_unreachable(self.master)
        if self.failed is not None:
            return
        print(f"{TAG} -: starting Spark on {self.master}", flush=True)
        if local_executors(self.master):
            self.archives, self.work = local_home(archives(LIGHT_JVM), self.app_dir)
        try:
            self.spark = session(self.master, config, self.app_dir, self.archives)
        except Exception as exc:  # no Java, a master that never took the application, ...
            self.spark = None
            self.failed = Failure(
                f"Spark did not start on {self.master}", why=spark_said(exc),
                fix="read spark-driver.log in the launch directory, and check --spark",
            )  # fmt: skip
            return
        if count := local_executors(self.master):
            await_executors(self.spark, count, executor_wait_s())
        up = time.monotonic() - self.started
        print(f"{TAG} -: Spark is up in {up:.1f} s, for the whole sweep", flush=True)

    def ends_at_once(self) -> bool:
        """Whether the application may end at once after its last launch (``end_at_once``),
        not by Spark's stop (1.0 s here, and the JVM's exit 0.4 s more, 2026-12-04): on a
        local-cluster, all of whose processes are this driver's, unless it records class data,
        which needs the JVMs' own exit (cds.py)."""
        recording = self.archives is not None and self.archives.recording is not None
        return bool(local_executors(self.master)) and not recording

    def not_started(self, failure_file: Path) -> int:
        """The code of a launch the application did not start for."""
        if self.failed is not None:
            return report(failure_file, self.failed)
        return 128 + (self.stopped or [signal.SIGTERM])[0]

    def run(self, launch_dir: str) -> int:
        """One launch on the application; its code (module docstring)."""
        config = json.loads((Path(launch_dir) / "spark.json").read_text())
        failure_file = Path(launch_dir) / FAILURE_FILE
        failure_file.unlink(missing_ok=True)  # an earlier attempt's (--resume)
        self.first_launch = self.first_launch or launch_dir  # where a local-cluster's logs go
        if self.spark is None:
            if not self.begun:
                self.start(config)
            if self.spark is None:
                return self.not_started(failure_file)
        self.launches += 1
        number, nodes = self.launches, len(config["nodes"])
        print(
            f"{TAG} -: launch {number} on Spark application "
            f"{self.spark.sparkContext.applicationId}: "
            f"{config['launcher']} starts {plural(nodes, 'task')}",
            flush=True,
        )
        starved: list[int] = []
        wait_s = executor_wait_s()
        self.running = number
        threading.Thread(
            target=self.watch_executors, args=(number, nodes, wait_s, starved),
            name="dtrun-spark-executors", daemon=True,
        ).start()  # fmt: skip
        failure: BaseException | None = None
        try:
            # the main thread: horovod.spark sets signal handlers
            launch(self.spark, config, launch_dir, local_executors(self.master) > 0)
        except BaseException as exc:
            failure = exc
        finally:
            self.running = None
            self.listen()  # horovod.spark's handlers are not the driver's
        if failure is not None:  # every task of the failed stage ends, before the next launch
            with contextlib.suppress(Exception):
                self.spark.sparkContext.cancelAllJobs()
        if self.stopped:
            return 128 + self.stopped[0]
        if failure is None:
            return 0
        executors = registered_executors(self.spark)
        if starved or (executors < nodes and no_slots(failure)):
            got = f"{max(executors, 0)} of the {nodes}"
            return report(failure_file, no_executors(got, executor_asks(self.spark), wait_s,
                                                     failure))  # fmt: skip
        return report(failure_file, task_failure(failure))

    def listen(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self.on_signal)

    def serve(self) -> int:
        self.listen()
        commands = take_stdin()
        threading.Thread(target=self.read_commands, args=(commands,),
                         name="dtrun-spark-read_commands", daemon=True).start()  # fmt: skip
        threading.Thread(target=self.cancel_jobs, name="dtrun-spark-cancel_jobs",
                         daemon=True).start()  # fmt: skip
        if self.app is not None:  # while dtrun plans the sweep (runner/engines/spark/app.py)
            self.start(self.app)
        while not self.stopped:
            try:
                launch_dir = self.commands.get(timeout=0.5)
            except queue.Empty:
                continue
            if launch_dir is None:
                break
            code = self.run(launch_dir)
            print(f"{DONE} {code}", flush=True)
            if self.spark is None:  # it did not start: a new driver tries again
                break
        if self.spark is not None and not self.stopped and self.ends_at_once():
            keep_work(self.work, self.first_launch)
            end_at_once()
        if self.spark is not None:
            kept, stopped = self.archives, lambda: bool(self.stopped)
            until = time.monotonic() + RECORD_WAIT_S  # every JVM's archive is written as it exits
            if kept and kept.recording:  # the executors' first, ended by Spark's stop otherwise
                executors_exit(self.spark, RECORD_WAIT_S, stopped)
            with contextlib.suppress(Exception):
                self.spark.stop()
            # then the driver's; a signal ends the waits, and nothing is kept
            if kept and kept.recording and jvm_exited(until - time.monotonic(), stopped):
                kept.adopt()
        keep_work(self.work, self.first_launch)
        return 128 + self.stopped[0] if self.stopped else 0


def end_at_once(wait_s: float = 5.0) -> None:
    """End the application's processes at once and leave (it never returns): every process
    under this one (its JVM, the local-cluster's executors, their Python workers) SIGKILLed and
    reaped here. This process is made their child subreaper first, so that the ones orphaned
    by the kill come to it to be reaped, not to PID 1 (which in a container may never reap
    them). What is left after ``wait_s`` is dtrun's sweep of the tag's (app.py)."""
    import psutil

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    me = psutil.Process()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        try:
            if not me.children():
                break
        except psutil.Error:
            break
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def take_stdin() -> TextIO:
    """dtrun's command pipe, as a copy of stdin that no child inherits; stdin becomes
    /dev/null. Read from sys.stdin, a fork while the reading thread waits (horovod.spark checks
    its extensions in a multiprocessing child) copies the reader's lock held, and the child's
    own close of sys.stdin (multiprocessing's ``_close_stdin``) waits on it forever: the first
    horovod-spark launch on a kept application hung so."""
    commands = os.fdopen(os.dup(sys.stdin.fileno()), encoding="utf-8")  # os.dup: not inherited
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, sys.stdin.fileno())
    os.close(null)
    sys.stdin = Path(os.devnull).open(encoding="utf-8")  # noqa: SIM115 - the process's own stdin
    return commands


def main(argv: list[str]) -> int:
    master, app_dir = argv[0], Path(argv[1]).resolve()
    app = None
    if len(argv) == 4:  # MASTER APP_DIR RUN_ID CODE_DIR: start Spark now
        app = {"run_id": argv[2], "python": sys.executable, "code_dir": argv[3]}
    # py4j logs, with a traceback, every call the stop cuts short: the stop is dtrun's doing
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    return Driver(master, app_dir, app).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
