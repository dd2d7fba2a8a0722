"""What the SSH executor copies to each node before a launch (runner/engines/ssh/executor.py):
without shared storage, a node's own script and files and those every node reads, not every
node's (issue 41: every node's to every node was N x N files); with shared storage, one node
writes them all."""

from __future__ import annotations

import asyncio
import errno
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest

from dtrun.engines.base import Cluster, ClusterChoice, wait_for_nodes
from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.remote import remote_launch_dir
from dtrun.engines.ssh.transfer import Files
from dtrun.errors import DiskFullError
from dtrun.execute import Answer
from dtrun.record.writefail import write_error
from dtrun.spec.cluster import Inventory, Node
from dtrun.spec.launchplan import PROBE_DIR, RESULT_FILE, LaunchFile, LaunchPlan, NodeLaunch
from tests.conftest import fill


class _Session:
    """What staging reads of a session: its inventory (nothing is connected)."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory


class _Recording(SshExecutor):
    """The executor, with each node's copy recorded instead of sent."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(_Session(inventory))  # type: ignore[arg-type]
        self.sent: dict[str, set[str]] = {}

    async def _put(self, node: Node, files: Files, code: Files) -> None:
        self.sent[node.name] = {PurePosixPath(path).name for path in files if "/runs/" in path}


def _inventory(shared: bool) -> Inventory:
    text = "user: u\nhosts: [10.0.0.4, 10.0.0.5, 10.0.0.6]\n"
    text += "shared: /mnt/shared\n" if shared else ""
    return parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))


def _plan(inventory: Inventory) -> LaunchPlan:
    nodes = inventory.nodes
    launches = tuple(
        NodeLaunch(node, rank, f"node-{rank}.sh", "true\n") for rank, node in enumerate(nodes)
    )
    files = (
        LaunchFile("hostfile", "10.0.0.4\n"),  # every node reads it
        *(LaunchFile(f"tf-config-worker-{r}.json", "{}", node_rank=r) for r in range(3)),
    )
    return LaunchPlan(
        "tensorflow", "program", 3, 1, 3, None, "id", nodes[0].address, 1, launches, files, nodes
    )


@pytest.mark.parametrize("shared", [False, True])
def test_each_node_gets_its_own_script_and_files_and_the_shared_ones(shared):
    inventory = _inventory(shared)
    executor = _Recording(inventory)
    asyncio.run(executor._stage(_plan(inventory), "/work/runs/id/n3/r0"))
    if shared:  # one node writes every node's, once
        assert executor.sent == {
            "node-0": {"hostfile"}
            | {f"node-{r}.sh" for r in range(3)}
            | {f"tf-config-worker-{r}.json" for r in range(3)}
        }
    else:
        assert executor.sent == {
            f"node-{r}": {"hostfile", f"node-{r}.sh", f"tf-config-worker-{r}.json"}
            for r in range(3)
        }


def test_a_node_a_head_only_launcher_starts_gets_its_own_files_too():
    """mpirun, horovodrun, DeepSpeed over pdsh: one script, on node 0; every node's ranks run
    launch-env.sh, which reads the node's own files (SageMaker's resourceconfig.json)."""
    inventory = _inventory(shared=False)
    plan = _plan(inventory)
    head_only = LaunchPlan(
        "mpirun", "program", 3, 1, 3, None, "id", plan.master_addr, 1, plan.launches[:1],
        plan.files, plan.nodes,
    )  # fmt: skip
    executor = _Recording(inventory)
    asyncio.run(executor._stage(head_only, "/work/runs/id/n3/r0"))
    assert executor.sent == {
        "node-0": {"hostfile", "node-0.sh", "tf-config-worker-0.json"},
        "node-1": {"hostfile", "tf-config-worker-1.json"},
        "node-2": {"hostfile", "tf-config-worker-2.json"},
    }


class _Result:
    exit_status = 0
    stderr = ""
    stdout = "dtrun-left: "


class _Staging:
    """A first launch's staging: the node asks for the code (transfer.py, exec_put)."""

    class stdin:  # asyncssh's attribute names
        write = write_eof = staticmethod(lambda *_: None)

    class stdout:
        @staticmethod
        async def readline() -> str:
            return "dtrun-code-wanted\n"

    async def wait(self, **_: object) -> _Result:
        return _Result()


class _Connection:
    """Records what the executor asks of a node's connection."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def run(self, command: str, **_: object) -> _Result:
        self.asked.append(command)
        return _Result()

    async def create_process(self, command: str, **_: object) -> _Staging:
        self.asked.append(command)
        return _Staging()

    async def start_sftp_client(self) -> None:
        self.asked.append("sftp")
        raise AssertionError("staging opened SFTP")


class _Connected(_Session):
    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.connections = {node.name: _Connection() for node in inventory.nodes}
        self.limit = asyncio.Semaphore(64)

    async def connection(self, node: Node) -> _Connection:
        return self.connections[node.name]


def test_a_nodes_files_go_in_one_exec_channel_not_sftp_requests_per_file():
    """SFTP took four requests or more a file: ~100 ms of dtrun's CPU a node (issue 41)."""
    inventory = _inventory(shared=False)
    session = _Connected(inventory)
    executor = SshExecutor(session)  # type: ignore[arg-type]
    asyncio.run(executor._stage(_plan(inventory), "/work/runs/id/n3/r0"))
    assert {name: c.asked for name, c in session.connections.items()} == {
        f"node-{r}": ["sh -s"] for r in range(3)
    }


