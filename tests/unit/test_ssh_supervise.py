"""How the SSH executor waits on a launch's nodes (runner/engines/ssh/executor.py, _supervise):
each node taken as it ends, the first to fail named, a node that ended in time taken though
the time is up, and a timeout naming the nodes still running but not the service ones."""

from __future__ import annotations

import asyncio
import errno
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from dtrun.engines.ssh.ended import Ended
from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.errors import NodeFailedError, RunError, RunTimeoutError
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from dtrun.workloads.files import NodeLog

if TYPE_CHECKING:
    from dtrun.engines.ssh.session import SshSession
    from dtrun.spec.cluster import Inventory


def _plan(count: int, service: int | None = None) -> LaunchPlan:
    hosts = ", ".join(f"10.0.0.{i + 4}" for i in range(count))
    inventory = parse_hosts_file(
        f"user: u\nhosts: [{hosts}]\n", "hosts.yaml", Defaults("u", sys.prefix + "/bin")
    )
    nodes = inventory.nodes
    launches = tuple(
        replace(NodeLaunch(node, rank, f"node-{rank}.sh", "true\n"), service=rank == service)
        for rank, node in enumerate(nodes)
    )
    return LaunchPlan(
        "tensorflow", "program", count, 1, count, None, "id", nodes[0].address, 1, launches, (),
        nodes,
    )  # fmt: skip


async def _ends(launch: NodeLaunch, after_s: float, code: int) -> Ended:
    await asyncio.sleep(after_s)
    return Ended(launch, code, after_s)


def _supervise(
    plan: LaunchPlan, ends: dict[int, tuple[float, int]], timeout_s: float, tmp_path: Path
) -> tuple[RunError | None, dict[str, Ended]]:
    """``ends``: rank -> (seconds until it ends, its exit code); a rank left out never ends."""
    ended: dict[str, Ended] = {}

    async def main() -> RunError | None:
        tasks = {
            asyncio.create_task(_ends(launch, *ends.get(launch.node_rank, (3600.0, 0)))): launch
            for launch in plan.launches
        }
        try:
            executor = SshExecutor.__new__(SshExecutor)  # _supervise reads none of its state
            return await executor._supervise(plan, tasks, ended, timeout_s, tmp_path)
        finally:
            for task in tasks:
                task.cancel()

    return asyncio.run(main()), ended


def test_the_node_that_fails_first_is_named_though_another_fails_later(tmp_path):
    ends = {0: (0.3, 1), 1: (0.05, 0), 2: (0.1, 7), 3: (0.2, 0)}
    error, ended = _supervise(_plan(4), ends, 30.0, tmp_path)
    assert isinstance(error, NodeFailedError)
    assert (error.node, error.exit_code_of_node) == ("node-2", 7)
    assert sorted(ended) == ["node-1", "node-2"]  # taken as they ended; node-0 not yet


def test_every_node_ending_0_is_a_success_in_any_order(tmp_path):
    ends = {rank: (0.01 * (7 - rank), 0) for rank in range(8)}
    error, ended = _supervise(_plan(8), ends, 30.0, tmp_path)
    assert error is None
    assert sorted(ended) == [f"node-{rank}" for rank in range(8)]


def test_a_timeout_names_the_nodes_still_running_but_not_a_service_node(tmp_path):
    ends = {0: (0.01, 0), 2: (0.02, 0)}  # node-1 and node-3 never end; node-3 a service node
    error, ended = _supervise(_plan(4, service=3), ends, 0.3, tmp_path)
    assert isinstance(error, RunTimeoutError)
    assert error.why == "still running when stopped: node-1"
    assert sorted(ended) == ["node-0", "node-2"]


