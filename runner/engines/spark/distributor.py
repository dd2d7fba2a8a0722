"""TorchDistributor with torchrun started as Spark's own DeepspeedTorchDistributor starts it.

A launch is ``NodeDistributor(W).run_nodes(launch_dir, names)``: TorchDistributor's barrier
stage, rendezvous settings (MASTER_ADDR, MASTER_PORT and the run's id, gathered across the
tasks), log streaming and failure handling, unchanged. What runs in each task differs in
three ways from ``TorchDistributor.run``, the first two through TorchDistributor's own hook for
them (``_run(train_object, run_pytorch_file_fn)``, which pyspark's DeepspeedTorchDistributor
uses):

- torchrun runs as the task's child, as DeepspeedTorchDistributor runs it, not under
  ``pyspark.ml.torch.torch_run_process_wrapper``. That wrapper is a Python of its own that
  imports ``pyspark.ml`` (pandas, scipy; 1.7 s a launch here) and exits 0 whatever torchrun
  did, so a failed rank passed for a success (docs/spark.md). Here torchrun's exit code is the
  task's (``_execute_command`` raises on non-zero), and torchrun gets SIGTERM when its task's
  Python worker goes, as the wrapper's parent watch did.
- torchrun runs its own ``main`` and leaves once it returns (runner/plan/launchers/
  quickexit.py), and each rank runs ``python -m dtrun.engines.spark.node LAUNCH_DIR NAME...``:
  ``node_main`` with no pickled function, so the rank does not import pyspark (1.3 s a launch).
- the task reads its input before it starts (``read_input_first``), so that Spark reuses
  each executor's Python worker from one launch to the next.

Traced with strace on the 2-core VM, 2026-12-02: a steady launch took 13.5-15 s, of which
the wrapper's start 1.7 s, the rank's pyspark import 1.3 s, torchrun's teardown 0.5 s and a
new Python worker 1.2 s (docs/spark.md "Launchers"). Spark's own sleeps stay: 1 s for
TorchDistributor's log server, and 1 s for each of its two ``allGather`` calls (Spark's barrier
waits in whole seconds, BarrierTaskContext.runBarrier).

Imported on the driver; the executors import ``run_torchrun`` from here, which needs pyspark
and the standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.ml.torch.distributor import TorchDistributor

NODE_MODULE = "dtrun.engines.spark.node"  # what each rank runs: node_main (node.py)
CODE = "dtrun_torchrun_code"  # input_params' key: the ``python -c`` code torchrun runs with
# First, torchrun takes SIGTERM when its task's Python worker goes, and then ends its ranks
# (runner/engines/spark/inprocess.py stop_with_parent: PR_SET_PDEATHSIG and a parent watch).
PARENT_DEATH = (
    "import os, signal; from dtrun.engines.spark.inprocess import stop_with_parent; "
    "stop_with_parent(lambda: os.kill(os.getpid(), signal.SIGTERM)); "
)


class NodeDistributor(TorchDistributor):
    """TorchDistributor on Spark's executors, one torchrun per task (module docstring)."""

    def __init__(self, num_processes: int) -> None:
        super().__init__(num_processes=num_processes, local_mode=False, use_gpu=False)
        self.input_params[CODE] = torchrun_code()

    def run_nodes(self, launch_dir: str, names: list[str]) -> None:
        self._run(NODE_MODULE, run_torchrun, launch_dir, *names)

    def _get_spark_task_function(self, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        """TorchDistributor's task, reading its input first (module docstring)."""
        return read_input_first(super()._get_spark_task_function(*args, **kwargs))


def read_input_first(task: Callable[[Iterator[Any]], Iterator[Any]]) -> Callable[..., Any]:
    """``task`` after reading its partition's input to the end (one row of ``spark.range`` a
    task). TorchDistributor's task never reads it, and a Python worker that leaves its input
    unread is not reused: each launch forked a new one on every executor, which imported
    pandas, pyarrow and pyspark.ml again (1.2 s a launch here)."""

    def task_reading_first(rows: Iterator[Any]) -> Iterator[Any]:
        read = list(rows)
        yield from task(iter(read))

    return task_reading_first


def torchrun_code() -> str:
    """The ``python -c`` code of each task's torchrun (on the driver: quickexit is not shipped)."""
    from dtrun.plan.launchers.quickexit import quick_exit

    return PARENT_DEATH + quick_exit("torch.distributed.run", "torchrun")


def torchrun_command(input_params: dict[str, Any], module: str, *args: str) -> list[str]:
    """The task's torchrun: TorchDistributor's own rendezvous arguments for this task, then
    ``--module`` MODULE and its arguments."""
    rendezvous, per_node = TorchDistributor._get_torchrun_args(
        local_mode=input_params["local_mode"], num_processes=input_params["num_processes"]
    )
    return [
        sys.executable, "-c", input_params[CODE], *rendezvous, f"--nproc_per_node={per_node}",
        "--module", module, *args,
    ]  # fmt: skip


def run_torchrun(input_params: dict[str, Any], module: str, *args: Any, **kwargs: Any) -> None:
    """TorchDistributor's ``run_pytorch_file_fn`` (a task's work): torchrun, its output streamed
    to the driver as TorchDistributor streams it; raises when torchrun exits non-zero."""
    if kwargs:
        raise ValueError("the node module takes no keyword arguments")
    command = torchrun_command(input_params, module, *map(str, args))
    TorchDistributor._execute_command(
        command, log_streaming_client=input_params.get("log_streaming_client")
    )