class _Killed:
    exit_status, exit_signal, stderr, stdout = -1, ("KILL", False, "", ""), "", ""


class _HeldKilled:
    """The program check's held session, killed on the node before its STAGE came; the news
    of its end not read yet: it looks open."""

    exit_status, written = None, ""

    def is_closing(self) -> bool:
        return False

    class stdin:
        write = write_eof = staticmethod(lambda *_: None)

    class stdout:
        @staticmethod
        async def readline() -> str:
            return ""

    async def wait(self, **_: object) -> _Killed:
        return _Killed()


def test_a_held_session_killed_unread_before_the_staging_is_replaced_by_a_new_channel():
    """Seen in a fresh clone's e2e run under load (test_ssh_held.py): the held sh was killed
    and the staging, sent through it, failed "`sh -s` exited -1 ..., and said nothing"."""
    inventory = _inventory(shared=False)
    session = _Connected(inventory)
    executor = SshExecutor(session)  # type: ignore[arg-type]
    executor._held["node-0"] = _HeldKilled()  # type: ignore[assignment]
    asyncio.run(executor._stage(_plan(inventory), "/work/runs/id/n3/r0"))
    assert session.connections["node-0"].asked == ["sh -s"]  # its own channel, in its place


def test_a_run_s_launch_reads_nothing_back_from_its_nodes(tmp_path):
    # `dtrun run` records the nodes' exit codes and logs; looking for a result.json took an
    # SFTP session on every node that never had one (issue 41: 6 channels a node, now 4).
    inventory = _inventory(shared=False)
    executor = _Recording(inventory)  # its session has no connection: any contact raises
    plan = replace(_plan(inventory), workload="run")
    asyncio.run(executor._collect(plan, "/work/runs/id/launch", tmp_path))
    with pytest.raises(AttributeError, match="connection"):  # a built-in workload's does
        asyncio.run(executor._collect(replace(plan, workload="train"), "/w", tmp_path))


@pytest.mark.parametrize("shared", [False, True])
def test_each_run_s_probe_is_staged_in_its_own_run_s_folder_on_the_nodes(shared):
    """--probe's launch (runs/<id>/n2/r0/probe here) is staged in its run's folder on a node,
    beside the program's launch it follows, as every launch of a run is: two runs sharing a
    cluster's workdir or shared storage get a folder each. Before, every run's probe was
    <base>/runs/n2/r0/probe, one folder for all."""
    inventory = _inventory(shared)
    first, second = (
        remote_launch_dir(inventory, Path("runs") / run / "n2" / "r0" / PROBE_DIR)
        for run in ("alice", "bob")
    )
    program = remote_launch_dir(inventory, Path("runs/alice/n2/r0"))
    assert first == f"{program}/{PROBE_DIR}"
    assert second == first.replace("/alice/", "/bob/")
    assert first != second


class _Asked(Exception):
    """The readiness wait asked the nodes (the fake executor stops it there)."""


def _cluster(inventory: Inventory, asked: list[set[str]], *, check: bool) -> Cluster:
    """A cluster whose executor records whom the readiness wait asks, and stops it there."""

    class Asking:
        def command(self, scripts: dict[str, str]) -> dict[str, Answer]:
            asked.append(set(scripts))
            raise _Asked

    # wait_for_nodes reads no engine
    return Cluster(inventory, Asking(), ClusterChoice(check=check), None)  # type: ignore[arg-type]


@pytest.mark.parametrize("check", [False, True])
def test_nodes_that_just_answered_the_program_check_are_not_asked_again(check):
    inventory = _inventory(shared=False)
    plan = _plan(inventory)
    asked: list[set[str]] = []
    cluster = _cluster(inventory, asked, check=check)
    cluster.answered = frozenset(node.name for node in inventory.nodes)
    every = {"node-0", "node-1", "node-2"}
    if check:  # --check asks every node for its health, which the program check did not
        with pytest.raises(_Asked):
            wait_for_nodes(cluster, plan)
        assert asked == [every]
    else:
        wait_for_nodes(cluster, plan)
        assert asked == []
    with pytest.raises(_Asked):  # once: the next launch's wait asks them
        wait_for_nodes(cluster, plan)
    assert asked[-1] == every


def test_a_node_that_did_not_answer_the_program_check_is_waited_for():
    inventory = _inventory(shared=False)
    asked: list[set[str]] = []
    cluster = _cluster(inventory, asked, check=False)
    cluster.answered = frozenset({"node-0", "node-1"})
    with pytest.raises(_Asked):
        wait_for_nodes(cluster, _plan(inventory))
    assert asked == [{"node-0", "node-1", "node-2"}]


