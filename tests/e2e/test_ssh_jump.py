"""Nodes behind a jump host, as OpenSSH users reach them: ProxyJump in ~/.ssh/config, or the
hosts file's `jump:`, against real sshd on 127.0.0.40 (the jump) and 127.0.0.41-42 (the nodes).

On loopback every address is reachable directly, so the jump's sshd logs at DEBUG1: every
forwarded channel it opens (`server_request_direct_tcpip: ... target ADDRESS port PORT`) shows a
node reached through it. Ignoring ProxyJump would still log in, but leave no such line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import sshd
from tests.conftest import DTRUN
from tests.sshd import SshCluster

pytestmark = pytest.mark.e2e

PORT = 2240
JUMP = "127.0.0.40"
NODES = ("127.0.0.41", "127.0.0.42")


@pytest.fixture(scope="module")
def jump_cluster(tmp_path_factory: pytest.TempPathFactory):
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    cluster = sshd.start_cluster(
        tmp_path_factory.mktemp("jump"), 3, PORT, first=40, settings={JUMP: "LogLevel DEBUG1\n"}
    )
    yield cluster
    cluster.close()


def user_env(cluster: SshCluster, tmp: Path, config: str) -> dict[str, str]:
    """A HOME whose ~/.ssh holds ``config``, the default key and every host key; no agent."""
    ssh = tmp / "home" / ".ssh"
    ssh.mkdir(parents=True)
    shutil.copy(cluster.key, ssh / "id_ed25519")
    (ssh / "id_ed25519").chmod(0o600)
    shutil.copy(cluster.known_hosts, ssh / "known_hosts")
    (ssh / "config").write_text(config)
    env = {key: value for key, value in os.environ.items() if key != "SSH_AUTH_SOCK"}
    return {**env, "HOME": str(tmp / "home")}


JUMPBOX = f"Host jumpbox\n  HostName {JUMP}\n  Port {PORT}\n"
BEHIND_JUMPBOX = JUMPBOX + "".join(
    f"Host node-{name}\n  HostName {address}\n  Port {PORT}\n  ProxyJump jumpbox\n"
    for name, address in zip("ab", NODES, strict=True)
)


def write_hosts(tmp: Path, hosts: str, *fields: str) -> Path:
    path = tmp / "hosts.yaml"
    lines = [f"cpus: 1\ninterface: lo\nworkdir: {tmp / 'remote'}\n", *fields, f"hosts: {hosts}\n"]
    path.write_text("".join(lines))
    return path


class JumpLog:
    """The node addresses the jump host opened forwarded channels to, since ``mark``."""

    def __init__(self, cluster: SshCluster) -> None:
        self.path = cluster.root / f"sshd-{JUMP}.log"
        self.mark = self.path.stat().st_size

    def text(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self.mark)
            return log.read().decode(errors="replace")

    def targets(self) -> set[str]:
        found = re.findall(r"server_request_direct_tcpip: .* target (\S+) port (\d+)", self.text())
        return {f"{address}:{port}" for address, port in found}

    def logins(self) -> int:
        return self.text().count("Accepted publickey for ")


def dtrun(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DTRUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
        check=False,
    )  # fmt: skip


def test_proxyjump_in_the_ssh_config_reaches_every_node_through_the_jump(jump_cluster, tmp_path):
    env = user_env(jump_cluster, tmp_path, BEHIND_JUMPBOX)
    hosts = write_hosts(tmp_path, "[node-a, node-b]")
    log = JumpLog(jump_cluster)
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "echo reached", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout
    assert log.targets() == {f"{address}:{PORT}" for address in NODES}
    assert log.logins() == 1  # one connection to the jump carries every node's


def test_an_unknown_jump_host_key_names_the_jump_and_is_recorded_once_when_accepted(
    jump_cluster, tmp_path
):
    env = user_env(jump_cluster, tmp_path, BEHIND_JUMPBOX)
    known = tmp_path / "home" / ".ssh" / "known_hosts"
    known.write_text("".join(host.known_hosts_line + "\n" for host in jump_cluster.hosts[1:]))
    hosts = write_hosts(tmp_path, "[node-a, node-b]")
    refused = dtrun(env, "exec", "--hosts", str(hosts), "--", "true", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"the host key of the jump host jumpbox ([{JUMP}]:{PORT}) is not known" in (
        refused.stderr
    )
    assert f"ssh-keyscan -p {PORT} {JUMP} >> {known}" in refused.stderr
    accepted = dtrun(
        env, "exec", "--hosts", str(hosts), "--accept-new-host-keys", "--", "echo reached",
        cwd=tmp_path,
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "[node-0] reached" in accepted.stdout and "[node-1] reached" in accepted.stdout
    assert accepted.stdout.count("recorded the new host key of the jump host jumpbox") == 1
    assert known.read_text().count(f"[{JUMP}]:{PORT} ") == 1


def test_a_run_through_the_config_s_jump_meets_at_the_nodes_addresses(
    jump_cluster, tmp_path, no_leftovers
):
    env = user_env(jump_cluster, tmp_path, BEHIND_JUMPBOX)
    hosts = write_hosts(tmp_path, "[node-a, node-b]")
    script = tmp_path / "where.py"
    script.write_text(
        "import os\nprint('master', os.environ['MASTER_ADDR'], 'rank', os.environ['RANK'])\n"
    )
    log = JumpLog(jump_cluster)
    done = dtrun(
        env, "run", "--hosts", str(hosts), "--nodes", "2", "--port", "29840",
        "--output", str(tmp_path / "runs"), "--run-id", "jump", "--", "python", str(script),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"master {NODES[0]} rank 0" in done.stdout
    assert f"master {NODES[0]} rank 1" in done.stdout
    assert log.targets() == {f"{address}:{PORT}" for address in NODES}


@pytest.mark.parametrize(
    "jump", ["jumpbox", f"{JUMP}:{PORT}"], ids=["config-alias", "address-and-port"]
)
def test_the_hosts_file_s_jump_reaches_every_node_through_it(jump_cluster, tmp_path, jump):
    env = user_env(jump_cluster, tmp_path, JUMPBOX)  # nothing about the nodes
    hosts = write_hosts(tmp_path, f"[{', '.join(NODES)}]", f"port: {PORT}\n", f"jump: {jump}\n")
    log = JumpLog(jump_cluster)
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "echo reached", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout
    assert log.targets() == {f"{address}:{PORT}" for address in NODES}


@pytest.mark.parametrize(
    ("config", "jump", "refused"),
    [
        (
            f"Host *\n  ProxyJump jumpbox\n{JUMPBOX}",
            None,
            "the ProxyJump of ~/.ssh/config goes round in a circle: jumpbox -> jumpbox",
        ),
    ],
    ids=["proxyjump-circle"],
)
def test_a_jump_that_cannot_work_is_refused_before_connecting(
    tmp_path, monkeypatch, config, jump, refused
):
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
    from dtrun.engines.ssh.session import SshSession
    from dtrun.errors import UsageError

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(config)
    text = f"hosts: [{NODES[0]}]\n" + (f"jump: {jump}\n" if jump else "")
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("someone", "/usr/bin"))
    with SshSession(inventory, retries=1) as session, pytest.raises(UsageError) as caught:
        session.call(session.connection(inventory.nodes[0]))
    assert caught.value.message.startswith(refused)


def test_a_hosts_file_jump_whose_port_is_no_number_is_refused_where_it_is_read():
    from dtrun.engines.ssh.hostlines import HostsFileError
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file

    text = f"hosts: [{NODES[0]}]\njump: {JUMP}:ssh\n"
    with pytest.raises(HostsFileError) as caught:
        parse_hosts_file(text, "hosts.yaml", Defaults("someone", "/usr/bin"))
    assert caught.value.message.startswith("hosts.yaml, line 2: 'jump' is not [USER@]HOST[:PORT]")


def test_a_jump_connection_that_failed_or_closed_is_opened_again():
    """A failed opening is not kept (the next readiness look tries again, as for a node), nor
    one whose connection has closed since (a bastion restarted mid-sweep)."""
    import asyncio

    from dtrun.engines.ssh.session import _spent

    class Connection:
        def __init__(self, closed: bool) -> None:
            self.closed = closed

        def is_closed(self) -> bool:
            return self.closed

    async def check() -> list[bool]:
        loop = asyncio.get_running_loop()
        pending, failed, open_, closed = (loop.create_future() for _ in range(4))
        failed.set_exception(OSError("connection refused"))
        open_.set_result(Connection(closed=False))
        closed.set_result(Connection(closed=True))
        failed.exception()  # retrieved, as _spent does
        return [_spent(f) for f in (pending, failed, open_, closed)]

    assert asyncio.run(check()) == [False, True, False, True]
