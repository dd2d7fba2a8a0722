"""dtrun's TorchDistributor task and log server (runner/engines/spark/distributor.py and
task.py): the environment TorchDistributor gives torchrun, agreed on with no barrier sync, and
a log server waited for until it listens, not slept for."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.ml.torch.log_communication import LogStreamingServer  # type: ignore[attr-defined]

from dtrun.engines.spark import distributor, task


class _NoSync:
    """A barrier task context whose syncs fail the test: the task must not call them."""

    def __init__(self, partition: int) -> None:
        self.partition = partition

    def partitionId(self) -> int:
        return self.partition

    def getTaskInfos(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(address="127.0.0.7:40001"), SimpleNamespace(address="10.0.0.2:1")]

    def allGather(self, message: str = "") -> list[str]:
        raise AssertionError("a barrier sync: Spark answers it after a whole second")

    barrier = allGather


@pytest.mark.parametrize("partition", [0, 1])
def test_each_task_gets_torchdistributors_environment_with_no_barrier_sync(partition, monkeypatch):
    import pyspark

    monkeypatch.setattr(pyspark.BarrierTaskContext, "get", lambda: _NoSync(partition))
    seen: dict[str, Any] = {}

    def run_torchrun(params: dict[str, Any], module: str, *args: Any) -> None:
        import os

        names = ("CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                 "NODE_RANK", "RANK", "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID")  # fmt: skip
        seen.update({name: os.environ[name] for name in names}, module=module, args=args,
                    client="log_streaming_client" in params)  # fmt: skip

    monkeypatch.setattr(task, "run_torchrun", run_torchrun)
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "NODE_RANK", "WORLD_SIZE",
                 "CUDA_VISIBLE_DEVICES", "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID"):  # fmt: skip
        monkeypatch.setenv(name, "before")  # restored after the test
    names = ("/launch", "spark-0", "spark-1")
    stage_task = task.node_task(
        2, {"num_processes": 2}, "127.0.0.1", -1, 29401, "ab12", "dtrun.engines.spark.node", names
    )
    assert list(stage_task(iter([]))) == []
    assert seen == {
        "CUDA_VISIBLE_DEVICES": "", "MASTER_ADDR": "127.0.0.7", "MASTER_PORT": "29401",
        "WORLD_SIZE": "2", "NODE_RANK": str(partition), "RANK": str(partition),
        "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID": "ab12", "module": "dtrun.engines.spark.node",
        "args": names, "client": True,
    }  # fmt: skip


def test_the_log_server_port_is_given_once_it_listens():
    server = LogStreamingServer()
    port = distributor.start_log_server(server, "127.0.0.1")
    try:
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass  # listening already: nothing to sleep for
    finally:
        server.shutdown()


def test_a_log_server_that_cannot_start_is_port_minus_one_and_no_failure():
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: binding to it fails
    assert distributor.start_log_server(LogStreamingServer(), "192.0.2.1") == -1


class _Gathers(_NoSync):
    """A barrier task context that answers one allGather with task 0's message."""

    def __init__(self, partition: int, from_task_0: list[str]) -> None:
        super().__init__(partition)
        self.from_task_0 = from_task_0
        self.syncs = 0

    def allGather(self, message: str = "") -> list[str]:
        self.syncs += 1
        if self.partition == 0:
            self.from_task_0.append(message)
        return [self.from_task_0[0], "1"]


def test_off_a_local_cluster_task_0s_free_port_is_gathered_in_one_sync():
    """The driver cannot find a port free on another host: TorchDistributor's way."""
    sent: list[str] = []
    first = _Gathers(0, sent)
    port = task.gathered_port(first, "127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free on task 0's host
    other = _Gathers(1, sent)
    assert task.gathered_port(other, "127.0.0.1") == port
    assert (first.syncs, other.syncs) == (1, 1)


def test_on_a_local_cluster_the_driver_finds_a_free_port_itself():
    port = distributor.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
