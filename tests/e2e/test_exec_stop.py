"""`dtrun exec` stopped by a signal stops what it started on every node: SIGTERM, SIGINT and
SIGHUP stop the commands before dtrun exits; after a SIGKILL, the guard does (on the embedded
cluster beside dtrun, runner/engines/common/scripts.py; on sshd nodes in each node's wrapper,
runner/engines/ssh/remote.py). Real processes: the commands are `sleep`s found by their
unique argument."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import DTRUN, wait_for

pytestmark = pytest.mark.e2e


def _sleeps(seconds: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] == ["sleep", str(seconds)]:
            found.append(proc)
    return found


def _exec_then(
    signum: int, where: list[str], nodes: int, tmp_path: Path, line: str = "sleep {s}"
) -> str:
    """`dtrun exec` of a long sleep on every node (``line``, {s} its seconds), ``signum`` once
    every node runs it; its output. No sleep of it may be left a few seconds later."""
    seconds = random.randint(5000, 9999)  # this test's own sleeps
    process = subprocess.Popen(
        [*DTRUN, "exec", *where, "--", line.format(s=seconds) + "; echo finished"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: len(_sleeps(seconds)) == nodes, timeout=60, what="the sleeps")
        os.kill(process.pid, signum)
        out = process.communicate(timeout=60)[0]
        # a stop by dtrun: gone as it exits; a SIGKILL's guard: at once (SIGKILL after 5 s),
        # once its end of the pipe or the SSH connection closes, which a loaded machine delays
        deadline = time.monotonic() + (30 if signum == signal.SIGKILL else 8)
        while _sleeps(seconds) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _sleeps(seconds)
        assert not left, f"left running after {signal.Signals(signum).name}: {left}\n{out}"
    finally:
        process.kill()
        for proc in _sleeps(seconds):
            proc.kill()
    assert "finished" not in out
    return out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_an_embedded_exec_stopped_by_a_signal_leaves_no_command_running(signum, tmp_path):
    out = _exec_then(signum, [], 2, tmp_path)  # the default: 2 nodes
    if signum == signal.SIGTERM:
        assert "stopped by SIGTERM" in out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_an_embedded_exec_stopped_by_a_signal_stops_a_daemon_it_started(signum, tmp_path):
    """A daemon in a session of its own, out of the script's group, ignoring SIGTERM."""
    line = "trap '' TERM; setsid sleep {s} & sleep {s}"
    _exec_then(signum, [], 4, tmp_path, line)  # 2 nodes, 2 sleeps a node


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_an_exec_on_sshd_nodes_stopped_by_a_signal_leaves_no_command_running(
    signum, sshd_cluster, tmp_path
):
    hosts = tmp_path / "hosts.yaml"
    addresses = ", ".join(host.address for host in sshd_cluster.hosts[:2])
    hosts.write_text(
        f"user: {sshd_cluster.user}\nport: 2222\nkey: {sshd_cluster.key}\n"
        f"known_hosts: {sshd_cluster.known_hosts}\nhosts: [{addresses}]\n"
    )
    _exec_then(signum, ["--hosts", str(hosts)], 2, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_an_exec_on_sshd_nodes_stopped_by_a_signal_stops_a_daemon_it_started(
    signum, sshd_cluster, tmp_path
):
    """A command that leaves a daemon in a session of its own (`setsid sleep &`), out of the
    command's process group, and ignores SIGTERM: the stop reaches it too, by the tag it
    inherits."""
    hosts = tmp_path / "hosts.yaml"
    addresses = ", ".join(host.address for host in sshd_cluster.hosts[:2])
    hosts.write_text(
        f"user: {sshd_cluster.user}\nport: 2222\nkey: {sshd_cluster.key}\n"
        f"known_hosts: {sshd_cluster.known_hosts}\nhosts: [{addresses}]\n"
    )
    line = "trap '' TERM; setsid sleep {s} & sleep {s}"
    _exec_then(signum, ["--hosts", str(hosts)], 4, tmp_path, line)  # 2 sleeps a node


def test_an_exec_on_sshd_nodes_runs_a_script_line_that_reads_like_the_end_line(
    sshd_cluster, tmp_path
):
    """The script goes on the wrapper's input up to an end line carrying a random token: a
    line of the user's command that reads as an end line without it does not cut it short."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        f"user: {sshd_cluster.user}\nport: 2222\nkey: {sshd_cluster.key}\n"
        f"known_hosts: {sshd_cluster.known_hosts}\nhosts: [{sshd_cluster.hosts[0].address}]\n"
    )
    command = "cat <<'EOF'\nDTRUN_END_OF_SCRIPT\nEOF\necho after-it"
    done = subprocess.run(
        [*DTRUN, "exec", "--hosts", str(hosts), "--", command],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DTRUN_END_OF_SCRIPT" in done.stdout and "after-it" in done.stdout
