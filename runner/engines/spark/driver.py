"""The Spark driver of one launch: ``python -m runner.engines.spark.driver MASTER LAUNCH_DIR``.

Started by the Spark engine (runner/engines/spark/executor.py) as the one local process of a launch.
It opens a SparkSession on MASTER with the launch's Python on the executors, then lets the Spark
launcher start the ranks, one barrier task per node:

- ``torchdistributor``: ``TorchDistributor(num_processes=W, local_mode=False).run(node_main,
  ...)``, the function form: TorchDistributor's file form reports a failed rank as success
  (docs/spark.md);
- ``horovod-spark``: ``horovod.spark.run(node_main, num_proc=N, nics=[NIC])``.

Each task's ``node_main`` (runner/engines/spark/node.py) runs that node's rendered script. On
SIGTERM, SIGHUP or SIGINT the driver cancels the job and stops the session, then exits 128 +
the signal. A failed job exits 1 with Spark's words; which node failed, its ``.exit`` file says.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runner.engines.spark.node import TAG, node_main
from runner.execute.guard import TAG as LAUNCH_TAG
from runner.spec.text import plural

GROUP = "dtrun-launch"
FAILURE_FILE = "spark-failure.json"  # what failed, as the driver understood it (SparkExecutor)
CONNECT_S = 10.0  # how long a master may take to accept a connection
WAIT_ENV = "DTRUN_SPARK_EXECUTOR_WAIT_S"
DEFAULT_WAIT_S, MIN_WAIT_S, MAX_WAIT_S = 120, 5, 86400
CHECK_EVERY_S = 5  # Spark's barrier slot check, retried this often up to the wait (below)


def executor_wait_s(environ: dict[str, str] | None = None) -> int:
    """How long a launch waits for Spark to give it an executor per node: DTRUN_SPARK_EXECUTOR_
    WAIT_S, default 120; a value out of range is refused before anything runs
    (runner/engines/spark/inventory.py checks it with the other options)."""
    text = (os.environ if environ is None else environ).get(WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_WAIT_S
    if not text.isdigit() or not MIN_WAIT_S <= int(text) <= MAX_WAIT_S:
        raise ValueError(
            f"{WAIT_ENV} is {text!r}, not a whole number of seconds from {MIN_WAIT_S} to "
            f"{MAX_WAIT_S}"
        )
    return int(text)


@dataclass(frozen=True)
class Failure:
    """Why the launch failed, written to spark-failure.json for dtrun (runner/engines/
    spark/executor.py). ``partition``: the node (barrier partition) Spark lost, when it names one;
    ``exit_code``: that node's, as Spark reported it (an executor's exit)."""

    what: str
    why: str = ""
    fix: str = ""
    partition: int | None = None
    exit_code: int | None = None


def write_failure(path: Path, failure: Failure) -> None:
    path.write_text(json.dumps(asdict(failure), indent=2) + "\n")


def report(path: Path, failure: Failure) -> int:
    """Say the failure in one line (no traceback: dtrun shows the message), record it, exit 1."""
    write_failure(path, failure)
    print(f"dtrun-spark: {failure.what}: {failure.why}", file=sys.stderr, flush=True)
    return 1


def master_unreachable(master: str) -> Failure | None:
    """For spark://HOST:PORT[,HOST:PORT]: a Failure when no master accepts a connection within
    CONNECT_S, before Spark retries its registration for about a minute and then reports only
    "Cannot call methods on a stopped SparkContext"."""
    if not master.startswith("spark://"):
        return None
    said = []
    for where in master.removeprefix("spark://").split(","):
        parts = urlsplit(f"spark://{where}")
        host, port = parts.hostname or "", parts.port or 7077
        try:
            with socket.create_connection((host, port), timeout=CONNECT_S):
                return None
        except OSError as error:
            said.append(f"{host}:{port}: {error.strerror or error}")
    return Failure(
        f"cannot connect to the Spark master at {master}",
        why="; ".join(said),
        fix="start the master (spark-class org.apache.spark.deploy.master.Master), or pass "
        "--spark with its host and port (`spark://HOST:7077` by default)",
    )


def spark_said(error: BaseException) -> str:
    """The first line of what Spark (or py4j) said, without Java's stack trace."""
    text = getattr(error, "java_exception", None)
    lines = [line.strip() for line in str(text if text is not None else error).splitlines()]
    lines = [line for line in lines if line and not line.startswith(("at ", "..."))]
    for line in lines:
        if "Exception:" in line or "Error:" in line:
            return line.split(": ", 1)[1] if line.startswith(("org.", "java.")) else line
    return lines[0] if lines else type(error).__name__


