"""The Ray engine without a Ray cluster: its address, inventory, bundles, the missing extra,
its launcher's refusals, its node actor on a real script, and its footprint outside its own
package (docs/engines.md "Adding an engine")."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dtrun.engines.ray.executor import RayExecutor, bundle, node_tag
from dtrun.engines.ray.node import NodeProcess
from dtrun.engines.ray.session import RaySession, parse_address, ray_inventory, said
from dtrun.engines.registry import EngineOptions
from dtrun.errors import InventoryError, PlanError, SiteError, UsageError
from dtrun.spec.cluster import Node, Starter
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from tests.conftest import ended, wait_for
from tests.paths import REPO
from tests.plans import build_run_plan
from tests.unit.test_launch_stubs import run_spec


def _node(address: str, cpus: float = 1.0, alive: bool = True) -> dict[str, object]:
    return {"NodeManagerAddress": address, "Alive": alive, "Resources": {"CPU": cpus}}


@pytest.mark.parametrize("address", ["127.0.0.2:6379", "head-1.example:6390"])
def test_a_head_address_is_host_and_port(address):
    host, port = parse_address(address)
    assert f"{host}:{port}" == address


@pytest.mark.parametrize("address", ["127.0.0.2", "auto", "ray://h:10001", "h:0", "h:70000",
                                     "-o:1", "h:1 ;x"])  # fmt: skip
def test_anything_else_is_refused_with_exit_2(address):
    with pytest.raises(UsageError, match="is not a Ray head's address") as raised:
        parse_address(address)
    assert raised.value.exit_code == 2


def test_the_inventory_is_the_nodes_by_address_named_in_order():
    inventory = ray_inventory("h:1", [_node("10.0.0.10", 4), _node("10.0.0.9"), _node("10.0.0.2")])
    assert [(n.name, n.address, n.cpus) for n in inventory.nodes] == [
        ("ray-0", "10.0.0.2", 1),
        ("ray-1", "10.0.0.9", 1),
        ("ray-2", "10.0.0.10", 4),
    ]
    assert inventory.starter is Starter.TASKS and inventory.interface == "eth0"
    assert ray_inventory("h:1", [_node("127.0.0.2")]).interface == "lo"


def test_two_raylets_on_one_address_or_none_with_a_cpu_are_refused():
    with pytest.raises(InventoryError, match=r"two nodes on 10\.0\.0\.2"):
        ray_inventory("h:1", [_node("10.0.0.2"), _node("10.0.0.2")])
    with pytest.raises(InventoryError, match="no node with a CPU"):
        ray_inventory("h:1", [])


@pytest.mark.parametrize(
    "hostile", ["10.0.0.2;touch /tmp/x", "$(id)", "10.0.0.2\nx", "-oProxyCommand=x", ""]
)
def test_a_node_address_ray_gives_that_is_no_host_is_refused(hostile):
    """Ray's NodeManagerAddress reaches node scripts and the rendezvous: refused, as Slurm's
    NodeAddr is, whatever a raylet was started with."""
    with pytest.raises(InventoryError, match="gives a node the address") as raised:
        ray_inventory("h:1", [_node("10.0.0.3"), _node(hostile)])
    assert raised.value.exit_code == 2


def test_each_bundle_is_pinned_to_its_nodes_address():
    launch = NodeLaunch(Node("ray-1", "10.0.0.9"), 1, "node-1.sh", "")
    assert bundle(launch) == {"CPU": 1, "node:10.0.0.9": 0.001}


def test_rays_reason_is_one_line_without_its_traceback():
    error = RuntimeError(
        "Traceback (most recent call last):\n  File x\nray.exceptions.ActorDiedError: The actor "
        "died unexpectedly before finishing this task.\n\tclass_name: NodeProcess"
    )
    assert said(error) == (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    )


def test_a_method_that_raised_is_said_by_its_exception_without_ray_s_colours():
    """Ray's RayTaskError says its header first, coloured: a node whose actor could not write
    its launch files was "lost" with "\\x1b[36mray::NodeProcess.start()\\x1b[39m (pid=42,
    ip=10.0.0.2)" in its cause, escapes and all, and not the error that ended it."""
    exceptions = pytest.importorskip("ray.exceptions")
    cause = PermissionError(13, "Permission denied", "/runs/r1/n2")
    header = "\x1b[36mray::NodeProcess.start()\x1b[39m (pid=42, ip=10.0.0.2)"
    error = exceptions.RayTaskError(
        "start", f"Traceback (most recent call last):\n{cause}", cause,
        proctitle="ray::NodeProcess.start", pid=42, ip="10.0.0.2",
    ).as_instanceof_cause()  # fmt: skip
    assert str(error).startswith(header)  # as Ray 2.60 writes it
    assert said(error) == "PermissionError: [Errno 13] Permission denied: '/runs/r1/n2'"
    assert said(RuntimeError(f"{header}\nmore")) == "ray::NodeProcess.start() (pid=42, ip=10.0.0.2)"


def test_a_missing_ray_names_the_extra_and_exits_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UsageError, match=r"--ray needs Ray") as raised:
        RaySession("127.0.0.1:1").open()
    assert raised.value.exit_code == 2 and "pip install 'dtrun[ray]'" in raised.value.fix


