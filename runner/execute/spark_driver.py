"""The Spark driver of one launch: ``python -m runner.execute.spark_driver MASTER LAUNCH_DIR``.

Started by the Spark engine (runner/execute/spark.py) as the one local process of a launch. It
opens a SparkSession on MASTER with the launch's Python on the executors, then lets the Spark
launcher start the ranks, one barrier task per node:

- ``torchdistributor``: ``TorchDistributor(num_processes=W, local_mode=False).run(node_main,
  ...)``, the function form: TorchDistributor's file form reports a failed rank as success
  (docs/spark.md);
- ``horovod-spark``: ``horovod.spark.run(node_main, num_proc=N, nics=[NIC])``.

Each task's ``node_main`` (runner/execute/spark_node.py) runs that node's rendered script. On
SIGTERM, SIGHUP or SIGINT the driver cancels the job and stops the session, then exits 128 +
the signal. A failed job exits 1 with Spark's words; which node failed, its ``.exit`` file says.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from runner.execute.guard import TAG as LAUNCH_TAG
from runner.execute.spark_node import TAG, node_main

GROUP = "dtrun-launch"


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
    stopped: list[int] = []
    stop = threading.Event()

    def on_signal(signum: int, _: object) -> None:
        stopped.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    print(f"{TAG} -: starting Spark on {master}", flush=True)
    spark = session(master, config, launch_dir)
    print(
        f"{TAG} -: Spark is up; {config['launcher']} starts {len(config['nodes'])} task(s)",
        flush=True,
    )

    def cancel_on_stop() -> None:
        # Not in the signal handler: the main thread is inside a py4j call then. horovod.spark
        # runs its job under a group of its own, so every job of this session is cancelled.
        stop.wait()
        print(f"dtrun-spark: stopping: cancelling the job (signal {stopped[0]})", flush=True)
        spark.sparkContext.cancelAllJobs()

    threading.Thread(target=cancel_on_stop, name="dtrun-spark-cancel", daemon=True).start()
    failure: BaseException | None = None
    try:
        launch(spark, config, launch_dir)  # the main thread: horovod.spark sets signal handlers
    except BaseException as exc:
        failure = exc
    spark.stop()
    if stopped:
        return 128 + stopped[0]
    if failure is not None:
        lines = "".join(traceback.format_exception_only(failure)).strip().splitlines()
        said = [line for line in lines if "failed" in line or "Error" in line][:6] or lines[:6]
        print("dtrun-spark: the Spark job failed: " + " | ".join(said), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