# Spark's words for a task it lost: `Lost task 1.0 in stage 0.0 (TID 1) (127.0.0.42 executor
# 1): ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason:
# Command exited with code 137`
_LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage \S+ \(TID \d+\) \(([^)]*)\): (.*)")
_EXECUTOR_EXIT = re.compile(r"exited with code (-?\d+)")


# A barrier stage (TorchDistributor's, horovod.spark's) says instead, as Spark 4 does: `Stage
# failed because barrier task ResultTask(0, 1) finished unsuccessfully` (stage, partition); the
# executor's exit is then only in the driver's log (runner/engines/spark/executor.py reads it).
_BARRIER_TASK = re.compile(r"barrier task ResultTask\(\d+, (\d+)\) finished unsuccessfully")


def task_failure(error: BaseException) -> Failure:
    """The job failed: the partition Spark names, with its reason (an executor lost, and its
    exit code), or Spark's words when it names none."""
    said = spark_said(error)
    text = str(getattr(error, "java_exception", None) or error)
    lost = _LOST_TASK.search(text)
    barrier = _BARRIER_TASK.search(text)
    if lost is None and barrier is not None:
        return Failure(
            f"Spark's barrier task of partition {barrier.group(1)} failed",
            why=said,
            fix="read the node's log and spark-driver.log",
            partition=int(barrier.group(1)),
        )
    if lost is None:
        return Failure("the Spark job failed", why=said, fix="read spark-driver.log")
    reason = lost.group(3).strip()
    code = _EXECUTOR_EXIT.search(reason) if "ExecutorLostFailure" in reason else None
    return Failure(
        f"Spark lost the task of partition {lost.group(1)} on {lost.group(2)}",
        why=reason,
        fix="read the node's log and its executor's (the worker's work directory)",
        partition=int(lost.group(1)),
        exit_code=int(code.group(1)) if code else None,
    )


def registered_executors(spark: Any) -> int:
    """Executors registered with this application now (Spark lists the driver too)."""
    try:
        return max(0, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)
    except Exception:  # the context is stopping: no answer is not a count
        return -1


def _no_slots(error: BaseException) -> bool:
    """Spark's barrier check refused the stage: fewer slots than tasks (SPARK-24819)."""
    return "slots" in str(error) and "barrier" in str(error).lower()


def executor_asks(spark: Any) -> str:
    """What each executor asks of a worker, as this application's configuration says."""
    try:
        conf = spark.sparkContext.getConf()
        memory, cores = conf.get("spark.executor.memory", "1g"), conf.get("spark.executor.cores")
    except Exception:
        return "1g of memory (Spark's default)"
    return f"{memory} of memory" + (f" and {cores} cores" if cores else "")


def no_executors(got: str, asks: str, wait_s: int, error: BaseException) -> Failure:
    return Failure(
        f"Spark gave this launch {got} executors it needs within {wait_s} s, so no task of "
        "it could start",
        why=f"Spark: {spark_said(error)}",
        fix=f"each node is one executor asking for {asks} (spark.executor.memory): start the "
        "workers with at least that much free (a worker's --memory and --cores), or ask for "
        f"smaller executors in $SPARK_CONF_DIR/spark-defaults.conf; {WAIT_ENV} waits longer "
        "for a cluster that is still growing",
    )


def _cancel_on_stop(spark: Any, stop: threading.Event, stopped: list[int]) -> None:
    """Not in the signal handler: the main thread is inside a py4j call then. horovod.spark
    runs its job under a group of its own, so every job of this session is cancelled."""
    stop.wait()
    reason = f"signal {stopped[0]}" if stopped else "no executors"
    print(f"dtrun-spark: stopping: cancelling the job ({reason})", flush=True)
    with contextlib.suppress(Exception):  # the session may be stopping already
        spark.sparkContext.cancelAllJobs()


def _watch_executors(
    spark: Any, needed: int, wait_s: int, stop: threading.Event, starved: list[int]
) -> None:
    """Cancel the launch when Spark has not given it an executor per node within wait_s
    (plus one barrier check, which says Spark's own words first for TorchDistributor)."""
    deadline = time.monotonic() + wait_s + 2 * CHECK_EVERY_S
    while not stop.wait(1.0):
        count = registered_executors(spark)
        if count < 0 or count >= needed:
            return
        if time.monotonic() > deadline:
            starved.append(count)
            stop.set()
            return


