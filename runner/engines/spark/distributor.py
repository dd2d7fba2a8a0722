"""TorchDistributor with torchrun started as Spark's own DeepspeedTorchDistributor starts it,
and its barrier stage without Spark's whole-second waits.

A launch is ``NodeDistributor(W, port).run_nodes(launch_dir, names)``: TorchDistributor's
``_run`` (its checks of the request and the slots), its torchrun arguments, its log streaming
(``LogStreamingServer`` on the driver, a ``LogStreamingClient`` in each task) and its failure
handling (``_execute_command`` raises on a non-zero exit, which fails the stage). What differs
from ``TorchDistributor.run``:

- torchrun runs as the task's child, as DeepspeedTorchDistributor runs it, not under
  ``pyspark.ml.torch.torch_run_process_wrapper``. That wrapper is a Python of its own that
  imports ``pyspark.ml`` (pandas, scipy; 1.7 s a launch here) and exits 0 whatever torchrun
  did, so a failed rank passed for a success (docs/spark.md). Here torchrun's exit code is the
  task's, and torchrun gets SIGTERM when its task's Python worker goes, as the wrapper's parent
  watch did.
- torchrun runs its own ``main`` and leaves once it returns (runner/plan/launchers/
  quickexit.py), and each rank runs ``python -m dtrun.engines.spark.node LAUNCH_DIR NAME...``:
  ``node_main`` with no pickled function, so the rank does not import pyspark (1.3 s a launch).
- the barrier stage is an RDD's, ``sc.parallelize(range(W), W).barrier().mapPartitions``, as
  TorchDistributor ran it in Spark 3.4; since 3.5 it is a DataFrame's (``mapInPandas``, for
  Spark Connect). A DataFrame stage's first run plans and generates code in every JVM and
  starts Arrow and pandas in every Python worker. On a fresh local-cluster here (2026-12-03),
  a first empty barrier task took 13.4-14.9 s as a DataFrame's, 5.9-6.1 s as an RDD's
  (Spark's default JVMs); a dtrun launch's torchrun started 5.4 s sooner; and a point of 5
  launches went from 1.48 to 1.38 times dtrun's torchrun point
  (benchmarks/spark_vs_torchrun.py).
- the task reads its input before it starts (``read_input_first``), so that Spark reuses
  each executor's Python worker from one launch to the next.
- the stage's task (``node_task``) agrees on the rendezvous with at most one barrier sync.
  TorchDistributor's task calls ``allGather`` twice (task 0's free port, then its run id), and
  Spark answers every barrier sync after a whole second: its ``BarrierTaskContext.runBarrier``
  polls the reply with ``Thread.sleep(1000)`` (spark-core 4.3.0, read with javap). Here the
  driver draws the run id, and MASTER_ADDR is task 0's executor address, which every task reads
  from ``getTaskInfos()`` without a sync. MASTER_PORT: on a local-cluster, whose executors all
  run on the driver's machine, a port free here that the driver finds (``free_port``), with no
  sync; elsewhere task 0's free port, gathered as TorchDistributor gathers it (one sync). Not
  dtrun's fixed ``--port``: a failed launch's torchrun, still stopping, holds it and fails the
  next launch with EADDRINUSE (seen), and two sweeps on one machine would clash. The
  environment each torchrun sees is TorchDistributor's: MASTER_ADDR, MASTER_PORT,
  PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID, WORLD_SIZE, NODE_RANK, RANK and an empty
  CUDA_VISIBLE_DEVICES (``use_gpu=False``).
- the driver waits for its log server to listen (``start_log_server``), where
  TorchDistributor sleeps 1 s a launch.

Traced on the 2-core VM, 2026-12-03: a steady launch took 12.5 s, of which these three waits
3.0 s (docs/spark.md "Launchers").

Imported on the driver only. The task (``node_task``, ``run_torchrun``) is in
runner/engines/spark/task.py, which the executors import without ``pyspark.ml``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.ml.torch.distributor import TorchDistributor, _get_conf
from pyspark.ml.torch.log_communication import LogStreamingServer  # type: ignore[attr-defined]

from dtrun.engines.spark.task import CODE, LOG_DIR, node_task, read_input_first, run_torchrun

NODE_MODULE = "dtrun.engines.spark.node"  # what each rank runs: node_main (node.py)
# First, torchrun takes SIGTERM when its task's Python worker goes, and then ends its ranks
# (runner/engines/spark/inprocess.py stop_with_parent: PR_SET_PDEATHSIG and a parent watch).
PARENT_DEATH = (
    "import os, signal; from dtrun.engines.spark.inprocess import stop_with_parent; "
    "stop_with_parent(lambda: os.kill(os.getpid(), signal.SIGTERM)); "
)


# How long the driver waits for its log server to listen; past it, the launch runs without it,
# as TorchDistributor's does when its server fails to start (the tasks' output then stays in
# each node's log).
LOG_SERVER_WAIT_S = 5.0


class NodeDistributor(TorchDistributor):
    """TorchDistributor on Spark's executors, one torchrun per task (module docstring);
    ``master_port``: MASTER_PORT, the rendezvous endpoint's port, free on task 0's host; None:
    task 0's free port, gathered (module docstring)."""

    def __init__(self, num_processes: int, master_port: int | None) -> None:
        super().__init__(num_processes=num_processes, local_mode=False, use_gpu=False)
        self.input_params[CODE] = torchrun_code()
        self.master_port = master_port

    def run_nodes(self, launch_dir: str, names: list[str]) -> None:
        self.input_params[LOG_DIR] = str(Path(launch_dir) / "torchelastic")
        self._run(NODE_MODULE, run_torchrun, launch_dir, *names)

    def _run_distributed_training(
        self,
        framework_wrapper_fn: Callable[..., Any],
        train_object: Any,
        run_pytorch_file_fn: Callable[..., Any] | None,
        spark_dataframe: Any,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """TorchDistributor's, with dtrun's task and its log server waited for, not slept for
        (module docstring). ``_run`` calls it with the module to run and ``run_torchrun``."""
        if spark_dataframe is not None or kwargs or framework_wrapper_fn is not run_torchrun:
            raise ValueError("NodeDistributor runs a module under run_torchrun, and nothing else")
        self.driver_address = _get_conf(self.spark, "spark.driver.host", "")
        server = LogStreamingServer()
        self.log_streaming_server_port = start_log_server(server, self.driver_address)
        if self.log_streaming_server_port < 0:
            self.logger.warning("TorchDistributor's log server did not start: the tasks' "
                                "output is in each node's log only")  # fmt: skip
        try:
            task = node_task(
                self.num_processes, self.input_params, self.driver_address,
                self.log_streaming_server_port, self.master_port, secrets.token_hex(16),
                train_object, args,
            )  # fmt: skip
            self._check_encryption()
            self.logger.info(
                f"Started distributed training with {self.num_processes} executor processes"
            )
            tasks = self.spark.sparkContext.parallelize(range(self.num_tasks), self.num_tasks)
            tasks.barrier().mapPartitions(read_input_first(task)).collect()
        finally:
            server.shutdown()
        self.logger.info(
            f"Finished distributed training with {self.num_processes} executor processes"
        )


def start_log_server(server: LogStreamingServer, host: str) -> int:
    """Start TorchDistributor's log server; its port once it listens (its ``server`` is set in
    its thread once the socket is bound and listening), or -1 when it did not start within
    LOG_SERVER_WAIT_S. TorchDistributor sleeps 1 s instead, and goes on even if it never
    started."""
    try:
        server.start(spark_host_address=host)
    except Exception:  # as TorchDistributor: no log server is no failure of the launch
        return -1
    deadline = time.monotonic() + LOG_SERVER_WAIT_S
    while server.server is None:
        thread = server.serve_thread
        if time.monotonic() > deadline or thread is None or not thread.is_alive():
            return -1
        time.sleep(0.005)
    return int(server.port or -1)


def free_port() -> int:
    """A TCP port free on this machine now (bound to port 0 and let go), as TorchDistributor's
    tasks find one: for a local-cluster, whose executors all run here."""
    import socket

    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def torchrun_code() -> str:
    """The ``python -c`` code of each task's torchrun (on the driver: quickexit is not shipped)."""
    from dtrun.plan.launchers.quickexit import quick_exit

    return PARENT_DEATH + quick_exit("torch.distributed.run", "torchrun")