def test_an_unreachable_head_is_said_before_ray_init_and_exits_1_as_an_ssh_node(monkeypatch):
    """A cluster that does not answer is not bad input (exit 2), as an unreachable SSH node,
    a Spark master or Slurm's controller (docs/ray.md)."""
    with pytest.raises(
        SiteError, match=r"cannot connect to the Ray cluster at 127\.0\.0\.1"
    ) as raised:
        RaySession("127.0.0.1:1").open()
    assert raised.value.exit_code == 1


def test_a_bad_address_is_refused_with_the_other_option_checks():
    with pytest.raises(UsageError, match="is not a Ray head's address"):
        EngineOptions(ray="head").check()
    EngineOptions(ray="head:6379").check()


@pytest.mark.parametrize("other", [{"hosts": "h1"}, {"slurm": True}, {"spark": "yarn"}])
def test_ray_with_another_cluster_is_refused(other):
    with pytest.raises(UsageError, match="pass --ray ADDRESS alone"):
        EngineOptions(ray="h:6379", **other).refuse_two_clusters()


def test_torchtrainer_runs_under_ray_only_and_one_process_per_node(inventory_for):
    with pytest.raises(PlanError, match="--launcher torchtrainer runs under Ray"):
        build_run_plan(inventory_for(None), run_spec("torchtrainer", procs=1))
    with pytest.raises(PlanError, match="one process per node"):
        build_run_plan(inventory_for(Starter.TASKS), run_spec("torchtrainer", procs=2))
    plan = build_run_plan(inventory_for(Starter.TASKS), run_spec("torchtrainer", procs=1))
    assert len(plan.launches) == 2
    script = plan.launches[1].script
    assert "come from Ray Train's TorchTrainer" in script
    assert "export RANK" not in script and "export MASTER_ADDR" not in script


@pytest.fixture
def inventory_for():
    def make(starter: Starter | None):
        inventory = ray_inventory("h:1", [_node("127.0.0.2"), _node("127.0.0.3")])
        from dataclasses import replace

        return replace(inventory, starter=starter)

    return make


def own_tag() -> str:
    """A launch tag no other test's scripts carry: a guard that fires (its worker died, or its
    NodeProcess was collected, closing the guard's pipe) ends every process with its tag."""
    return uuid.uuid4().hex


def test_the_node_actor_streams_the_script_and_stops_its_group(tmp_path):
    files = [("node-0.sh", b"echo one; echo two; sleep 600 & wait\n", 0o700)]
    node = NodeProcess(own_tag())
    node.start(str(tmp_path), files, "node-0.sh")
    lines: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(lines) < 2 and time.monotonic() < deadline:
        lines += node.poll()[0]
        time.sleep(0.05)
    assert lines == [b"one\n", b"two\n"]
    assert node.proc is not None
    group = node.proc.pid
    assert node.stop(grace_s=1.0) == ([], None)  # stopped: no exit of its own
    assert _live_in_group(group) == []  # its background sleep too


def test_a_daemon_the_script_leaves_untagged_and_out_of_its_group_ends_with_it(tmp_path):
    """A cleared environment (no tag) and setsid (out of the group the stop ends): only the
    reaper the script runs under finds it. Before, it ran on after the script's exit 0."""
    pid = tmp_path / "daemon.pid"
    daemon = f"sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {shlex.quote(str(pid))}"
    script = f"env -i setsid sh -c {shlex.quote(daemon)}; exit 0\n".encode()
    node = NodeProcess(own_tag())
    node.start(str(tmp_path), [("n.sh", script, 0o700)], "n.sh")
    try:
        assert node.poll(60.0)[1] == 0
        assert ended(int(pid.read_text()))
    finally:
        with contextlib.suppress(psutil.Error, ValueError, OSError):
            psutil.Process(int(pid.read_text())).kill()


def _live_in_group(group: int) -> list[int]:
    """Processes of the group that are not zombies (this machine's init may reap late)."""
    live = []
    for proc in psutil.process_iter(["status"]):
        # os.getpgid raises ProcessLookupError for one that ended since process_iter saw it
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(proc.pid) == group and proc.info["status"] != psutil.STATUS_ZOMBIE:
                live.append(proc.pid)
    return live


def test_the_node_actor_gives_the_exit_code_with_the_last_lines(tmp_path):
    node = NodeProcess(own_tag())
    node.start(str(tmp_path), [("n.sh", b"echo first; echo last; exit 3\n", 0o700)], "n.sh")
    seen: list[bytes] = []
    code = None
    deadline = time.monotonic() + 20
    while code is None and time.monotonic() < deadline:
        out, code = node.poll()
        seen += out
        time.sleep(0.05)
    assert (seen, code) == ([b"first\n", b"last\n"], 3)


def test_a_held_poll_answers_once_the_script_ends_not_when_its_wait_is_over(tmp_path):
    node = NodeProcess(own_tag())
    node.start(str(tmp_path), [("n.sh", b"sleep 0.5; echo last; exit 4\n", 0o700)], "n.sh")
    began = time.monotonic()
    out, code = node.poll(60.0)
    # a poll that held its whole wait would take 60 s; the script's end came after 0.5
    assert (out, code) == ([b"last\n"], 4)
    assert time.monotonic() - began < 30


def test_a_held_poll_of_a_running_script_waits_its_time_and_keeps_the_lines(tmp_path):
    node = NodeProcess(own_tag())
    node.start(str(tmp_path), [("n.sh", b"echo early; sleep 600\n", 0o700)], "n.sh")
    try:
        deadline = time.monotonic() + 20
        while not node.output and time.monotonic() < deadline:  # the line is in
            time.sleep(0.01)
        began = time.monotonic()
        out, code = node.poll(0.5)
        assert time.monotonic() - began >= 0.5  # lines alone do not cut the wait short
        assert (out, code) == ([b"early\n"], None)
    finally:
        node.stop(grace_s=1.0)