def test_dtrun_logs_in_to_stop_only_nodes_whose_wrapper_did_not_stop_them():
    """A node's wrapper stops what its script left and says so (templates/remote/launch.sh.j2):
    dtrun then opens no stop channel there, one a node fewer per launch (issue 41). A node
    still running when the launch ended (no word from its wrapper) is stopped as before, and
    what a wrapper could not stop is said."""
    from dtrun.engines.ssh.ended import Ended

    inventory = _inventory(shared=False)
    plan = _plan(inventory)
    session = _Connected(inventory)
    executor = SshExecutor(session)  # type: ignore[arg-type]
    launches = {launch.node.name: launch for launch in plan.launches}
    ended = {
        "node-0": Ended(launches["node-0"], 0, 1.0, left=[]),
        "node-1": Ended(launches["node-1"], 0, 1.0, left=["4242"]),
    }  # node-2 was still running: its wrapper said nothing
    tags = {name: f"t-{rank}" for rank, name in enumerate(launches)}
    problems = asyncio.run(executor._stop_everywhere(plan, tags, ended))
    assert {name: c.asked for name, c in session.connections.items()} == {
        "node-0": [], "node-1": [], "node-2": ["bash -s"],
    }  # fmt: skip
    assert problems == ["node-1: pids 4242 survived SIGKILL"]


class _Process:
    """A launch's process as asyncssh gives it: its output lines, then its exit status."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        self.exit_status: int | None = None
        self.exit_signal = None
        self.stdout = self

    async def readuntil(self, separators: object, max_separator_len: int = 0) -> str:
        if not self._lines:
            self.exit_status = 0
            raise asyncio.IncompleteReadError(b"", None)
        return self._lines.pop(0) + "\n"

    def exit_status_received(self, status: int) -> None:
        pass  # asyncssh's session callbacks, ignored unless hooked

    def exit_signal_received(self, *_: object) -> None:
        pass

    async def wait_closed(self) -> None:
        return None


def test_the_wrappers_word_is_kept_out_of_the_log_and_only_pids_are_taken_from_it(tmp_path):
    """The wrapper's last line, under its launch's marker, names what its stop left: not the
    program's output, and nothing but pids reaches dtrun's message from it."""
    from dtrun.engines.ssh.remote import swept_marker
    from dtrun.workloads.files import NodeLog

    inventory = _inventory(shared=False)
    plan = _plan(inventory)
    session = _Connected(inventory)
    said = ["step 1", f"{swept_marker('t-0')} 4242 \x1b[2J; rm -rf ~"]

    async def create_process(command: str, **_: object) -> _Process:
        return _Process(list(said))

    session.connections["node-0"].create_process = create_process  # type: ignore[method-assign,assignment]
    executor = SshExecutor(session)  # type: ignore[arg-type]
    lines: list[tuple[str, str]] = []
    log = NodeLog(tmp_path / "node-0.log")
    ended = asyncio.run(
        executor._node(
            plan.launches[0], "/w", "t-0", log, lambda node, line: lines.append((node, line))
        )
    )
    log.close()
    assert lines == [("node-0", "step 1")]
    assert (tmp_path / "node-0.log").read_text() == "step 1\n"
    assert (ended.exit_code, ended.left) == (0, ["4242"])


class _Copies(_Connection):
    """A node's connection whose exec channel answers with a result.json's bytes."""

    async def run(self, command: str, **_: object) -> SimpleNamespace:  # type: ignore[override]
        self.asked.append(command)
        return SimpleNamespace(exit_status=0, stdout=b'{"rows": []}\n' * 500, stderr=b"")


def test_a_result_this_machines_full_disk_refuses_is_that_disk_s_error_not_no_result(
    small_disk: Callable[[int], Path],
):
    """A health-gate check's result.json, copied back from its node to a full disk here: the
    disk's error, naming the file, and no partial copy left. Before, the copy's OSError was
    passed over as a node without the file, and the check read as its node failing (no
    result)."""
    disk = small_disk(64)
    workdir = disk / "run" / "health" / "node-0"
    workdir.mkdir(parents=True)
    fill(disk)
    inventory = _inventory(shared=False)
    session = _Connected(inventory)
    session.connections = {node.name: _Copies() for node in inventory.nodes}
    executor = SshExecutor(session)  # type: ignore[arg-type]
    executor._no_sftp.update(session.connections)  # through the exec channel
    plan = replace(_plan(inventory), workload="allreduce")
    with pytest.raises(OSError) as raised:
        asyncio.run(executor._collect(plan, "/w/runs/run/health/node-0", workdir))
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(workdir / RESULT_FILE))
    assert list(workdir.iterdir()) == []  # no partial copy
    said = write_error(raised.value, disk / "run")
    assert isinstance(said, DiskFullError)
    assert f"health/node-0/{RESULT_FILE} could not be written" in said.message
