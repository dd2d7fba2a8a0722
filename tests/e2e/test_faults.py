"""The fault fixtures (tests/faults.py) slow what they say, measured: a fixed piece of work
under a CPU quota against the same work free, a transfer to a shaped address against one to
another address. Ratios of best-of-N runs, never a bare time (the machine is shared)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import faults
from tests.sshd import SshCluster

# A fixed amount of pure-Python work, its own wall time printed: about 0.1 s on one free
# core here, so a twentieth of a CPU stretches it over a hundred quota periods.
WORK = (
    "import time; t = time.perf_counter(); [sum(range(100_000)) for _ in range(100)]; "
    "print(time.perf_counter() - t)"
)
SHARE = 0.05  # of one CPU: far below what a process gets even on this busy 2-core machine
RUNS = 3


def _work_s(command: list[str], **popen: object) -> float:
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60, **popen)  # type: ignore[call-overload]
    return float(done.stdout.split()[-1])


def test_a_cpu_quota_slows_the_work_of_a_process_in_it() -> None:
    free = faults.best_of(RUNS, lambda: _work_s([sys.executable, "-c", WORK]))
    with faults.cpu_quota(SHARE) as group:

        def throttled() -> float:
            return _work_s([sys.executable, "-c", WORK], preexec_fn=lambda: group.join(os.getpid()))

        slow = faults.best_of(RUNS, throttled)
        periods, _held_s = group.throttled()
    assert periods > 0, "the kernel never held the group back"
    assert slow / free > 2, f"{SHARE} of a CPU: {slow:.3f} s against {free:.3f} s free"


def test_a_cpu_group_is_removed_with_its_tasks_back_in_the_root_group() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        with faults.cpu_quota(SHARE, [sleeper.pid]) as group:
            assert group.pids() == [sleeper.pid]
            path = group.path
        assert not path.exists()
        assert str(sleeper.pid) in (faults.CPU_ROOT / "cgroup.procs").read_text().split()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_cpu_group_is_removed_when_the_test_fails_inside_it() -> None:
    with pytest.raises(RuntimeError, match="inside"), faults.cpu_quota(SHARE) as group:
        path = group.path
        raise RuntimeError("a failure inside the fault")
    assert not path.exists()


def _ssh(cluster: SshCluster, address: str, script: str) -> list[str]:
    return [
        "ssh", "-i", str(cluster.key), "-p", "2222", "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={cluster.known_hosts}", "-o", "StrictHostKeyChecking=yes",
        f"{cluster.user}@{address}", f"{sys.executable} -c '{script}'",
    ]  # fmt: skip


def test_a_slow_sshd_node_runs_what_its_sessions_start_slower(sshd_cluster: SshCluster) -> None:
    fast, slow = (host.address for host in sshd_cluster.hosts[:2])
    with faults.slow_sshd(sshd_cluster, slow, SHARE):
        on_slow = faults.best_of(RUNS, lambda: _work_s(_ssh(sshd_cluster, slow, WORK)))
        on_fast = faults.best_of(RUNS, lambda: _work_s(_ssh(sshd_cluster, fast, WORK)))
    after = faults.best_of(RUNS, lambda: _work_s(_ssh(sshd_cluster, slow, WORK)))
    assert on_slow / on_fast > 2, f"{on_slow:.3f} s on {slow}, {on_fast:.3f} s on {fast}"
    assert on_slow / after > 2, f"{slow} still slow after the fault: {after:.3f} s"


# Waits until the process is in one of the fault fixtures' cpu groups (/proc/self/cgroup names
# it): a fixed 0.5 s head start can be lost to a watcher a loaded machine slows (it reads every
# process's environment each look), and one run that escaped is the best of three
IN_GROUP = (
    "import time\n"
    "while '/dtrun-test-' not in open('/proc/self/cgroup').read():\n"
    "    time.sleep(0.01)\n"
)


def test_a_slow_embedded_node_runs_its_processes_slower() -> None:
    # as the embedded executor starts a node: its name in DTRUN_NODE_NAME; node-1's work starts
    # once the fixture has caught it, as a rank's does after importing torch
    def node(name: str) -> float:
        env = {**os.environ, "DTRUN_NODE_NAME": name}
        program = IN_GROUP + WORK if name == "node-1" else WORK
        return _work_s([sys.executable, "-c", program], env=env)

    with faults.slow_embedded_node("node-1", SHARE):
        slow = faults.best_of(RUNS, lambda: node("node-1"))
        fast = faults.best_of(RUNS, lambda: node("node-0"))
    assert slow / fast > 2, f"{slow:.3f} s on node-1, {fast:.3f} s on node-0"


def test_only_a_worker_of_its_own_network_namespace_may_shape_a_link() -> None:
    assert faults.in_own_network_namespace(), "run the e2e part with -n 1 --worker-netns"
    # a process in its parent's namespace (here the worker's, so nothing outside it could be
    # shaped even if the refusal failed) is refused
    done = subprocess.run(
        [sys.executable, "-c",
         "from tests import faults\n"
         "with faults.slow_link('127.0.0.9'):\n"
         "    pass\n"],
        capture_output=True, text=True, check=False, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert done.returncode == 1
    assert "FaultRefused: a slow link shapes the loopback device" in done.stderr
    assert (
        "htb"
        not in subprocess.run(
            ["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True, check=True
        ).stdout
    )


class _Sink:
    """A TCP server on ``address`` that reads what each connection sends and says how much."""

    def __init__(self, address: str) -> None:
        self.server = socket.create_server((address, 0))
        self.address = self.server.getsockname()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.received: list[int] = []
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                total = 0
                while chunk := connection.recv(1 << 16):
                    total += len(chunk)
                connection.sendall(b"k")  # everything arrived
                self.received.append(total)

    def send_s(self, size: int) -> float:
        """Seconds to deliver ``size`` bytes, until the receiver has read them all."""
        payload = b"x" * size
        start = time.perf_counter()
        with socket.create_connection(self.address) as connection:
            connection.sendall(payload)
            connection.shutdown(socket.SHUT_WR)
            assert connection.recv(1) == b"k"
        return time.perf_counter() - start

    def close(self) -> None:
        self.server.close()


def test_a_slow_link_carries_traffic_to_its_address_at_its_rate() -> None:
    size = 2_000_000  # bytes: 0.8 s at 20 Mbit/s
    shaped, other = _Sink("127.0.0.3"), _Sink("127.0.0.4")
    try:
        with faults.slow_link("127.0.0.3", "20mbit"):
            slow = faults.best_of(RUNS, lambda: shaped.send_s(size))
            fast = faults.best_of(RUNS, lambda: other.send_s(size))
        after = faults.best_of(RUNS, lambda: shaped.send_s(size))
    finally:
        shaped.close()
        other.close()
    mbit = size * 8 / slow / 1e6
    assert shaped.received[0] == size
    assert 10 < mbit < 25, f"the shaped link carried {mbit:.1f} Mbit/s, not about 20"
    assert slow / fast > 10, f"{slow:.3f} s to the shaped address, {fast:.3f} s to another"
    assert slow / after > 10, f"the link is still slow after the fault: {after:.3f} s"