# Ray's name as a word (not "array", "gray"): the files outside its own package that name it
RAY_WORD = re.compile(r"\bray\b", re.IGNORECASE)
ALLOWED = {"runner/engines/registry.py"}


def test_ray_is_named_nowhere_in_runner_or_templates_outside_its_own_files():
    named = sorted(
        str(path.relative_to(REPO))
        for top in ("runner", "templates")
        for path in (REPO / top).rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and not str(path.relative_to(REPO)).startswith(("runner/engines/ray/", "templates/ray/"))
        and str(path.relative_to(REPO)) not in ALLOWED
        and RAY_WORD.search(path.read_text(errors="replace"))
    )
    assert named == []


def test_the_docs_list_every_file_outside_its_package_that_adding_ray_touched():
    page = (REPO / "docs" / "engines.md").read_text()
    for touched in ("runner/engines/registry.py", "pyproject.toml", "dev"):
        assert f"`{touched}`" in page
    assert Path(REPO / "docs" / "ray.md").is_file()


# A Ray worker in small: NodeProcess started in a process of its own, which prints the script's
# process group and waits to be killed.
WORKER = """
import sys, time
from dtrun.engines.ray.node import NodeProcess
node = NodeProcess(sys.argv[1])
node.spawn(["bash", "-c", "sleep 600 & sleep 600 & wait"])
print(node.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_node_script_ends_when_its_worker_dies_as_ray_kills_it(tmp_path):
    """Ray SIGKILLs a dying worker's direct children (its kill_child_processes_on_worker_exit):
    the script's shell goes, its own children stay unless the guard, no child of the worker,
    ends the group. Before, the guard was a direct child and went with the shell."""
    worker = psutil.Popen([sys.executable, "-c", WORKER, own_tag()], stdout=subprocess.PIPE,
                          cwd=tmp_path)  # fmt: skip
    assert worker.stdout is not None
    group = int(worker.stdout.readline())
    deadline = time.monotonic() + 20
    while len(_live_in_group(group)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_live_in_group(group)) == 3  # bash and its two sleeps
    _die_as_ray_kills(worker)
    deadline = time.monotonic() + 30
    while _live_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _live_in_group(group) == []


def test_a_rank_in_a_session_of_its_own_ends_when_its_worker_dies(tmp_path):
    """torchrun's workers have sessions of their own: when the Ray worker dies and SIGKILLs its
    child (the reaper), the group's stop misses them; the guard finds them by the launch's tag.
    Before, such a rank ran on, parent init, once its torchrun had been SIGKILLed."""
    pid = tmp_path / "rank.pid"
    rank = f"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {shlex.quote(str(pid))}; wait"
    worker = psutil.Popen(
        [sys.executable, "-c", WORKER.replace('"sleep 600 & sleep 600 & wait"', repr(rank)),
         own_tag()],
        stdout=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        worker.stdout.readline()
        deadline = time.monotonic() + 20
        while not (pid.exists() and pid.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        _die_as_ray_kills(worker)
        wait_for(lambda: ended(int(pid.read_text())), timeout=30, what="the rank to end")
    finally:
        with contextlib.suppress(psutil.Error, ValueError, OSError):
            psutil.Process(int(pid.read_text())).kill()


def test_a_dead_workers_guard_leaves_another_nodes_rank_on_the_same_machine(tmp_path):
    """Two nodes of one launch on one host (two raylets there), tagged as the executor tags
    them: when one node's worker dies, its guard ends that node's rank, not the other's. With
    one tag for the launch it ended both (CI: ray-1's raylet killed, ray-0's torchrun got
    SIGTERM from ray-1's guard before dtrun stopped it)."""
    launch = own_tag()
    pids = [tmp_path / f"rank-{index}.pid" for index in range(2)]
    workers = []
    try:
        for index, pid in enumerate(pids):  # a rank in a session of its own, as torchrun's
            rank = f"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {pid}; wait"
            code = WORKER.replace('"sleep 600 & sleep 600 & wait"', repr(rank))
            workers.append(psutil.Popen([sys.executable, "-c", code, node_tag(launch, index)],
                                        stdout=subprocess.PIPE, cwd=tmp_path))  # fmt: skip
        wait_for(lambda: all(p.exists() and p.read_text().strip() for p in pids), timeout=20,
                 what="both ranks")  # fmt: skip
        ranks = [int(pid.read_text()) for pid in pids]
        _die_as_ray_kills(workers[1])
        wait_for(lambda: ended(ranks[1]), timeout=30, what="the dead node's rank to end")
        time.sleep(1.0)  # the guard's SIGTERM is sent at once; SIGKILL would follow in 5 s
        assert not ended(ranks[0])
    finally:
        for worker in workers:
            with contextlib.suppress(psutil.Error):
                _die_as_ray_kills(worker)
        for pid in pids:
            with contextlib.suppress(psutil.Error, ValueError, OSError):
                psutil.Process(int(pid.read_text())).kill()


def _die_as_ray_kills(worker: psutil.Popen) -> None:
    """A dying Ray worker SIGKILLs its direct children (kill_child_processes_on_worker_exit)."""
    for child in worker.children():
        child.kill()
    worker.kill()
    worker.wait()


def test_a_command_task_streams_its_lines_and_ends_with_its_exit_code(tmp_path):
    """The first line is handed over while the script waits (for a file, not for a time: no
    race on a loaded machine); what it left in its group goes with it."""
    from dtrun.engines.ray.commands import bash

    go = shlex.quote(str(tmp_path / "go"))
    task = bash(f"echo $$; until [ -e {go} ]; do sleep 0.05; done; echo two; sleep 600 & exit 3",
                "tag")  # fmt: skip
    first, code = next(task)  # the script is still waiting: handed over as it came
    assert code is None and len(first) == 1
    group = int(first[0])  # bash -c's pid: its process group
    (tmp_path / "go").touch()
    rest = list(task)
    assert [line for lines, _ in rest for line in lines] == [b"two\n"]
    assert [code for _, code in rest] == [None] * (len(rest) - 1) + [3]
    assert _live_in_group(group) == []  # the background sleep ended with the task


def test_a_script_reaped_by_another_is_a_lost_status_not_exit_0():
    """A Ray worker whose raylet died reaps its children itself; Popen.poll then reads the
    missing status as exit 0, a success. The node's actor says the status was lost."""
    from dtrun.engines.ray.node import LostStatusError

    node = NodeProcess(own_tag())
    node.spawn(["bash", "-c", "exit 7"])
    assert node.proc is not None
    os.waitpid(node.proc.pid, 0)  # another reaper took it, and its status with it
    with pytest.raises(LostStatusError, match="exit status was lost"):
        node.poll()
    assert node.stop(grace_s=1.0)[1] is None  # and a stop says nothing about how it ended


def test_what_an_ended_script_left_gets_its_grace_before_sigkill(tmp_path):
    """The script has exited, its background child has not: the stop's SIGTERM is followed by
    the grace for the whole group, not by SIGKILL at once because the script itself is gone
    (which also returned while the child was still dying: CI saw it alive)."""
    said, armed = tmp_path / "said", tmp_path / "armed"
    node = NodeProcess(own_tag())
    child = f"trap 'sleep 0.2; echo bye > {shlex.quote(str(said))}; exit 0' TERM; "
    child += f": > {shlex.quote(str(armed))}; while :; do sleep 0.05; done"
    node.spawn(["bash", "-c", f"bash -c {shlex.quote(child)} & echo $$; exit 3"])
    assert node.proc is not None
    node.proc.wait(timeout=20)  # the script is over; its child runs on in its group
    # its trap set (CI once stopped it first: bash's default for TERM, death, wrote nothing)
    deadline = time.monotonic() + 20
    while not armed.exists():
        assert time.monotonic() < deadline, "the child never set its trap"
        time.sleep(0.01)
    _, code = node.stop(grace_s=20.0)
    assert code == 3
    assert said.read_text() == "bye\n"  # its TERM handler ran to its end
    assert _live_in_group(node.proc.pid) == []


@pytest.mark.parametrize("command", [["exec", "--", "true"], ["check"], ["bench", "--nodes", "1"]])
def test_a_ray_head_that_does_not_answer_exits_1_naming_it(tmp_path, monkeypatch, command):
    from typer.testing import CliRunner

    from dtrun.cli.app import app

    monkeypatch.chdir(tmp_path)
    name, *rest = command
    done = CliRunner().invoke(app, [name, "--ray", "127.0.0.1:1", *rest])
    said = " ".join(done.output.split())
    assert done.exit_code == 1, said
    assert "cannot connect to the Ray cluster at 127.0.0.1:1" in said, said
    assert "Traceback" not in said


class _Ray:
    """What RaySession.close asks of Ray, counted."""

    def __init__(self) -> None:
        self.shut = 0

    def shutdown(self) -> None:
        self.shut += 1


@pytest.mark.parametrize("trained", [False, True])
def test_detached_actors_are_looked_up_only_after_a_torchtrainer_ran(monkeypatch, trained):
    """Ray Train's are the only detached actors a dtrun job makes; under torchrun the lookup's
    GCS queries (0.1-0.3 s of each Ray point, benchmarks/ray_trace.py) are skipped."""
    looked: list[bool] = []
    session = RaySession("h:1")
    session.ray, session.trained = _Ray(), trained
    monkeypatch.setattr(RaySession, "kill_detached", lambda self: looked.append(True))
    session.close()
    assert looked == ([True] if trained else [])
    assert session.ray is None


class _SlowRay(_Ray):
    """A disconnect that takes its time, on the thread it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.on: list[str] = []

    def shutdown(self) -> None:
        self.on.append(threading.current_thread().name)
        self.go.wait(10)
        super().shutdown()


def test_a_release_disconnects_beside_the_report_and_the_close_waits_for_it():
    """The sweep's report is written while Ray disconnects (Cluster.release); leaving the
    engine's block still ends only once the job has."""
    session = RaySession("h:1")
    ray = _SlowRay()
    session.ray = ray
    session.close_soon()
    session.close_soon()  # once is enough
    assert ray.shut == 0  # the caller goes on (to its report) while Ray disconnects
    closed = threading.Thread(target=session.close)
    closed.start()
    closed.join(0.3)
    assert closed.is_alive()  # close waits for the disconnect under way
    ray.go.set()
    closed.join(10)
    assert not closed.is_alive() and ray.shut == 1 and session.ray is None
    assert ray.on == ["dtrun-ray-close-1"]


# dtrun's end while Ray's disconnect, begun by close_soon, never ends (an Event no one sets)
_STUCK_CLOSE = """
import threading
from dtrun.engines.ray.session import RaySession

class Stuck:
    def shutdown(self):
        threading.Event().wait()

session = RaySession("h:1")
session.ray = Stuck()
session.close_soon()
print("leaving", flush=True)
"""


def test_dtrun_exits_while_rays_disconnect_never_ends():
    """close_soon's thread is a daemon (DaemonThreads, as the other engines' threads): Python's
    exit does not wait for it. Before, it was no daemon and the exit joined it: dtrun hung for
    as long as Ray's shutdown did (here, for good). Python 3.11 let a Ctrl-C'd close() mark the
    thread ended (bpo-45274's handling), which hid it there; nothing else did."""
    child = subprocess.Popen([sys.executable, "-c", _STUCK_CLOSE], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        out, _ = child.communicate(timeout=60)  # it ends at once, or never
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("dtrun did not exit while Ray's disconnect never ended")
    assert child.returncode == 0 and out.decode().strip() == "leaving", out


class _Actor:
    """A node actor that Ray never places: its calls are refs that never resolve."""

    def __init__(self) -> None:
        self.start = types.SimpleNamespace(remote=lambda *args: object())


class _ActorClass:
    def __init__(self, made: list[_Actor]) -> None:
        self.made = made

    def options(self, **_: object) -> _ActorClass:
        return self

    def remote(self, *_: object) -> _Actor:
        self.made.append(_Actor())
        return self.made[-1]


class _Unplaced:
    """A Ray whose cluster has ray-0 alive and ray-1 gone: a group never placed."""

    def __init__(self) -> None:
        self.made: list[_Actor] = []
        self.killed: list[object] = []

    def remote(self, _cls: object) -> _ActorClass:
        return _ActorClass(self.made)

    def kill(self, actor: object, no_restart: bool) -> None:
        self.killed.append(actor)

    def nodes(self) -> list[dict[str, object]]:
        return [_node("127.0.0.2"), _node("127.0.0.3", alive=False)]


def _launch_on(monkeypatch, tmp_path, wait):
    """A two-node launch on a Ray whose placement group's wait is ``wait``."""
    import importlib

    from dtrun.engines.ray.executor import RayExecutor, _Launch, _Node

    pgs = importlib.import_module("ray.util.placement_group")  # the module: ray.util's name
    strategies = importlib.import_module("ray.util.scheduling_strategies")  # is its function
    group = types.SimpleNamespace(wait=wait)
    monkeypatch.setattr(pgs, "placement_group", lambda *a, **k: group)
    monkeypatch.setattr(strategies, "PlacementGroupSchedulingStrategy", lambda *a: None)
    ray = _Unplaced()
    session = types.SimpleNamespace(ray=ray)
    executor = RayExecutor(session, {}, place_s=7.0)  # type: ignore[arg-type]
    nodes = [
        _Node(types.SimpleNamespace(  # type: ignore[arg-type]
            node=types.SimpleNamespace(name=f"ray-{i}", address=address),
            script_name=f"ray-{i}.sh", script="true\n"), log=None)  # type: ignore[arg-type]
        for i, address in enumerate(("127.0.0.2", "127.0.0.3"))
    ]  # fmt: skip
    plan = types.SimpleNamespace(files=[], rdzv_id="r1")
    launch = _Launch(executor, plan, tmp_path, nodes, lambda *_: None)  # type: ignore[arg-type]
    return launch, ray, nodes


def test_a_group_ray_cannot_place_kills_the_actors_asked_for_and_names_the_gone_node(
    monkeypatch, tmp_path
):
    """The actors are asked for with the group, before Ray has placed it: when it never is,
    they are killed and the launch says which node Ray has not, with nothing left to stop."""
    from dtrun.errors import RunError

    waited: list[float] = []
    launch, ray, nodes = _launch_on(
        monkeypatch, tmp_path, lambda timeout_seconds: waited.append(timeout_seconds)
    )
    with pytest.raises(RunError) as raised:
        launch.place()
    assert waited == [7.0]
    assert len(ray.made) == 2 and ray.killed == ray.made
    assert [node.actor for node in nodes] == [None, None]  # so the stop asks none of them
    said = str(raised.value) + " " + str(raised.value.why)
    assert "did not place the launch's 2 bundles within 7 s" in said, said
    assert "no live node at ray-1 (127.0.0.3)" in said, said


def test_ctrl_c_while_ray_places_the_group_kills_the_actors_and_leaves_none_to_stop(
    monkeypatch, tmp_path
):
    def interrupted(timeout_seconds: float) -> bool:
        raise KeyboardInterrupt

    launch, ray, nodes = _launch_on(monkeypatch, tmp_path, interrupted)
    with pytest.raises(KeyboardInterrupt):
        launch.place()
    assert len(ray.made) == 2 and ray.killed == ray.made
    assert not any(node.running for node in nodes)  # the stop waits on none of them


def _one_node_launch(tmp_path, heard: list[tuple[str, str]]):
    """A launch of one node, ray-0, on no Ray: what it writes, its log and ``heard`` (its
    console lines) get."""
    from dtrun.engines.ray.executor import RayExecutor, _Launch, _Node
    from dtrun.workloads.files import NodeLog

    node = _Node(types.SimpleNamespace(  # type: ignore[arg-type]
        node=types.SimpleNamespace(name="ray-0", address="127.0.0.2"),
        script_name="ray-0.sh", script="true\n"), log=NodeLog(tmp_path / "ray-0.log"))  # fmt: skip
    executor = RayExecutor(types.SimpleNamespace(ray=None), {})  # type: ignore[arg-type]
    plan = types.SimpleNamespace(files=[], rdzv_id="r1")
    launch = _Launch(executor, plan, tmp_path, [node], lambda *line: heard.append(line))  # type: ignore[arg-type]
    return launch, node


def test_what_a_node_prints_once_dtrun_stopped_it_goes_to_its_log_only(tmp_path):
    # CI: ray-1's raylet was killed, dtrun stopped ray-0, and torchrun's SignalException
    # traceback from ray-0 reached the console among dtrun's own lines (the other engines keep
    # what a stopped node prints in its log: tests/e2e/test_e2e.py)
    heard: list[tuple[str, str]] = []
    launch, node = _one_node_launch(tmp_path, heard)
    launch.write(node, [b"step 1\n"])
    node.stopped = True
    launch.write(node, [b"Traceback (most recent call last):\n"])
    node.log.close()
    assert heard == [("ray-0", "step 1")]
    assert (tmp_path / "ray-0.log").read_text() == "step 1\nTraceback (most recent call last):\n"


def test_a_progress_bar_s_states_come_one_by_one_as_on_the_other_engines(tmp_path):
    """Read by lines ("\\n"), a tqdm bar's states came as one line once the bar closed: the
    console showed nothing while it ran, --step-pattern saw one step where the bar drew
    three, and the actor held the bar's whole output until then."""
    script = b"printf 'step 1\\r'; printf 'step 2\\r'; printf 'step 3\\n'\n"
    node = NodeProcess(own_tag())
    node.start(str(tmp_path), [("n.sh", script, 0o700)], "n.sh")
    lines: list[bytes] = []
    code = None
    deadline = time.monotonic() + 20
    while code is None and time.monotonic() < deadline:
        out, code = node.poll(0.2)
        lines += out
    assert (lines, code) == ([b"step 1\r", b"step 2\r", b"step 3\n"], 0)
    heard: list[tuple[str, str]] = []
    launch, state = _one_node_launch(tmp_path, heard)
    launch.write(state, lines)
    state.log.close()
    # each state with its "\r", as the sinks of the other engines get it (scripts.line_text)
    assert heard == [("ray-0", "step 1\r"), ("ray-0", "step 2\r"), ("ray-0", "step 3")]


@pytest.mark.parametrize("raised", [True, False], ids=["start-raised", "actor-died"])
def test_a_start_that_raised_is_said_as_a_start_not_as_a_lost_node(monkeypatch, tmp_path, raised):
    """A node whose actor's start raised (its launch directory not writable there) was "lost:
    Ray ended its actor", and the fix sent the user to raylet.out. Ray still has the node: the
    launch could not start on it, and the fix says where it writes."""
    exceptions = pytest.importorskip("ray.exceptions")
    launch, ray, _ = _launch_on(monkeypatch, tmp_path, lambda timeout_seconds: True)
    cause = PermissionError(13, "Permission denied", str(tmp_path))
    failure = (
        exceptions.RayTaskError(
            "start", "Traceback", cause, pid=42, ip="127.0.0.3"
        ).as_instanceof_cause()
        if raised
        else exceptions.ActorDiedError()
    )
    answers = iter([("127.0.0.2", "h0"), failure])

    def get(ref: object) -> object:
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    made = types.SimpleNamespace(start=types.SimpleNamespace(remote=lambda *_: object()))
    actors = types.SimpleNamespace(remote=lambda *_: made)
    monkeypatch.setattr(
        ray, "remote", lambda _cls: types.SimpleNamespace(options=lambda **_: actors), raising=False
    )
    ray.exceptions, ray.get = exceptions, get
    launch.place()
    error = launch.lost_first()
    assert error is not None and error.lost_node == "ray-1"  # a check goes on without it
    said = f"{error} | {error.why} | {error.fix}"
    if raised:
        assert "ray-1 (127.0.0.3) could not start its launch" in said, said
        assert "PermissionError: [Errno 13] Permission denied" in said, said
        assert str(tmp_path) in error.fix and "raylet.out" not in said, said
    else:
        assert "ray-1 (127.0.0.3) was lost: Ray ended its actor" in said, said
        assert "raylet.out" in error.fix, said


def test_a_node_log_the_disk_cannot_hold_ends_the_wait_with_the_disks_error(tmp_path):
    """The node prints on; its log refuses a line (ENOSPC): the wait ends with that error,
    naming the log, for run's finally to stop every node, not at --timeout."""
    import errno

    launch, node = _one_node_launch(tmp_path, [])
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC, as on a full disk
    assert node.log._fd is not None
    os.dup2(full, node.log._fd)
    os.close(full)
    polls = []

    class Actor:
        class poll:  # Ray's actor method, called as .remote
            @staticmethod
            def remote(wait_s: float) -> str:
                polls.append(wait_s)
                return f"poll-{len(polls)}"

    class Ray:
        exceptions = types.SimpleNamespace(RayError=RuntimeError)

        def wait(self, refs, num_returns, timeout):
            return refs, []

        def get(self, ref):
            return [b"x" * 200 + b"\n"], None  # still running

    node.actor, launch.ray, node.launch.service, launch.plan.nnodes = Actor(), Ray(), False, 1
    with pytest.raises(OSError) as raised:
        launch.supervise(timeout_s=2.0)  # before: the time ran out, the node still running
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(node.log.path))
    assert len(polls) == 1  # at the first answer the log refused


def _two_ray_nodes() -> tuple[LaunchPlan, RayExecutor]:
    """A 2-node torchrun plan on Ray, and a RayExecutor with no Ray session (its launch's
    place and stop stand-ins)."""
    launches = tuple(
        NodeLaunch(Node(f"ray-{i}", f"127.0.0.{i + 2}"), i, f"ray-{i}.sh", "true\n")
        for i in range(2)
    )
    plan = LaunchPlan("torchrun", "train", 2, 1, 2, 8, "r", "h", 1, launches)
    return plan, RayExecutor(types.SimpleNamespace(ray=None), {})  # type: ignore[arg-type]


def test_an_oserror_that_is_no_node_log_s_keeps_its_type_and_traceback(monkeypatch, tmp_path):
    """Only a node log the disk cannot hold is a cut launch (LogCut). Any other OSError while
    the launch runs (here Ray's own ConnectionError, its head gone) is raised as it is, with
    its type and traceback, once every node is stopped. Before, it came back as a LogCut
    "[Errno None] None" raised from run, its origin lost."""
    from dtrun.engines.ray.executor import _Launch
    from dtrun.execute import LogCut

    stopped: list[str] = []

    def head_gone(self: object) -> None:
        raise ConnectionError("Ray's GCS at 127.0.0.2:6379 does not answer")

    monkeypatch.setattr(_Launch, "place", head_gone)
    monkeypatch.setattr(_Launch, "stop", lambda self: stopped.append("every node"))
    plan, executor = _two_ray_nodes()
    with pytest.raises(OSError) as raised:
        executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    assert type(raised.value) is ConnectionError and not isinstance(raised.value, LogCut)
    assert "head_gone" in [entry.name for entry in raised.traceback]
    assert stopped == ["every node"]


def test_a_ctrl_c_while_a_cut_log_s_launch_stops_is_the_interruption_and_says_the_cut(
    monkeypatch, tmp_path
):
    """ray-0's log could not be written (a full disk) and a Ctrl-C came while every node was
    stopped for it: the launch is interrupted, with the cut as its end (records: interrupted,
    saying both). Before, the Ctrl-C was dropped and the launch raised the cut alone (LogCut:
    failed, exit 1)."""
    import errno
    import signal

    from dtrun.engines.ray.executor import _Launch
    from dtrun.errors import LaunchInterrupted

    def cut(self: _Launch) -> None:
        log = self.nodes[0].log
        log.error = OSError(errno.ENOSPC, "No space left on device", str(log.path))
        raise log.error

    monkeypatch.setattr(_Launch, "place", cut)
    monkeypatch.setattr(_Launch, "stop", lambda self: signal.raise_signal(signal.SIGINT))
    plan, executor = _two_ray_nodes()
    with pytest.raises(LaunchInterrupted) as raised:
        executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    ended = raised.value.ended
    assert ended is not None
    assert f"node log {tmp_path.resolve() / 'ray-0.log'} could not be written" in ended.what
    assert [r.node for r in raised.value.node_results] == ["ray-0", "ray-1"]


def test_a_node_log_the_disk_cannot_hold_ends_run_with_logcut_and_every_nodes_end(
    monkeypatch, tmp_path
):
    """ray-0's log refuses a line (ENOSPC) while the launch runs: every node is stopped, and
    run raises LogCut with the disk's error and file and how every node ended, for the
    launch's record (runner/sweep/runlaunch.py) as the other engines' cut launches."""
    import errno

    from dtrun.engines.ray.executor import _Launch
    from dtrun.execute import LogCut

    stopped: list[str] = []

    def cut(self: _Launch, timeout_s: float) -> None:
        log = self.nodes[0].log
        log.error = OSError(errno.ENOSPC, "No space left on device", str(log.path))
        raise log.error

    monkeypatch.setattr(_Launch, "place", lambda self: None)
    monkeypatch.setattr(_Launch, "supervise", cut)
    monkeypatch.setattr(_Launch, "stop", lambda self: stopped.append("every node"))
    plan, executor = _two_ray_nodes()
    with pytest.raises(LogCut) as raised:
        executor.run(plan, tmp_path, timeout_s=60, on_line=lambda *_: None)
    assert stopped == ["every node"]
    cut_log = str(tmp_path.resolve() / "ray-0.log")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, cut_log)
    assert [r.node for r in raised.value.node_results] == ["ray-0", "ray-1"]


