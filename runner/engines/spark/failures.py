"""Why a Spark launch failed, in words dtrun can show: the driver (runner/engines/spark/
driver.py) writes a ``Failure`` to ``spark-failure.json`` in the launch directory, and the
engine's executor (runner/engines/spark/executor.py) reads it beside each node's exit file.

Standard library only (and dtrun.workloads.files, which is too): read from Spark's (py4j's)
exceptions by their text.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from dtrun.workloads.files import write_atomic

# What a failed task's error says before the last lines of its output (TorchDistributor's, and
# runner/engines/spark/task.py's): what a program printed, an older run's log, follows it
TASK_OUTPUT = "included below: "
FAILURE_FILE = "spark-failure.json"  # what failed, as the driver understood it (SparkExecutor)
CONNECT_S = 10.0  # how long a master may take to accept a connection
WAIT_ENV = "DTRUN_SPARK_EXECUTOR_WAIT_S"
DEFAULT_WAIT_S, MIN_WAIT_S, MAX_WAIT_S = 120, 5, 86400


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
    write_atomic(path, (json.dumps(asdict(failure), indent=2) + "\n").encode())


def report(path: Path, failure: Failure) -> int:
    """Say the failure in one line (no traceback: dtrun shows the message), record it, exit 1.
    A record the disk cannot hold is left out: the line still says it, and dtrun says the
    full disk (a launch a cut log stopped, runner/engines/spark/app.py)."""
    with contextlib.suppress(OSError):
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
    # Spark's own words, before the failed task's output
    text = str(getattr(error, "java_exception", None) or error).partition(TASK_OUTPUT)[0]
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
        fix="read the node's log and its executor's: a local-cluster's in spark-work/ of the "
        "launch that started the application, a worker's in its work directory",
        partition=int(lost.group(1)),
        exit_code=int(code.group(1)) if code else None,
    )


def no_slots(error: BaseException) -> bool:
    """Spark's barrier check refused the stage: fewer slots than tasks (SPARK-24819)."""
    return "slots" in str(error) and "barrier" in str(error).lower()


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
