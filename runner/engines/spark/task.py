"""The barrier stage's task of a TorchDistributor launch, as each executor runs it
(runner/engines/spark/distributor.py starts the stage).

The executors unpickle the task, and so import this module, in the first launch's Python
workers: it imports pyspark's task context and the standard library, never ``pyspark.ml``.
Importing anything under ``pyspark.ml`` runs that package's ``__init__`` (its estimators, with
pandas and scipy): 0.78 s in each executor's first launch here (``-X importtime``,
2026-12-04), between the stage's start and torchrun's. So the task does what
TorchDistributor's helpers do without importing them:

- ``torchrun_command``: TorchDistributor's ``_get_torchrun_args`` for one process a node
  (``use_gpu=False``: CUDA_VISIBLE_DEVICES is empty), as pyspark 4.3.0 writes it;
  tests/unit/test_spark_task.py holds the two equal.
- ``stream``: TorchDistributor's ``_execute_command``: the command's output, merged, line by
  line to this task's stdout (unless the log server is on this host, which prints it) and to
  the driver's log server; its last 100 lines in the error when it exits non-zero; SIGTERM
  then SIGKILL when the task ends first.
- ``log_client``: pyspark's own ``LogStreamingClient`` (pyspark/ml/torch/log_communication.py,
  which imports the standard library only), loaded from its file without its package's
  ``__init__``.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# input_params' key: torchrun's log directory, in the launch's directory (without --log_dir
# torchrun makes a /tmp/torchelastic_* at every launch and never removes it)
LOG_DIR = "dtrun_torchrun_log_dir"
CODE = "dtrun_torchrun_code"  # input_params' key: the ``python -c`` code torchrun runs with
TAIL_LINES = 100  # TorchDistributor's _TAIL_LINES_TO_KEEP: the output an error carries
# pyspark's log client, loaded under this name (its last part: the file's, log_communication.py)
LOG_MODULE = "dtrun_spark_task.log_communication"


def node_task(
    num_processes: int,
    input_params: dict[str, Any],
    driver_address: str,
    log_port: int,
    master_port: int | None,
    rdzv_id: str,
    module: str,
    args: tuple[Any, ...],
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The barrier stage's task: TorchDistributor's environment for torchrun, agreed on with no
    barrier sync (distributor.py's docstring), then ``run_torchrun`` with its output streamed
    to the driver's log server. It yields no rows: the ranks' results are files."""

    def task(rows: Iterator[Any]) -> Iterator[Any]:
        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        rank = str(context.partitionId())
        master = context.getTaskInfos()[0].address.split(":")[0]
        port = master_port if master_port is not None else gathered_port(context, master)
        os.environ.update(
            CUDA_VISIBLE_DEVICES="",  # TorchDistributor's, under use_gpu=False
            MASTER_ADDR=master,
            MASTER_PORT=str(port),
            PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID=rdzv_id,
            WORLD_SIZE=str(num_processes),
            NODE_RANK=rank,
            RANK=rank,
        )
        client = log_client(driver_address, log_port)
        try:
            run_torchrun(dict(input_params, log_streaming_client=client), module, *args)
        finally:
            with contextlib.suppress(Exception):
                type(client)._destroy()
        yield from ()

    return task


def gathered_port(context: Any, address: str) -> int:
    """A port free on task 0's host, found there and gathered to every task: TorchDistributor's
    ``get_free_port``, one barrier sync."""
    import socket

    port = ""
    if context.partitionId() == 0:
        with contextlib.suppress(OSError), socket.socket() as sock:
            sock.bind((address, 0))
            port = str(sock.getsockname()[1])
    gathered = context.allGather(port)[0]
    if not gathered:
        raise RuntimeError("Failed to find free port for distributed training.")
    return int(gathered)