class _CommandRay:
    """A Ray whose one command task hands over ``chunks`` (Ray's generator task: each next() a
    ref to one chunk, here the chunk itself), one by one, as fast as they are asked for."""

    exceptions = types.SimpleNamespace(RayError=RuntimeError)

    def __init__(self, chunks: Iterator[tuple[list[bytes], int | None]]) -> None:
        task = types.SimpleNamespace(remote=lambda *_: iter(chunks))
        self.task = types.SimpleNamespace(options=lambda **_: task)

    def remote(self, **_: object) -> object:
        return lambda _fn: self.task

    def wait(
        self, refs: list[object], num_returns: int, timeout: float
    ) -> tuple[list[object], list[object]]:
        return refs[:1], refs[1:]

    def get(self, ref: object) -> object:
        return ref


def test_a_node_printing_without_end_leaves_its_answer_its_last_lines_only():
    """`dtrun exec` on a node that prints far more than an answer keeps (here 3 times
    ANSWER_MOST): every line is shown as it comes, and the answer holds the last ANSWER_MOST
    characters, where its readers' markers are. Before, every line was held in dtrun's memory
    till the end: a node printing a gigabyte grew dtrun by as much."""
    from dtrun.engines.common.scripts import ANSWER_MOST
    from dtrun.engines.ray.commands import run_commands

    line = b"x" * 1014 + b"\n"  # 1024 bytes with its number
    count = 3 * ANSWER_MOST // 1024

    def chunks() -> Iterator[tuple[list[bytes], int | None]]:
        for start in range(0, count, 64):
            yield [b"%08d " % i + line for i in range(start, min(start + 64, count))], None
        yield [b"dtrun-marker done\n"], 0

    shown = [0]
    session = types.SimpleNamespace(ray=_CommandRay(chunks()))
    answers = run_commands(session, {"ray-0": "127.0.0.2"}, {"ray-0": "yes"},  # type: ignore[arg-type]
                           lambda node, text: shown.__setitem__(0, shown[0] + 1))  # fmt: skip
    answer = answers["ray-0"]
    assert answer.exit_code == 0 and shown[0] == count + 1
    assert len(answer.output) <= ANSWER_MOST
    kept = answer.output.splitlines()
    assert kept[-1] == "dtrun-marker done"
    assert kept[-2].startswith(f"{count - 1:08d} ") and len(kept) >= ANSWER_MOST // 1024 - 1