def test_nodes_that_ended_in_time_are_taken_though_no_time_is_left(tmp_path):
    ends = {rank: (0.0, 0) for rank in range(3)}
    ended: dict[str, Ended] = {}
    plan = _plan(3)

    async def main() -> RunError | None:
        tasks = {asyncio.create_task(_ends(launch, 0.0, 0)): launch for launch in plan.launches}
        await asyncio.sleep(0.05)  # every node has ended; then the launch's time is 0
        executor = SshExecutor.__new__(SshExecutor)
        return await executor._supervise(plan, tasks, ended, 0.0, tmp_path)

    assert asyncio.run(main()) is None and len(ends) == len(ended) == 3


def test_a_launch_with_only_a_service_node_left_is_done(tmp_path):
    ends = {0: (0.01, 0), 1: (0.02, 0)}  # node-2, the service node, never ends
    error, ended = _supervise(_plan(3, service=2), ends, 30.0, tmp_path)
    assert error is None
    assert sorted(ended) == ["node-0", "node-1"]


def test_the_wait_benchmark_times_both_waits_on_every_node_count(capsys, monkeypatch):
    """benchmarks/supervise_cost.py, shrunk: a row a node count, both waits taking every end."""
    import importlib.util

    from tests.paths import REPO

    path = REPO / "benchmarks" / "supervise_cost.py"
    spec = importlib.util.spec_from_file_location("supervise_cost", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [str(path), "--nodes", "4,16", "--rounds", "1"])
    module.main()
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["4", "16"]


def test_a_node_whose_log_cannot_be_written_stops_the_launch_with_the_disks_error(
    tmp_path, monkeypatch
):
    """The node's output stops being read at the line its log refused, and the launch ends
    with that OSError (the caller says a full disk), not at --timeout with the node running."""
    plan = _plan(2)
    read: list[str] = []

    async def stream(process: object, sink: Callable[[str], None]) -> None:
        for number in range(1000):  # a program printing on, while anyone reads it
            read.append(f"line {number}\n")
            sink(read[-1])

    class Process:
        exit_status, exit_signal = 0, None

    class Connection:
        async def create_process(self, command: str, **_: object) -> Process:
            return Process()

    class Session:
        async def connection(self, node: object) -> Connection:
            return Connection()

    monkeypatch.setattr("dtrun.engines.ssh.executor.stream", stream)
    executor = SshExecutor.__new__(SshExecutor)
    executor.session, executor.grace_s = cast("SshSession", Session()), 5.0
    inventory = SimpleNamespace(python_bin="/usr/bin", code_dir="/opt/dtrun")
    executor.inventory = cast("Inventory", inventory)
    log = NodeLog(tmp_path / "node-0.log")
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC, as on a full disk
    assert log._fd is not None
    os.dup2(full, log._fd)
    os.close(full)
    ended: dict[str, Ended] = {}

    async def main() -> RunError | None:
        first, second = plan.launches
        tasks = {
            asyncio.create_task(executor._node(first, "/r", "t", log, lambda *_: None)): first,
            asyncio.create_task(_ends(second, 3600.0, 0)): second,  # runs on
        }
        try:
            return await executor._supervise(plan, tasks, ended, 5.0, tmp_path)
        finally:
            for task in tasks:
                task.cancel()

    with pytest.raises(OSError) as raised:
        asyncio.run(main())
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(tmp_path / "node-0.log")
    assert read == ["line 0\n"]
    assert ended["node-0"].exit_code is None  # to be stopped, as a node still running is


def _on_runner(runner: asyncio.Runner) -> SshExecutor:
    """An SshExecutor with no session: its calls run on ``runner``, it says no stop."""
    executor = SshExecutor.__new__(SshExecutor)
    executor.session = cast("SshSession", SimpleNamespace(call=runner.run))
    executor.inventory = cast("Inventory", SimpleNamespace())
    executor.on_stopping, executor._stopped = lambda *_: None, None
    return executor


async def _nothing(*_: object) -> list[str]:
    return []