def session(master: str, config: dict[str, Any], launch_dir: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = config["python"]  # the executors' Python: this launch's
    executor_env = {
        "PYTHONPATH": config["code_dir"],
        "PYSPARK_PYTHON": config["python"],
    }
    if LAUNCH_TAG in os.environ:  # every process of the launch carries its tag
        executor_env[LAUNCH_TAG] = os.environ[LAUNCH_TAG]
    builder = (
        SparkSession.builder.master(master)
        .appName(f"dtrun {config['run_id']}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", "1")  # a failed rank fails the point, no retry
        .config("spark.stage.maxConsecutiveAttempts", "1")
        # Spark's check that the cluster has a slot per barrier task, retried every 5 s for the
        # executor wait (its default, 40 times every 15 s, let a launch wait 10 minutes)
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", f"{CHECK_EVERY_S}s")
        .config(
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures",
            str(max(1, executor_wait_s() // CHECK_EVERY_S)),
        )
        .config("spark.local.dir", str(Path(launch_dir) / "spark-tmp"))
    )
    for key, value in executor_env.items():
        builder = builder.config(f"spark.executorEnv.{key}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def launch(spark: Any, config: dict[str, Any], launch_dir: str) -> None:
    names, launcher = config["nodes"], config["launcher"]
    spark.sparkContext.setJobGroup(GROUP, f"dtrun {config['run_id']}", interruptOnCancel=True)
    if launcher == "torchdistributor":
        from pyspark.ml.torch.distributor import TorchDistributor

        distributor = TorchDistributor(
            num_processes=config["world_size"], local_mode=False, use_gpu=False
        )
        distributor.run(node_main, launch_dir, names)
    elif launcher == "horovod-spark":
        import horovod.spark

        horovod.spark.run(
            node_main,
            args=(launch_dir, names, config["master_port"]),
            num_proc=len(names),
            start_timeout=config["start_timeout_s"],
            # a local-cluster's executors meet on lo; elsewhere Horovod finds the interfaces
            # every host shares itself (docs/spark.md)
            nics=[config["interface"]] if config["interface"] == "lo" else None,
            use_gloo=True,
            verbose=0,
        )
    else:  # pragma: no cover - the plan only writes the two
        raise ValueError(f"not a Spark launcher: {launcher}")


def main(argv: list[str]) -> int:
    master, launch_dir = argv[0], str(Path(argv[1]).resolve())
    config = json.loads((Path(launch_dir) / "spark.json").read_text())
    failure_file = Path(launch_dir) / FAILURE_FILE
    failure_file.unlink(missing_ok=True)  # an earlier attempt's (--resume)
    stopped: list[int] = []
    stop = threading.Event()

    def on_signal(signum: int, _: object) -> None:
        stopped.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    # py4j logs, with a traceback, every call the stop cuts short: the stop is dtrun's doing
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    unreachable = master_unreachable(master)
    if unreachable is not None:
        return report(failure_file, unreachable)
    print(f"{TAG} -: starting Spark on {master}", flush=True)
    try:
        spark = session(master, config, launch_dir)
    except Exception as exc:  # no Java, a master that never took the application, ...
        if stopped:
            return 128 + stopped[0]
        return report(failure_file, Failure(
            f"Spark did not start on {master}", why=spark_said(exc),
            fix="read spark-driver.log in the launch directory, and check --spark",
        ))  # fmt: skip
    print(
        f"{TAG} -: Spark is up; {config['launcher']} starts {plural(len(config['nodes']), 'task')}",
        flush=True,
    )
    starved: list[int] = []
    wait_s = executor_wait_s()
    threading.Thread(
        target=_cancel_on_stop, args=(spark, stop, stopped), name="dtrun-spark-cancel", daemon=True
    ).start()
    threading.Thread(
        target=_watch_executors, args=(spark, len(config["nodes"]), wait_s, stop, starved),
        name="dtrun-spark-executors", daemon=True,
    ).start()  # fmt: skip
    failure: BaseException | None = None
    try:
        launch(spark, config, launch_dir)  # the main thread: horovod.spark sets signal handlers
    except BaseException as exc:
        failure = exc
    executors, asks = registered_executors(spark), executor_asks(spark)
    with contextlib.suppress(Exception):
        spark.stop()
    if stopped:
        return 128 + stopped[0]
    if failure is None:
        return 0
    if starved or (executors < len(config["nodes"]) and _no_slots(failure)):
        got = f"{max(executors, 0)} of the {len(config['nodes'])}"
        return report(failure_file, no_executors(got, asks, wait_s, failure))
    return report(failure_file, task_failure(failure))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
