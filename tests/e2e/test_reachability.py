"""A hosts file with a dead node fails within --connect-timeout, naming it, with a progress line
on the way: a refused port (sshd down) and a silent one (a host that accepts and never speaks,
as a hung machine or a firewall that swallows packets does)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import run_dtrun
from tests.e2e.test_ssh import hosts_file_text

pytestmark = pytest.mark.e2e

DEAD = "127.0.0.9"


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A port on DEAD that accepts connections and never sends an SSH banner."""
    server = socket.create_server((DEAD, 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port on DEAD nothing listens on (bound to find a free one, then closed)."""
    with socket.socket() as probe:
        probe.bind((DEAD, 0))
        port = probe.getsockname()[1]
    yield port


@pytest.mark.parametrize("dead", [refused_port, silent_port], ids=["refused", "silent"])
def test_a_dead_node_in_a_hosts_file_fails_the_run_within_the_connect_timeout(
    sshd_cluster, no_leftovers, dead
):
    with dead() as port:
        text = hosts_file_text(sshd_cluster, no_leftovers, count=1)
        hosts = no_leftovers / "hosts.yaml"
        two = f"hosts: [127.0.0.2, {{host: {DEAD}, port: {port}}}]"
        hosts.write_text(text.replace("hosts: [127.0.0.2]", two))
        started = time.monotonic()
        done = run_dtrun(
            "run", "--hosts", str(hosts), "--nodes", "2", "--connect-timeout", "8",
            "--output", str(no_leftovers / "runs"), "--run-id", "dead", "--", "true",
            cwd=no_leftovers,
        )  # fmt: skip
        took = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    run = json.loads((no_leftovers / "runs" / "dead" / "run.json").read_text())
    # within the timeout by dtrun's own clock (run.json's wall_s, from the launch's start to its
    # failure), and at most a look's lateness past it: no look starts that could not end by then
    # (runner/cluster/readiness.py). Ignored, the 30 s default gives up at about 20 s.
    # Not the test's clock: dtrun's start and exit around the wait took 2.0 s (refused) and
    # 4.5 s (silent) more at load 10, the wait itself 4.6 s and 7.35 s as at load 6. 5 s past
    # it: a look (2.7 s) ending late on a loaded machine, and still far from the 20 s ignored
    assert run["wall_s"] < 8 + 5, f"waited {run['wall_s']:.1f} s"
    assert took < 60, f"took {took:.1f} s"  # and then it ends: nothing waits on the dead node
    # the live line while waiting, who answered and who not, between looks: a silent node's
    # look lasts an attempt (2.7 s), and after the program check's look and one more the
    # 8 s are spent, so no look is waited for; a refused one answers at once, look after look
    if dead is refused_port:
        assert f"1 of 2 answered, not yet node-1 ({DEAD})" in out
    # the failure names the dead node, why, and how to give it longer
    assert (
        "1 of 2 nodes not ready within --connect-timeout" in out
        and f"node-1 ({DEAD}): cannot reach" in out
    )
    assert "--connect-timeout" in out and "Traceback" not in out
    assert run["status"] == "failed" and f"node-1 ({DEAD})" in run["error"]