def test_a_ctrl_c_while_results_are_collected_keeps_how_every_node_ended(tmp_path, monkeypatch):
    """Every node ended 0, and Ctrl-C came while dtrun copied the results back: the stop
    carries each node's end, so the records name the nodes and their logs. Before, a bare
    KeyboardInterrupt left the launch recorded with no node. The Ctrl-C leaves the session's
    loop (an asyncio.Runner, as SshSession's) as a KeyboardInterrupt, as it does in dtrun; it
    is raised in the copy itself, not by a signal, so the test's own signal state is no
    matter."""
    from dtrun.errors import LaunchInterrupted

    plan = _plan(2)
    monkeypatch.setattr("dtrun.engines.ssh.executor.remote_launch_dir", lambda *_: "/r")
    runner = asyncio.Runner()
    executor = _on_runner(runner)

    async def node(launch: NodeLaunch, *_: object) -> Ended:
        return Ended(launch, 0, 0.1, left=[])

    async def collect(*_: object) -> None:
        await asyncio.sleep(0)
        raise KeyboardInterrupt  # the user's Ctrl-C, as the copy runs

    monkeypatch.setattr(executor, "_stage", _nothing)
    monkeypatch.setattr(executor, "_node", node)
    monkeypatch.setattr(executor, "_stop_everywhere", _nothing)
    monkeypatch.setattr(executor, "_collect", collect)
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    finally:
        runner.close()
    assert isinstance(stopped.value, LaunchInterrupted)
    assert [(r.node, r.exit_code) for r in stopped.value.node_results] == [
        (launch.node.name, 0) for launch in plan.launches
    ]


def _log_cut_on_node_0(log: str) -> Callable[..., Awaitable[Ended]]:
    """A node task stand-in: node 0's log refused a line (a full disk); the others run on
    until stopped."""

    async def node(launch: NodeLaunch, *_: object) -> Ended:
        if launch.node_rank == 0:
            cut = OSError(errno.ENOSPC, "No space left on device", log)
            return Ended(launch, None, 0.1, cut=cut)
        await asyncio.sleep(3600)  # runs on until stopped
        raise AssertionError("not stopped")

    return node


def test_a_launch_a_cut_log_stopped_raises_it_with_how_every_node_ended(tmp_path, monkeypatch):
    """Node 0's log refused a line (a full disk): the launch raises that OSError with every
    node's end (LogCut), so that the sweep's runs.json and run.json record the nodes it
    stopped. Before, the bare OSError left the launch recorded with no node."""
    from dtrun.execute import LogCut

    plan = _plan(2)
    monkeypatch.setattr("dtrun.engines.ssh.executor.remote_launch_dir", lambda *_: "/r")
    runner = asyncio.Runner()
    executor = _on_runner(runner)
    log = str(tmp_path / "node-0.log")

    monkeypatch.setattr(executor, "_stage", _nothing)
    monkeypatch.setattr(executor, "_node", _log_cut_on_node_0(log))
    monkeypatch.setattr(executor, "_stop_everywhere", _nothing)
    try:
        with pytest.raises(OSError) as raised:
            executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    finally:
        runner.close()
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, log)
    assert isinstance(raised.value, LogCut)
    assert [(r.node, r.exit_code) for r in raised.value.node_results] == [
        (launch.node.name, None) for launch in plan.launches
    ]


