"""A real two-node Ray cluster on this machine for the Ray tests: ``ray start --head`` on
127.0.0.2 and a second raylet on 127.0.0.3 (docs/ray.md), one CPU each, no dashboard, small
object stores. Each ``ray start`` runs in a session of its own, and every process of the
cluster is in its process group (Ray's daemons and workers do not leave it); each also carries
DTRUN_TEST_RAY=<its own marker> in its environment. ``stop`` finds and ends them by both, and
only them: ``ray stop`` would end every Ray of the machine. The group is what finds the agents:
a Ray process that sets its title (setproctitle) may write over its environment's strings,
and a DashboardAgent and RuntimeEnvAgent a cluster left behind had no marker left to read."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HEAD, SECOND = "127.0.0.2", "127.0.0.3"
PORT = 6390
MARKER = "DTRUN_TEST_RAY"
RAY = str(Path(sys.executable).parent / "ray")
OBJECT_STORE = str(80 * 1024 * 1024)


@dataclass
class RayCluster:
    temp_dir: Path
    marker: str = field(default_factory=lambda: secrets.token_hex(6))
    groups: list[int] = field(default_factory=list)  # each `ray start`'s process group
    port: int = PORT

    @property
    def address(self) -> str:
        return f"{HEAD}:{self.port}"

    def env(self) -> dict[str, str]:
        return {**os.environ, MARKER: self.marker, "RAY_USAGE_STATS_ENABLED": "0"}

    def start(self) -> None:
        self._ray(
            "--head", "--node-ip-address", HEAD, "--port", str(self.port),
            "--include-dashboard", "false", "--temp-dir", str(self.temp_dir),
        )  # fmt: skip
        self.add(SECOND)

    def add(self, address: str) -> None:
        self._ray("--address", self.address, "--node-ip-address", address)
        self.wait_nodes(2)

    def _ray(self, *args: str) -> None:
        starting = subprocess.Popen(
            [RAY, "start", *args, "--num-cpus", "1", "--object-store-memory", OBJECT_STORE,
             "--disable-usage-stats"],
            env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.groups.append(starting.pid)  # a session leader: its pid is its group's id
        out, err = starting.communicate(timeout=120)
        if starting.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out}{err}")

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster (its process groups, its marker), workers and
        their children too."""
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):  # it ended meanwhile
                ours = os.getpgid(proc.pid) in self.groups
                if (ours or proc.environ().get(MARKER) == self.marker) and (
                    proc.status() != "zombie"
                ):
                    found.append(proc)
        return found

    def under(self, address: str, needle: str) -> list[psutil.Process]:
        """The cluster's processes whose command line holds ``needle``, under the raylet of
        ``address``."""
        found = []
        for proc in self.processes():
            try:
                if needle not in " ".join(proc.cmdline()):
                    continue
                raylet = next(p for p in proc.parents() if "raylet" in p.name())
                if f"--node_ip_address={address}" in " ".join(raylet.cmdline()):
                    found.append(proc)
            except (psutil.Error, StopIteration):
                continue
        return found

    def raylet(self, address: str) -> psutil.Process:
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                line = " ".join(proc.cmdline())
                if "raylet" in proc.name() and f"--node_ip_address={address}" in line:
                    return proc
        raise LookupError(f"no raylet on {address}")

    def ask(self, code: str) -> object:
        """What a short driver of this cluster prints as JSON (it is a job of its own)."""
        done = subprocess.run(
            [sys.executable, "-c", ASK_PRELUDE.format(address=self.address) + code],
            env=self.env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"asking Ray failed:\n{done.stderr[-3000:]}")
        answers = [line for line in done.stdout.splitlines() if line.startswith(ANSWER_MARK)]
        if len(answers) != 1:
            raise RuntimeError(f"Ray's driver gave no one answer:\n{done.stdout[-3000:]}")
        return json.loads(answers[0].removeprefix(ANSWER_MARK))

    def leftovers(self) -> dict[str, object]:
        """What dtrun's jobs left: live actors, placement groups not removed, processes of a
        launch (DTRUN_LAUNCH) of this cluster."""
        state = self.ask(LEFTOVERS)
        assert isinstance(state, dict)
        state["processes"] = [p.pid for p in self.processes() if "DTRUN_LAUNCH" in _environ(p)]
        return state

    def nodes_alive(self) -> int:
        alive = self.ask("answer(sum(n['Alive'] for n in ray.nodes()))")
        assert isinstance(alive, int)
        return alive

    def wait_nodes(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.nodes_alive() != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster did not have {count} live nodes in time")
            time.sleep(1)

    def stop(self) -> list[int]:
        """End every process of the cluster; the pids that would not end (none, normally)."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            for proc in self.processes():
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
            deadline = time.monotonic() + wait
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        return [p.pid for p in self.processes()]


@contextlib.contextmanager
def ray_cluster_up() -> Iterator[RayCluster]:
    """A started cluster, stopped at the end with nothing of it left. Its temporary directory
    is short: Ray's sockets live in it, and a socket's path holds at most 107 bytes."""
    temp = Path(tempfile.mkdtemp(prefix="dtray-", dir="/tmp"))
    cluster = RayCluster(temp)
    try:
        cluster.start()
        yield cluster
    finally:
        left = cluster.stop()
        shutil.rmtree(temp, ignore_errors=True)
    assert left == [], f"Ray processes left after the cluster's stop: {left}"


def _environ(proc: psutil.Process) -> dict[str, str]:
    with contextlib.suppress(psutil.Error):
        return proc.environ()
    return {}


# The answer is one line with a mark of its own: Ray itself may print after it ("raylet has
# lagging heartbeats ..." once a raylet was killed; CI caught the last line being that).
ANSWER_MARK = "dtrun-ask-answer:"
ASK_PRELUDE = f"""
import json, logging, ray
def answer(value):
    print("{ANSWER_MARK}" + json.dumps(value), flush=True)
ray.init(address="{{address}}", logging_level=logging.ERROR, log_to_driver=False)
"""

# The jobs whose driver was dtrun (not these short drivers), the actors alive, the placement
# groups not removed.
LEFTOVERS = """
from ray._private import state
me = ray.get_runtime_context().get_job_id()
actors = [a for a in state.actors().values() if a["State"] != "DEAD"]
groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
answer({"actors": [a.get("Name") or a["ActorID"] for a in actors],
        "groups": [g["name"] for g in groups]})
"""