def test_a_node_whose_actor_stopped_answering_is_named_as_hung_at_the_timeout(
    monkeypatch, tmp_path
):
    """ray-1's node hangs (its machine, its raylet and worker SIGSTOPped): its polls never
    answer, and Ray calls it dead only once its health checks fail (about a minute). At the
    launch's deadline dtrun says which node had stopped answering, by name and address, not
    only that both still ran; ray-0, which answered all along, is not named so."""
    from dtrun.engines.ray import executor as ray_executor
    from dtrun.errors import RunTimeoutError
    from dtrun.workloads.files import NodeLog

    monkeypatch.setattr(ray_executor, "POLL_S", 0.01)
    monkeypatch.setattr(ray_executor, "ANSWER_S", 0.01)

    class Actor:
        def __init__(self, name: str) -> None:
            self.poll = types.SimpleNamespace(remote=lambda wait_s: name)

    class Ray:
        exceptions = types.SimpleNamespace(RayError=RuntimeError)

        def wait(self, refs, num_returns, timeout):
            time.sleep(0.01)  # a poll's time; ray-1's never answers
            return [ref for ref in refs if ref == "ray-0"], []

        def get(self, ref):
            return [], None  # ray-0 runs on, printing nothing

    plan, executor = _two_ray_nodes()
    nodes = [ray_executor._Node(launch, NodeLog(tmp_path / f"{launch.node.name}.log"))
             for launch in plan.launches]  # fmt: skip
    launch = ray_executor._Launch(executor, plan, tmp_path, nodes, lambda *_: None)
    launch.ray = Ray()
    for node in nodes:
        node.actor, node.started = Actor(node.launch.node.name), time.monotonic()
    nodes[0].answered = nodes[0].started
    nodes[1].answered = nodes[1].started - 100.0  # its last answer, past SILENT_S
    error = launch.supervise(timeout_s=0.3)
    for node in nodes:
        node.log.close()
    assert isinstance(error, RunTimeoutError)
    why = str(error.why)
    assert why.startswith("still running when stopped: ray-0, ray-1; "), why
    assert "; ray-1 (127.0.0.3) had not answered dtrun for 100 s" in why and "its node hangs" in why
    assert "ray-0 (127.0.0.2)" not in why, why


