"""A ProxyCommand of the user's ~/.ssh/config, as `ssh` runs it, against real sshd on
127.0.0.x: asyncssh runs the command; dtrun keeps its stderr out of the SSH stream, names the
command and its last words when a node is not reached, and takes ProxyCommand or ProxyJump as
OpenSSH does (the first one the config gives)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import DTRUN

pytestmark = pytest.mark.e2e

# a ProxyCommand that carries the connection: stdin to the node's sshd, its answers to stdout
RELAY = """\
import os, socket, sys, threading
node = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def up():
    while data := os.read(0, 65536):
        node.sendall(data)
    node.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := node.recv(65536):
    os.write(1, data)
"""
REFUSED = 'sh -c "echo bastion refused >&2; exit 255"'
NOWHERE = "127.0.0.9:1"  # a ProxyJump that reaches nothing: refused at once
RAW_ASYNCIO = ("Unknown child process", "that handles pid")  # asyncio's words, not dtrun's


@pytest.fixture
def proxy_home(sshd_cluster, tmp_path):
    """A HOME with the default key and known_hosts, and a hosts file of gpu0 ... gpu3; each test
    writes ~/.ssh/config. Returns the hosts file, the environment, the config's path and the
    ProxyCommand that relays to %h %p."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    shutil.copy(sshd_cluster.key, ssh / "id_ed25519")
    (ssh / "id_ed25519").chmod(0o600)
    shutil.copy(sshd_cluster.known_hosts, ssh / "known_hosts")
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        f"cpus: 1\ninterface: lo\nworkdir: {tmp_path / 'remote'}\n"
        f"hosts: [{', '.join(f'gpu{index}' for index in range(len(sshd_cluster.hosts)))}]\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "SSH_AUTH_SOCK"}
    (tmp_path / "tmp").mkdir()  # where the commands' stderr files are made (and removed)
    env["TMPDIR"] = str(tmp_path / "tmp")
    via = f"{shlex.quote(sys.executable)} {shlex.quote(str(relay))} %h %p"
    return hosts, {**env, "HOME": str(tmp_path / "home")}, ssh / "config", via


def aliases(sshd_cluster, **extra: str) -> str:
    """Host blocks gpu0 ... for the cluster's nodes, each with ``extra``'s lines for it."""
    return "".join(
        f"Host gpu{index}\n  HostName {host.address}\n  Port {host.port}\n"
        + extra.get(f"gpu{index}", "")
        for index, host in enumerate(sshd_cluster.hosts)
    )


