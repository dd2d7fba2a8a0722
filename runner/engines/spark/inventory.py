"""The Spark engine's inventory: the executors of a Spark master, one per node (docs/spark.md).

``local-cluster[N,C,M]`` (N executor processes on this machine, C cores and M MiB each) has N
nodes; ``spark://HOST:PORT``, ``yarn`` and ``k8s://...`` have as many as the sweep's largest
point asks for, which Spark must grant as barrier tasks (it refuses a job it has no slots for).
Nodes are named by barrier partition, ``spark-0``, ``spark-1``, ...: TorchDistributor and
horovod.spark number nodes that way, which is not the executor's own number.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dtrun.engines.spark.failures import WAIT_ENV, executor_wait_s
from dtrun.errors import UsageError
from dtrun.spec.cluster import Accelerator, Inventory, Node, Starter

LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]")
REMOTE = re.compile(r"(spark://[\w.\-]+(:\d+)?(,[\w.\-]+(:\d+)?)*|yarn|k8s://\S+)")


def executors(master: str, largest: int) -> int:
    """How many executors (nodes) the master has for this run; a clear error for a master
    that gives one executor (local[N] runs tasks as threads of one process) or none."""
    local = LOCAL_CLUSTER.fullmatch(master)
    if local is not None:
        count = int(local.group(1))
        if count < 1 or int(local.group(2)) < 1:
            raise UsageError(
                f"--spark {master} has no executor to run on",
                fix="pass --spark 'local-cluster[N,1,1024]' with N >= 1 executors of 1+ cores",
            )
        return count
    if REMOTE.fullmatch(master):
        return largest
    raise UsageError(
        f"--spark {master!r} is not a Spark master dtrun can run on",
        why="each node is one Spark executor; local and local[N] run every task in one process",
        fix="pass local-cluster[N,1,1024] (N executors on this machine), spark://HOST:7077, "
        "yarn, or k8s://URL",
    )


def spark_inventory(master: str, largest: int) -> Inventory:
    import dtrun

    count = executors(master, largest)
    try:
        executor_wait_s()  # each launch's driver reads it: a bad value is refused here, first
    except ValueError as bad:
        raise UsageError(
            str(bad),
            why="it is how long a launch waits for Spark to give it its executors",
            fix=f"set {WAIT_ENV} to e.g. 120, or unset it",
        ) from None
    local = LOCAL_CLUSTER.fullmatch(master)
    cores = int(local.group(2)) if local else 1
    address = "127.0.0.1" if local else "spark-executor"
    return Inventory(
        source=f"spark:{master}",
        nodes=tuple(
            Node(name=f"spark-{i}", address=address, slots=1, cpus=cores) for i in range(count)
        ),
        python_bin=str(Path(sys.executable).parent),
        code_dir=str(Path(dtrun.__file__).resolve().parent.parent),
        accelerator=Accelerator.CPU,
        interface="lo" if local else "eth0",
        starter=Starter.TASKS,
    )
