"""Runs over SSH against real OpenSSH sshd instances on 127.0.0.2 ... 127.0.0.5 (port 2222)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from dtrun.cluster.outputs import parse_outputs
from dtrun.cluster.readiness import NotReadyError, Patience, wait_until_ready
from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.keys import SshLoginError
from dtrun.engines.ssh.registration import wait_for_registry
from dtrun.engines.ssh.session import HostKeyError, SshError, SshSession
from dtrun.errors import NodeFailedError
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from tests.conftest import launch_processes, processes_under, wait_for
from tests.paths import REPO, TESTS
from tests.sshd import SshCluster

DATA = TESTS / "data"
PYTHON_BIN = str(Path(sys.executable).parent)


def hosts_file_text(cluster: SshCluster, tmp: Path, count: int = 4, **fields: object) -> str:
    """A hosts file for the loopback sshd instances (simulated nodes share 2 cores: cpus 1)."""
    settings = {
        "user": cluster.user,
        "port": 2222,
        "key": str(cluster.key),
        "cpus": 1,
        "known_hosts": str(cluster.known_hosts),
        "workdir": str(tmp / "remote"),
        "interface": "lo",
        **fields,
    }
    lines = [f"{key}: {value}" for key, value in settings.items()]
    addresses = ", ".join(host.address for host in cluster.hosts[:count])
    return "\n".join([*lines, f"hosts: [{addresses}]", ""])


def hosts(cluster: SshCluster, tmp: Path, count: int = 4, **fields: object) -> Inventory:
    text = hosts_file_text(cluster, tmp, count, **fields)
    return parse_hosts_file(text, "hosts.yaml", Defaults(cluster.user, PYTHON_BIN))


def bash_plan(inventory: Inventory, *scripts: str) -> LaunchPlan:
    launches = tuple(
        NodeLaunch(
            node,
            rank,
            f"node-{rank}.sh",
            "#!/usr/bin/env bash\nset -euo pipefail\n" + textwrap.dedent(body),
        )
        for rank, (node, body) in enumerate(zip(inventory.nodes, scripts, strict=False))
    )
    n = len(launches)
    return LaunchPlan("bash", "bash", n, 1, n, 1, "id", launches[0].node.address, 1, launches)


def workdir(tmp: Path) -> Path:
    return tmp / "runs" / "run1" / "n2" / "r0"


def test_a_command_runs_on_every_node_with_its_exit_code(sshd_cluster, no_leftovers):
    inventory = hosts(sshd_cluster, no_leftovers)
    lines: list[tuple[str, str]] = []
    scripts = {
        node.name: f"echo hello from {node.name}; exit {index}"
        for index, node in enumerate(inventory.nodes)
    }
    with SshSession(inventory) as session:
        answers = SshExecutor(session).command(scripts, lambda n, line: lines.append((n, line)))
    assert {name: a.exit_code for name, a in answers.items()} == {
        "node-0": 0, "node-1": 1, "node-2": 2, "node-3": 3,
    }  # fmt: skip
    assert ("node-2", "hello from node-2") in lines


def test_a_progress_bar_s_states_stream_as_lines_over_ssh_and_the_log_keeps_every_byte(
    sshd_cluster, no_leftovers
):
    from tests.e2e.test_executor import bar, progress_sink

    inventory = hosts(sshd_cluster, no_leftovers, count=1)
    seen: list[str] = []
    flag = no_leftovers / "seen-0"  # the sshd node is this machine: it sees the same file
    with SshSession(inventory) as session:
        SshExecutor(session).run(
            bash_plan(inventory, bar(flag)), workdir(no_leftovers), timeout_s=120,
            on_line=progress_sink(flag, seen),
        )  # fmt: skip
    assert seen == ["\r", " 0%\r", " 50%\r", "100%", "early"]
    log = workdir(no_leftovers) / "node-0.log"
    assert log.read_bytes() == b"\r 0%\r 50%\r100%\nearly"


def test_a_failing_node_stops_the_others_and_nothing_is_left_on_any_node(
    sshd_cluster, no_leftovers
):
    inventory = hosts(sshd_cluster, no_leftovers, count=3)
    like_torchrun = "setsid sleep 600 &\necho worker started\nwait\n"
    plan = bash_plan(inventory, like_torchrun, like_torchrun, "sleep 1\necho 'boom'\nexit 7")
    with SshSession(inventory) as session, pytest.raises(NodeFailedError) as caught:
        SshExecutor(session).run(plan, workdir(no_leftovers), timeout_s=120, on_line=print)
    error = caught.value
    assert error.node == "node-2"
    assert "exit code 7" in error.message and "boom" in error.message
    assert [r.exit_code for r in error.node_results] == [None, None, 7]
    assert launch_processes() == []


def test_a_node_whose_sshd_goes_away_mid_run_is_named(sshd_cluster, tmp_path):
    inventory = hosts(sshd_cluster, tmp_path, count=2)
    plan = bash_plan(inventory, "echo started\nsleep 600\n", "echo started\nsleep 600\n")
    started: set[str] = set()

    def on_line(node: str, line: str) -> None:
        started.add(node)
        if started == {"node-0", "node-1"}:
            sshd_cluster.stop("127.0.0.3")  # node-1 goes away, sessions and all

    try:
        with SshSession(inventory, retries=1) as session, pytest.raises(SshError) as caught:
            SshExecutor(session).run(plan, workdir(tmp_path), timeout_s=120, on_line=on_line)
    finally:
        sshd_cluster.start(sshd_cluster.hosts[1])
    assert "lost the SSH connection to node-1 (127.0.0.3)" in caught.value.message
    assert "node-1: its connection was lost; check it by hand" in caught.value.message
    # node-0 was stopped by dtrun; node-1's own guard saw its connection close and stopped its
    # launch (templates/remote/launch.sh.j2), which dtrun could not check from here
    try:
        wait_for(lambda: launch_processes() == [], timeout=20, what="node-1's guard's stop")
    finally:
        for proc in launch_processes():
            with contextlib.suppress(psutil.Error):  # it may have ended since
                proc.kill()


def test_an_unknown_host_key_is_refused_with_the_command_to_accept_it(sshd_cluster, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(sshd_cluster.hosts[0].known_hosts_line + "\n")
    inventory = hosts(sshd_cluster, tmp_path, count=2, known_hosts=known)
    with SshSession(inventory) as session, pytest.raises(HostKeyError) as caught:
        SshExecutor(session).command({"node-0": "true", "node-1": "true"})
    message = caught.value.message
    assert "host key of node-1 ([127.0.0.3]:2222) is not known" in message
    assert "--accept-new-host-keys" in message
    assert f"ssh-keyscan -p 2222 127.0.0.3 >> {known}" in message
    assert caught.value.exit_code == 2


def test_accepting_new_host_keys_records_them_and_says_so(sshd_cluster, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    inventory = hosts(sshd_cluster, tmp_path, count=2, known_hosts=known)
    notices: list[str] = []
    with SshSession(inventory, accept_new_host_keys=True, notice=notices.append) as session:
        answers = SshExecutor(session).command({"node-0": "echo ok", "node-1": "echo ok"})
    # the last line: root's ~/.bashrc may print first (pyenv's rehash, racing between the nodes)
    assert [a.output.splitlines()[-1] for a in answers.values()] == ["ok", "ok"]
    assert sorted(known.read_text().splitlines()) == sorted(
        host.known_hosts_line for host in sshd_cluster.hosts[:2]
    )
    assert sorted(notice.split(" (")[0] for notice in notices) == [
        "recorded the new host key of node-0",
        "recorded the new host key of node-1",
    ]


def test_a_changed_host_key_is_refused_even_when_accepting_new_ones(sshd_cluster, tmp_path):
    known = tmp_path / "known_hosts"
    impostor = sshd_cluster.hosts[1].host_key  # 127.0.0.3's key, claimed for 127.0.0.2
    known.write_text(f"[127.0.0.2]:2222 {impostor}\n")
    inventory = hosts(sshd_cluster, tmp_path, count=1, known_hosts=known)
    changed = r"node-0 \(\[127.0.0.2\]:2222\) has CHANGED"
    with (
        SshSession(inventory, accept_new_host_keys=True) as session,
        pytest.raises(HostKeyError, match=changed),
    ):
        SshExecutor(session).command({"node-0": "true"})


def test_a_wrong_user_is_a_clear_login_error(sshd_cluster, tmp_path):
    inventory = hosts(sshd_cluster, tmp_path, count=1, user="nobody-dtrun")
    with SshSession(inventory) as session, pytest.raises(SshLoginError) as caught:
        SshExecutor(session).command({"node-0": "true"})
    assert "cannot log in to node-0 as 'nobody-dtrun'" in caught.value.message
    assert caught.value.exit_code == 2


def test_a_wrong_key_is_a_clear_login_error(sshd_cluster, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    inventory = hosts(sshd_cluster, tmp_path, count=1, key=other)
    with SshSession(inventory) as session, pytest.raises(SshLoginError, match=str(other)):
        SshExecutor(session).command({"node-0": "true"})


def test_an_unreachable_node_is_named_by_the_readiness_barrier(sshd_cluster, tmp_path):
    inventory = hosts(sshd_cluster, tmp_path, count=2, port=2299)  # nothing listens there
    with SshSession(inventory, retries=1, connect_timeout=2) as session:
        executor = SshExecutor(session)
        with pytest.raises(NotReadyError) as caught:
            wait_until_ready(
                executor.command, inventory, inventory.nodes, check=False, patience=Patience(0)
            )
    assert "2 of 2 nodes not ready" in caught.value.message
    assert "node-0 (127.0.0.2): cannot reach node-0" in caught.value.message


def test_the_readiness_check_finds_the_python_environment_on_every_node(sshd_cluster, tmp_path):
    inventory = hosts(sshd_cluster, tmp_path)
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        wait_until_ready(
            executor.command, inventory, inventory.nodes, check=True, patience=Patience(30)
        )
        broken = replace(inventory, python_bin="/nonexistent/bin")
        with pytest.raises(NotReadyError, match="torch does not import"):
            wait_until_ready(
                executor.command, broken, broken.nodes, check=True, patience=Patience(0)
            )


def test_the_stack_outputs_source_reaches_registered_nodes_through_the_head(sshd_cluster, tmp_path):
    """Recorded version 1 outputs, pointed at the loopback cluster: 127.0.0.2 plays the head."""
    shared = tmp_path / "shared"
    registry = shared / ".dtrun" / "nodes"
    registry.mkdir(parents=True)
    for path in sorted((DATA / "registry").glob("dtrunnode00000[01].json")):
        entry = json.loads(path.read_text())
        entry["address"] = {"10.42.1.4": "127.0.0.3", "10.42.1.5": "127.0.0.4"}[entry["address"]]
        (registry / path.name).write_text(json.dumps(entry))
    recorded = json.loads((DATA / "outputs" / "v1-h100-azurefiles-generated-key.json").read_text())
    recorded |= {
        "head_public_address": "127.0.0.2",
        "ssh_user": sshd_cluster.user,
        "ssh_private_key": sshd_cluster.key.read_text(),
        "known_hosts": [host.known_hosts_line for host in sshd_cluster.hosts],
        "ssh_port": 2222,
        "node_count": 2,
        "mount_path": str(shared),
        "registry_path": str(registry),
        "python_bin": PYTHON_BIN,
    }
    outputs = parse_outputs(recorded, "loopback-outputs.json")
    from dtrun.cluster.outputs import inventory_from_stack

    access = inventory_from_stack("loop", outputs)
    with SshSession(access) as session:
        polls: list[tuple[int, int, int]] = []
        inventory = wait_for_registry(
            session, "loop", outputs, timeout_s=5, poll_s=0.1,
            on_poll=lambda registered, ready, wanted, waited: polls.append(
                (registered, ready, wanted)
            ),
        )  # fmt: skip
        assert [n.address for n in inventory.nodes] == ["127.0.0.3", "127.0.0.4"]
        assert polls == [(2, 2, 2)]  # both ready at the first look
        session.inventory = inventory
        answers = SshExecutor(session).command(
            {"node-0": "hostname -I >/dev/null; echo $SSH_CONNECTION", "node-1": "true"}
        )
    # node-0 was reached through the head: the connection came from 127.0.0.2's tunnel
    assert answers["node-0"].exit_code == 0
    assert answers["node-0"].output.split()[2] == "127.0.0.3"


def test_a_stack_node_that_never_becomes_ready_is_named(sshd_cluster, tmp_path):
    registry = tmp_path / "nodes"
    registry.mkdir()
    entry = json.loads((DATA / "registry" / "dtrunnode000000.json").read_text())
    (registry / "a.json").write_text(json.dumps(entry | {"infiniband": "degraded"}))
    recorded = json.loads((DATA / "outputs" / "v1-h100-azurefiles-generated-key.json").read_text())
    recorded |= {
        "head_public_address": "127.0.0.2",
        "ssh_user": sshd_cluster.user,
        "ssh_private_key": sshd_cluster.key.read_text(),
        "known_hosts": [host.known_hosts_line for host in sshd_cluster.hosts],
        "ssh_port": 2222,
        "node_count": 2,
        "registry_path": str(registry),
    }
    outputs = parse_outputs(recorded, "loopback-outputs.json")
    from dtrun.cluster.outputs import inventory_from_stack

    access = inventory_from_stack("loop", outputs)
    polls: list[tuple[int, int, int]] = []
    with (
        SshSession(access) as session,
        pytest.raises(NotReadyError) as caught,
    ):
        wait_for_registry(
            session, "loop", outputs, timeout_s=0,
            on_poll=lambda registered, ready, wanted, waited: polls.append(
                (registered, ready, wanted)
            ),
        )  # fmt: skip
    assert polls == [(1, 0, 2)]  # one registered, not ready; one missing
    assert "dtrunnode000000: infiniband degraded, python ready" in caught.value.message
    assert "1 node not registered yet" in caught.value.message


def test_processes_of_launches_carry_their_tag(sshd_cluster, no_leftovers):
    """What the cleanup relies on: the tag reaches children in sessions of their own."""
    inventory = hosts(sshd_cluster, no_leftovers, count=1)
    plan = bash_plan(inventory, "setsid sleep 600 &\nsleep 0.5\necho ready\nexit 3")
    with SshSession(inventory) as session, pytest.raises(NodeFailedError):
        SshExecutor(session).run(plan, workdir(no_leftovers), timeout_s=60, on_line=print)
    assert launch_processes() == []  # the setsid'ed sleep included


# dtrun's side of a launch in a process of its own, killed outright below: none of its code runs
KILLED_EXECUTOR = """\
import sys
from pathlib import Path
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.session import SshSession
from tests.e2e.test_ssh import bash_plan