def test_a_node_is_named_hung_only_for_silence_after_its_start_not_its_placement(
    monkeypatch, tmp_path
):
    """Ray took 30 s to place the group and --timeout was 1 s: at the deadline both nodes'
    starts had returned a second before, yet each "had not answered dtrun for 31 s: its node
    hangs", its silence counted from when its actor was asked for. It counts from its start's
    return: neither is named hung, until one is silent past SILENT_S after it."""
    from dtrun.engines.ray import executor as ray_executor

    now = [0.0]
    monkeypatch.setattr(ray_executor, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    def slow_placement(timeout_seconds: float) -> bool:
        now[0] += 30.0
        return True

    launch, ray, nodes = _launch_on(monkeypatch, tmp_path, slow_placement)
    answers = iter([("127.0.0.2", "h0"), ("127.0.0.3", "h1")])
    made = types.SimpleNamespace(start=types.SimpleNamespace(remote=lambda *_: object()))
    actors = types.SimpleNamespace(remote=lambda *_: made)
    monkeypatch.setattr(
        ray, "remote", lambda _cls: types.SimpleNamespace(options=lambda **_: actors), raising=False
    )
    monkeypatch.setattr(ray, "get", lambda _ref: next(answers), raising=False)
    launch.plan.nnodes = 2
    launch.place()
    now[0] += 1.0
    why = str(launch.timed_out(1.0, nodes).why)
    assert why == "still running when stopped: ray-0, ray-1", why
    now[0] += ray_executor.SILENT_S + 1.0
    nodes[0].answered = now[0] - 0.2  # ray-0 answers its polls; ray-1 never did
    why = str(launch.timed_out(1.0, nodes).why)
    assert "; ray-1 (127.0.0.3) had not answered dtrun for 12 s: its node hangs" in why, why
    assert "ray-0 (127.0.0.2)" not in why, why