def test_an_oserror_that_is_no_node_log_s_keeps_its_type_and_traceback(tmp_path, monkeypatch):
    """Only a node log's write error is a cut launch (LogCut). Any other OSError from a node's
    task (here the console's pipe gone: dtrun's output piped into `head`) is raised as it is,
    with its own type and traceback, after every node is stopped. Before, it came back as a
    LogCut "[Errno 32] Broken pipe" raised from _run, its origin lost."""
    from dtrun.execute import LogCut

    plan = _plan(2)
    monkeypatch.setattr("dtrun.engines.ssh.executor.remote_launch_dir", lambda *_: "/r")
    runner = asyncio.Runner()
    executor = _on_runner(runner)
    stopped: list[str] = []

    async def stop_everywhere(*_: object) -> list[str]:
        stopped.append("every node")
        return []

    def console_gone() -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    async def node(launch: NodeLaunch, *_: object) -> Ended:
        if launch.node_rank == 0:
            console_gone()
        await asyncio.sleep(3600)  # runs on until stopped
        raise AssertionError("not stopped")

    monkeypatch.setattr(executor, "_stage", _nothing)
    monkeypatch.setattr(executor, "_node", node)
    monkeypatch.setattr(executor, "_stop_everywhere", stop_everywhere)
    try:
        with pytest.raises(OSError) as raised:
            executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    finally:
        runner.close()
    assert type(raised.value) is BrokenPipeError and not isinstance(raised.value, LogCut)
    assert "console_gone" in [entry.name for entry in raised.traceback]
    assert stopped == ["every node"]


def test_a_stop_signal_while_a_cut_log_s_launch_stops_says_both(tmp_path, monkeypatch):
    """Node 0's log refused a line (a full disk), and a Ctrl-C came while dtrun stopped the
    other node for it: the launch is interrupted (LaunchInterrupted, exit 130) and its end,
    the cut log, is said with it, as for a failed node. Before, the Ctrl-C was dropped: the
    launch raised LogCut and the sweep ended `failed`, exit 1."""
    import signal

    from dtrun.errors import LaunchInterrupted

    plan = _plan(2)
    monkeypatch.setattr("dtrun.engines.ssh.executor.remote_launch_dir", lambda *_: "/r")
    runner = asyncio.Runner()
    executor = _on_runner(runner)
    log = str(tmp_path / "node-0.log")

    async def ctrl_c_meanwhile(*_: object) -> list[str]:
        signal.raise_signal(signal.SIGINT)  # held back by the stop (sigint_deferred)
        return []

    monkeypatch.setattr(executor, "_stage", _nothing)
    monkeypatch.setattr(executor, "_node", _log_cut_on_node_0(log))
    monkeypatch.setattr(executor, "_stop_everywhere", ctrl_c_meanwhile)
    try:
        with pytest.raises(LaunchInterrupted) as raised:
            executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    finally:
        runner.close()
    ended = raised.value.ended
    assert ended is not None and f"node log {log} could not be written" in ended.what
    assert [(r.node, r.exit_code) for r in raised.value.node_results] == [
        (launch.node.name, None) for launch in plan.launches
    ]


def test_a_result_copy_this_machines_full_disk_refused_keeps_how_every_node_ended(
    tmp_path, monkeypatch
):
    """Every node ended 0, and the copy of rank 0's result.json back here was refused by this
    machine's full disk (transfer.py next_node_unless_here): the launch raises that OSError
    with every node's end (LogCut), so that its record names the nodes and their logs, as for
    a cut log. Before, the bare OSError left the launch recorded with no node."""
    from dtrun.execute import LogCut
    from dtrun.spec.launchplan import RESULT_FILE

    plan = replace(_plan(2), workload="allreduce")
    monkeypatch.setattr("dtrun.engines.ssh.executor.remote_launch_dir", lambda *_: "/r")
    runner = asyncio.Runner()
    executor = _on_runner(runner)
    local = str(tmp_path / RESULT_FILE)

    async def node(launch: NodeLaunch, *_: object) -> Ended:
        return Ended(launch, 0, 0.1, left=[])

    async def collect(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", local)  # as transfer.py says

    monkeypatch.setattr(executor, "_stage", _nothing)
    monkeypatch.setattr(executor, "_node", node)
    monkeypatch.setattr(executor, "_stop_everywhere", _nothing)
    monkeypatch.setattr(executor, "_collect", collect)
    try:
        with pytest.raises(OSError) as raised:
            executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    finally:
        runner.close()
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, local)
    assert isinstance(raised.value, LogCut)
    assert [(r.node, r.exit_code) for r in raised.value.node_results] == [
        (launch.node.name, 0) for launch in plan.launches
    ]