where = Path(sys.argv[1])
inventory = parse_hosts_file((where / "hosts.yaml").read_text(), "hosts.yaml",
                             Defaults(sys.argv[2], sys.argv[3]))
body = "setsid sleep 600 &\\necho started\\nwait\\n"  # a child in a session of its own too
plan = bash_plan(inventory, body, body)
with SshSession(inventory) as session:
    SshExecutor(session).run(plan, where / "runs" / "run1" / "n2" / "r0", timeout_s=300,
                             on_line=lambda node, line: print(node, line, flush=True))
"""


def test_a_sigkilled_dtrun_leaves_no_process_of_its_launch_on_any_node(sshd_cluster, no_leftovers):
    """SIGKILL runs none of dtrun's code: each node's guard sees the connection close and stops
    every process of the launch there (templates/remote/launch.sh.j2)."""
    (no_leftovers / "hosts.yaml").write_text(hosts_file_text(sshd_cluster, no_leftovers, count=2))
    dtrun = subprocess.Popen(
        [sys.executable, "-c", KILLED_EXECUTOR, str(no_leftovers), sshd_cluster.user, PYTHON_BIN],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert dtrun.stdout is not None
        started = 0
        for line in dtrun.stdout:  # until both nodes said so, or dtrun ended
            started += "started" in line
            if started == 2:
                break
        assert started == 2 and len(launch_processes()) >= 4  # bash and sleep, twice
        dtrun.kill()
        dtrun.wait(timeout=10)
        wait_for(
            lambda: launch_processes() == [] and processes_under(no_leftovers) == [],
            timeout=20,
            what="the guards to stop it all, and the login shells to end",
        )
    finally:
        dtrun.kill()


@pytest.mark.parametrize(
    ("config", "cipher"),
    [("", "aes128-gcm@openssh.com"),
     ("Host *\n  Ciphers chacha20-poly1305@openssh.com\n", "chacha20-poly1305@openssh.com")],
    ids=["no-ciphers-set", "the-users-ciphers"],
)  # fmt: skip
def test_connections_use_aes_gcm_unless_the_users_config_names_its_ciphers(
    sshd_cluster, tmp_path, monkeypatch, config, cipher
):
    """AES-GCM costs dtrun far less CPU than chacha20 in asyncssh (docs/clusters.md); a user's
    own Ciphers line is kept, as `ssh` keeps it."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    if config:
        (home / ".ssh" / "config").write_text(config)
    monkeypatch.setenv("HOME", str(home))
    inventory = hosts(sshd_cluster, tmp_path, count=1)
    with SshSession(inventory) as session:
        connection = session.call(session.connection(inventory.nodes[0]))
        assert connection.get_extra_info("send_cipher") == cipher
        assert connection.get_extra_info("recv_cipher") == cipher
