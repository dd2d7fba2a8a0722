"""`dtrun check` when a node hangs mid-check: every process of the fourth sshd node (its sshd,
its sessions, the ranks) is stopped with SIGSTOP once every rank has joined. Nothing closes a
connection, as when a host freezes or loses power behind a switch that keeps its links up: its
kernel still acknowledges, nothing answers. The user's ~/.ssh/config sets the keepalives that
find it (ServerAliveInterval 2, ServerAliveCountMax 3: 6 s; dtrun's own, 45 s). The other tests
of a node lost mid-check close its connections (tests/e2e/test_check.py)."""

from __future__ import annotations

import contextlib
import json
import signal
import threading

import psutil
import pytest

from tests import faults
from tests.conftest import run_dtrun, wait_for
from tests.e2e.test_check import _hosts
from tests.e2e.test_ssh_jump import user_env

pytestmark = pytest.mark.e2e


def _frozen(pid: int) -> list[psutil.Process]:
    """SIGSTOP a process and every descendant; the stopped processes, the root first."""
    root = psutil.Process(pid)
    stopped = []
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # one that ended while they were listed
            proc.send_signal(signal.SIGSTOP)
            stopped.append(proc)
    return stopped


ALIVE = "Host *\n  ServerAliveInterval 2\n  ServerAliveCountMax 3\n"


@pytest.mark.alone  # the three others checked "ok": a clean measurement, a quiet machine's claim
def test_a_node_that_hangs_mid_check_is_named_lost_and_the_others_are_checked(
    sshd_cluster, no_leftovers
):
    hung = sshd_cluster.hosts[3]
    hosts = _hosts(sshd_cluster, no_leftovers)
    frozen: list[psutil.Process] = []

    def hang() -> None:
        wait_for(lambda: faults.check_said(no_leftovers, "dtrun: checking"), timeout=200,
                 what="every rank to join")  # fmt: skip
        frozen.extend(_frozen(sshd_cluster.processes[hung.address].pid))

    freezer = threading.Thread(target=hang, daemon=True)
    freezer.start()
    try:
        done = run_dtrun(
            "check", "--hosts", str(hosts), "--port", "29980", "--json",
            "--output", str(no_leftovers / "runs"), "--run-id", "check",
            cwd=no_leftovers, timeout=400, env=user_env(sshd_cluster, no_leftovers, ALIVE),
        )  # fmt: skip
    finally:
        freezer.join(timeout=60)
        for proc in frozen:  # the host is gone: what it ran goes with it
            with contextlib.suppress(psutil.Error):
                proc.kill()
        sshd_cluster.processes.pop(hung.address).wait(timeout=10)
        sshd_cluster.start(hung)  # back for the next test
    assert frozen, "the node was never frozen"
    assert done.returncode == 5, done.stdout + done.stderr
    data = json.loads(done.stdout)
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts.pop(hung.address) == ("failed", "unreachable"), done.stderr
    assert sorted(verdicts) == sorted(h.address for h in sshd_cluster.hosts[:3])
    assert set(verdicts.values()) == {("ok", None)}, done.stderr
    evidence = next(n for n in data["nodes"] if n["host"] == hung.address)["figures"]["evidence"]
    assert evidence[0].startswith("lost during the check:"), evidence
    record = json.loads((no_leftovers / "runs" / "check" / "check.json").read_text())
    assert record["nodes"] == data["nodes"]


def _check_rank(sshd_pid: int) -> psutil.Process | None:
    """The check workload's rank under an sshd (torchrun's worker: RANK set), once it runs."""
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process(sshd_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "dtrun.workloads.check" in proc.cmdline() and "RANK" in proc.environ():
                    return proc
    return None


@pytest.mark.parametrize(
    ("timeout", "port"),
    # 35 s: named only if start-up takes under about 20 s, which needs a quiet machine
    [(120, 29990), pytest.param(35, 29995, marks=pytest.mark.alone)],
)
def test_a_node_whose_check_process_hangs_is_named_at_the_timeout(
    sshd_cluster, no_leftovers, timeout, port
):
    """Only the fourth node's rank is SIGSTOPped: its sshd and torchrun answer, so no
    connection is lost and the check runs to --timeout. The three others say, every 5 s, that
    they wait on the others; the hung node says nothing, and is named. Before, the error said
    only which nodes still ran when stopped: all four. At 35 s it was not named either: a
    rank at work said nothing, so only 30 s of silence told, and start-up here takes about
    15 s; now every rank speaks every 5 s, and 15 s of silence tells."""
    hung = sshd_cluster.hosts[3]
    hosts = _hosts(sshd_cluster, no_leftovers)
    frozen: list[psutil.Process] = []

    def hang() -> None:
        wait_for(lambda: faults.check_said(no_leftovers, "dtrun: checking"), timeout=200,
                 what="every rank to join")  # fmt: skip
        rank = _check_rank(sshd_cluster.processes[hung.address].pid)
        if rank is not None:
            rank.send_signal(signal.SIGSTOP)
            frozen.append(rank)

    freezer = threading.Thread(target=hang, daemon=True)
    freezer.start()
    try:
        done = run_dtrun(
            "check", "--hosts", str(hosts), "--port", str(port), "--timeout", str(timeout),
            "--output", str(no_leftovers / "runs"), "--run-id", "check",
            cwd=no_leftovers, timeout=300,
        )  # fmt: skip
    finally:
        freezer.join(timeout=60)
        for proc in frozen:
            with contextlib.suppress(psutil.Error):
                proc.kill()
    assert frozen, "the rank was never stopped"
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"({hung.address}) said nothing for" in done.stderr, done.stderr
    assert "stopped making progress" in done.stderr, done.stderr
    record = json.loads((no_leftovers / "runs" / "check" / "check.json").read_text())
    assert (record["status"], record["hung_nodes"]) == ("timeout", [hung.address]), record