def dtrun_exec(env, hosts, cwd, command="echo reached", timeout=240):
    return subprocess.run(
        [*DTRUN, "exec", "--hosts", str(hosts), "--connect-timeout", "6", "--", command],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def said(done: subprocess.CompletedProcess[str]) -> str:
    """Everything dtrun printed, one line: the table's borders and line breaks out."""
    return " ".join((done.stdout + done.stderr).replace("│", " ").split())


def test_a_failing_proxycommand_is_named_with_what_it_said(sshd_cluster, proxy_home, tmp_path):
    """`ssh` shows a ProxyCommand's stderr; dtrun said only "Connection lost", and asyncio's
    "Unknown child process pid N, will report returncode 255" came out raw (on about a third
    of the runs: asyncio's transport reaps the command before its child watcher does)."""
    hosts, env, config, _ = proxy_home
    config.write_text(f"Host gpu*\n  ProxyCommand {REFUSED}\n" + aliases(sshd_cluster))
    done = dtrun_exec(env, hosts, tmp_path)
    printed = said(done)
    assert done.returncode == 1, printed
    for index in range(len(sshd_cluster.hosts)):
        assert f"cannot reach node-{index} (" in printed
    assert f'its ProxyCommand `{REFUSED}` said "bastion refused"' in printed
    assert not [words for words in RAW_ASYNCIO if words in done.stderr], done.stderr
    assert not list((tmp_path / "tmp").iterdir()) and "Traceback" not in printed


def test_what_a_proxycommand_writes_on_stderr_stays_out_of_the_ssh_stream(
    sshd_cluster, proxy_home, tmp_path
):
    """asyncssh read the command's stderr into the SSH stream: a line written after the
    server's banner broke the connection ("Connection lost"); `ssh` shows it and goes on."""
    hosts, env, config, via = proxy_home
    chatty = f'sh -c "echo before >&2; (sleep 1; echo after >&2) & exec {via}"'
    config.write_text(f"Host gpu*\n  ProxyCommand {chatty}\n" + aliases(sshd_cluster))
    done = dtrun_exec(env, hosts, tmp_path, "sleep 2; echo reached")
    assert done.returncode == 0, done.stdout + done.stderr
    for index in range(len(sshd_cluster.hosts)):
        assert f"[node-{index}] reached" in done.stdout
    assert not [words for words in RAW_ASYNCIO if words in done.stderr], done.stderr


def test_the_first_of_proxycommand_and_proxyjump_wins_as_in_openssh(
    sshd_cluster, proxy_home, tmp_path
):
    """OpenSSH takes whichever of ProxyCommand and ProxyJump the config gives first, and
    `ProxyCommand none` turns both off; dtrun went through the ProxyJump whatever came first."""
    hosts, env, config, via = proxy_home
    config.write_text(
        aliases(sshd_cluster, gpu0=f"  ProxyCommand {via}\n", gpu1="  ProxyCommand none\n")
        + f"Host gpu2\n  ProxyJump {NOWHERE}\n  ProxyCommand {REFUSED}\n"
        + f"Host * !127.0.0.9\n  ProxyJump {NOWHERE}\n"
    )
    done = dtrun_exec(env, hosts, tmp_path)
    printed = said(done)
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout, printed
    # gpu2's ProxyJump came first: the jump host is tried, never the ProxyCommand
    assert "cannot reach the jump host 127.0.0.9" in printed and "bastion refused" not in printed


def test_a_jump_host_s_own_proxycommand_is_named_when_it_fails(sshd_cluster, proxy_home, tmp_path):
    """The ProxyJump host reached through its own ProxyCommand: the jump host's error names
    that command and what it said, as a node's does."""
    hosts, env, config, via = proxy_home
    jump = sshd_cluster.hosts[0]
    config.write_text(
        f"Host jumpbox\n  HostName {jump.address}\n  Port {jump.port}\n  ProxyCommand {REFUSED}\n"
        + f"Host relayed\n  HostName {jump.address}\n  Port {jump.port}\n  ProxyCommand {via}\n"
        + aliases(sshd_cluster, gpu0="  ProxyJump jumpbox\n", gpu1="  ProxyJump relayed\n")
    )
    done = dtrun_exec(env, hosts, tmp_path)
    printed = said(done)
    assert "[node-1] reached" in done.stdout, printed  # through a jump host that a command reaches
    assert "cannot reach the jump host jumpbox" in printed
    assert f'its ProxyCommand `{REFUSED}` said "bastion refused"' in printed


def test_an_error_while_proxycommands_start_ends_the_command(sshd_cluster, proxy_home, tmp_path):
    """A node's error (its ProxyJump goes round in a circle) while other nodes' ProxyCommands
    were starting: closing, dtrun cancelled asyncio's own task that connects a starting
    command's pipes, and waited for that command for ever (6 runs in 8 hung)."""
    hosts, env, config, via = proxy_home
    last = f"gpu{len(sshd_cluster.hosts) - 1}"
    config.write_text(
        aliases(sshd_cluster, **{last: "  ProxyJump loopy\n"})
        + f"Host loopy\n  ProxyJump loopy\nHost *\n  ProxyCommand {via}\n"
    )
    done = dtrun_exec(env, hosts, tmp_path, timeout=60)
    printed = said(done)
    assert done.returncode == 2, printed
    assert "the ProxyJump of ~/.ssh/config goes round in a circle: loopy -> loopy" in printed
    assert not [words for words in RAW_ASYNCIO if words in done.stderr], done.stderr