def read_input_first(task: Callable[[Iterator[Any]], Iterator[Any]]) -> Callable[..., Any]:
    """``task`` after reading its partition's input to the end (one number a task).
    TorchDistributor's task never reads it, and a Python worker that leaves its input unread is
    not reused: each launch forked a new one on every executor, which imported pyspark.ml
    again (1.2 s a launch here)."""

    def task_reading_first(rows: Iterator[Any]) -> Iterator[Any]:
        read = list(rows)
        yield from task(iter(read))

    return task_reading_first


def log_client(address: str, port: int) -> Any:
    """pyspark's LogStreamingClient to the driver's log server (module docstring): its module
    found where pyspark's package is (a directory, or on executors pyspark.zip) and run
    without its parents' ``__init__``."""
    module = sys.modules.get(LOG_MODULE)
    if module is None:
        pyspark = importlib.util.find_spec("pyspark")
        assert pyspark is not None and pyspark.submodule_search_locations is not None
        places = [str(Path(p) / "ml" / "torch") for p in pyspark.submodule_search_locations]
        spec = importlib.machinery.PathFinder.find_spec(LOG_MODULE, places)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[LOG_MODULE] = module
    return module.LogStreamingClient(address, port)


def torchrun_command(input_params: dict[str, Any], module: str, *args: str) -> list[str]:
    """The task's torchrun: TorchDistributor's rendezvous arguments for this task (module
    docstring; standalone where ``local_mode``), then ``--module`` MODULE and its arguments."""
    if input_params["local_mode"]:
        rendezvous = ["--standalone", "--nnodes=1"]
        per_node = input_params["num_processes"]
    else:
        rdzv_id = os.environ.get("PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID")
        if not rdzv_id:
            raise RuntimeError("Missing PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID environment variable")
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
        per_node = len(gpus.split(",")) if gpus else 1
        rendezvous = [
            f"--nnodes={input_params['num_processes'] // per_node}",
            f"--node_rank={os.environ['RANK']}",
            f"--rdzv_endpoint={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            f"--rdzv_id={rdzv_id}",
        ]
    logs = [f"--log_dir={input_params[LOG_DIR]}"] if input_params.get(LOG_DIR) else []
    return [
        sys.executable, "-c", input_params[CODE], *rendezvous, f"--nproc_per_node={per_node}",
        *logs, "--module", module, *args,
    ]  # fmt: skip


def run_torchrun(input_params: dict[str, Any], module: str, *args: Any, **kwargs: Any) -> None:
    """TorchDistributor's ``run_pytorch_file_fn`` (a task's work): torchrun, its output streamed
    to the driver as TorchDistributor streams it; raises when torchrun exits non-zero."""
    if kwargs:
        raise ValueError("the node module takes no keyword arguments")
    command = torchrun_command(input_params, module, *map(str, args))
    stream(command, input_params.get("log_streaming_client"))


def stream(command: list[str], client: Any = None) -> None:
    """Run ``command`` as TorchDistributor's ``_execute_command`` does (module docstring)."""
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.PIPE
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.close()
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        for raw in child.stdout:
            line = raw.decode("utf-8")
            tail.append(line)
            if client is None or client.failed or not _same_host(client):
                sys.stdout.write(line)
            if client is not None:
                client.send(line.rstrip())
        child.wait()
    finally:
        if child.poll() is None:
            with contextlib.suppress(OSError):
                child.terminate()
                time.sleep(0.5)
                if child.poll() is None:
                    child.kill()
    if child.returncode != 0:
        what = "task output is"
        if len(tail) == TAIL_LINES:
            what = f"last {TAIL_LINES} lines of the task output are"
        raise RuntimeError(
            f"Command {command} failed with return code {child.returncode}. "
            f"The {what} included below: {''.join(tail)}"
        )


def _same_host(client: Any) -> bool:
    """The log server prints what it gets on the driver's host: a client on that host does not
    print it again (TorchDistributor's test)."""
    try:
        return bool(client.sock.getsockname()[0] == client.sock.getpeername()[0])
    except (AttributeError, OSError):
        return False
