"""peers: the tests that start daemons or real launches; the others are in
tests/unit/test_peers.py."""

from __future__ import annotations

import pytest

from dtrun.cluster.peers import PeerSshError, check_peers
from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.session import SshSession
from tests import sshd
from tests.unit.test_peers import (
    DOWN,
    PORT,
    loopback_hosts,
    peer_cluster,  # noqa: F401 - a fixture
    plan_of,
)


@pytest.mark.e2e
# Not horovodrun: its ssh records every host key it meets in the user's own ~/.ssh/known_hosts.
@pytest.mark.parametrize("launcher", ["mpirun", "deepspeed"])
def test_node_0_reaches_the_other_nodes_over_real_ssh(peer_cluster, tmp_path, launcher):
    addresses = [host.address for host in peer_cluster.hosts]
    inventory = loopback_hosts(peer_cluster, tmp_path, addresses, peer_cluster.known_hosts)
    with SshSession(inventory) as session:
        check_peers(SshExecutor(session).command, inventory, plan_of(launcher, inventory))


@pytest.mark.e2e
def test_a_peer_with_an_unknown_host_key_and_one_down_are_named_over_real_ssh(
    peer_cluster, tmp_path
):
    known = tmp_path / "known_hosts"  # node 0's key, as dtrun needs it; not node 1's
    known.write_text(peer_cluster.hosts[0].known_hosts_line + "\n")
    head, peer = (host.address for host in peer_cluster.hosts[:2])
    inventory = loopback_hosts(peer_cluster, tmp_path, [head, peer, DOWN], known)
    with SshSession(inventory) as session, pytest.raises(PeerSshError) as caught:
        check_peers(SshExecutor(session).command, inventory, plan_of("mpirun", inventory))
    assert caught.value.message.startswith(
        "node-0 cannot ssh to 2 of 2 nodes that mpirun starts ranks on: "
        f"node-1 ({peer}): Host key verification failed.; "
        f"node-2 ({DOWN}): ssh: connect to host {DOWN} port {PORT}: Connection refused"
    )
    assert f"UserKnownHostsFile={known}" in caught.value.message


@pytest.mark.e2e
def test_a_bench_whose_node_0_cannot_ssh_to_a_node_stops_before_mpirun_starts(
    peer_cluster, tmp_path_factory, no_leftovers
):
    """The common case: the user's own key reaches every node, but node 0's (the hosts file's
    `key:`, which mpirun's ssh is given) is not in node 1's authorized_keys."""
    import json

    from tests.conftest import launch_processes, run_dtrun

    other = sshd.start_cluster(tmp_path_factory.mktemp("other"), 1, PORT, first=51)
    try:
        head, peer = peer_cluster.hosts[0], other.hosts[0]
        known = no_leftovers / "known_hosts"
        known.write_text(f"{head.known_hosts_line}\n{peer.known_hosts_line}\n")
        hosts = no_leftovers / "hosts.yaml"
        hosts.write_text(
            f"user: {peer_cluster.user}\nport: {PORT}\nkey: {peer_cluster.key}\n"
            f"known_hosts: {known}\ncpus: 1\ninterface: lo\nworkdir: {no_leftovers}/remote\n"
            f"hosts: [{head.address}, {{host: {peer.address}, key: {other.key}}}]\n"
        )
        done = run_dtrun(
            "bench", "--hosts", str(hosts), "--launcher", "mpirun", "--nodes", "2",
            "--steps", "3", "--warmup", "1", "--repeat", "1", "--no-health-gate", "--port", "29870",
            "--output", str(no_leftovers / "runs"), "--run-id", "peers", cwd=no_leftovers,
        )  # fmt: skip
    finally:
        other.close()
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert (
        f"node-0 cannot ssh to 1 of 1 node that mpirun starts ranks on: node-1 "
        f"({peer.address})" in out
    )
    assert "Permission denied" in out and "Traceback" not in out
    assert not (no_leftovers / "runs" / "peers" / "n2" / "r0" / "node-0.log").exists()
    assert launch_processes() == []
    runs = json.loads((no_leftovers / "runs" / "peers" / "runs.json").read_text())
    assert runs["status"] == "failed" and "node-0 cannot ssh" in runs["error"]
