"""SSH as OpenSSH users have it: a hosts file that names only Host aliases of the user's
~/.ssh/config, logged into with the user's default key, against real sshd on 127.0.0.x."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess

import pytest

from tests import sshd
from tests.conftest import DTRUN, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def user_home(sshd_cluster, tmp_path):
    """A HOME like a user's: ~/.ssh/config with aliases, the default key, known_hosts; no agent,
    and nothing about keys, users or ports in the hosts file."""
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    shutil.copy(sshd_cluster.key, ssh / "id_ed25519")
    shutil.copy(sshd_cluster.key.with_suffix(".pub"), ssh / "id_ed25519.pub")
    (ssh / "id_ed25519").chmod(0o600)
    shutil.copy(sshd_cluster.known_hosts, ssh / "known_hosts")
    (ssh / "config").write_text(
        "".join(
            f"Host gpu{index}\n  HostName {host.address}\n  Port {host.port}\n"
            for index, host in enumerate(sshd_cluster.hosts[:2])
        )
        + "Host *\n  ServerAliveInterval 30\n"
    )
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        f"cpus: 1\ninterface: lo\nworkdir: {tmp_path / 'remote'}\nhosts: [gpu0, gpu1]\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "SSH_AUTH_SOCK"}
    return hosts, {**env, "HOME": str(home)}


def dtrun(env, *args, cwd):
    return subprocess.run(
        [*DTRUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
        check=False,
    )  # fmt: skip


def test_aliases_and_the_default_key_reach_every_node(user_home, tmp_path):
    hosts, env = user_home
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "echo reached", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout
    # the nodes' addresses are the aliases' HostNames (the table lists each node's address)
    assert re.search(r"│ node-0 │ 127\.0\.0\.2 │ +0 │", done.stdout), done.stdout
    assert re.search(r"│ node-1 │ 127\.0\.0\.3 │ +0 │", done.stdout), done.stdout


@pytest.mark.parametrize("bad", ["id_ed25519.pub", "notes.txt"], ids=["public-key", "text"])
def test_an_identity_file_that_is_no_private_key_is_skipped_as_ssh_skips_it(
    user_home, tmp_path, bad
):
    """`IdentityFile ~/.ssh/id_ed25519.pub` (the public half, named by mistake) before the
    right key: `ssh` says `Load key ...: invalid format` and logs in with the next one. Before:
    asyncssh's KeyImportError as a traceback, exit 1."""
    hosts, env = user_home
    ssh = tmp_path / "home" / ".ssh"
    (ssh / "notes.txt").write_text("not a key\n")
    config = ssh / "config"
    config.write_text(
        f"Host *\n  IdentityFile ~/.ssh/{bad}\n  IdentityFile ~/.ssh/id_ed25519\n"
        + config.read_text()
    )
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "echo reached", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout


def test_a_run_on_aliases_meets_at_the_alias_s_hostname(user_home, tmp_path, no_leftovers):
    hosts, env = user_home
    script = tmp_path / "where.py"
    script.write_text(
        "import os\nprint('master', os.environ['MASTER_ADDR'], 'rank', os.environ['RANK'])\n"
    )
    done = dtrun(
        env, "run", "--hosts", str(hosts), "--nodes", "2", "--port", "29830",
        "--output", str(tmp_path / "runs"), "--run-id", "alias", "--", "python",
        str(script), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "master 127.0.0.2 rank 0" in done.stdout
    assert "master 127.0.0.2 rank 1" in done.stdout


def test_hosts_given_on_the_command_line_reach_every_node(user_home, tmp_path):
    """`--hosts "$MLP_MPI_HOSTS"`: Horovod -H's host:slots items, no file; ports and keys come
    from ~/.ssh/config, as for a hosts file."""
    _, env = user_home
    done = dtrun(env, "exec", "--hosts", "gpu0:1,gpu1:1", "--", "echo reached", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout
    assert re.search(r"│ node-0 │ 127\.0\.0\.2 │ +0 │", done.stdout), done.stdout
    assert re.search(r"│ node-1 │ 127\.0\.0\.3 │ +0 │", done.stdout), done.stdout


PICKY = "127.0.0.46"  # accepts one key only, and cuts a login off after 2 wrong ones
PICKY_PORT = 2246


@pytest.fixture(scope="module")
def picky_node(tmp_path_factory):
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    cluster = sshd.start_cluster(
        tmp_path_factory.mktemp("picky"), 1, PICKY_PORT, first=46,
        settings={PICKY: "MaxAuthTries 2\n"},
    )  # fmt: skip
    yield cluster
    cluster.close()


@pytest.fixture
def agent(tmp_path):
    """An ssh agent holding three keys no node accepts, as a busy user's agent does."""
    socket = tmp_path / "agent.sock"
    process = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(socket)], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(socket.exists, timeout=10, what="ssh-agent's socket")
        for index in range(3):
            key = tmp_path / f"agent_key_{index}"
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
            subprocess.run(
                ["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(socket)},
                check=True, capture_output=True,
            )  # fmt: skip
        yield str(socket)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("identities_only", [True, False], ids=["IdentitiesOnly", "agent-first"])
def test_the_config_s_identity_file_logs_in_where_the_default_key_does_not(
    picky_node, agent, tmp_path, identities_only
):
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id_ed25519")], check=True
    )  # the default key: not authorized on the node
    shutil.copy(picky_node.key, ssh / "other_key")
    (ssh / "other_key").chmod(0o600)
    shutil.copy(picky_node.known_hosts, ssh / "known_hosts")
    (ssh / "config").write_text(
        f"Host picky\n  HostName {PICKY}\n  Port {PICKY_PORT}\n  IdentityFile ~/.ssh/other_key\n"
        + ("  IdentitiesOnly yes\n" if identities_only else "")
    )
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"cpus: 1\ninterface: lo\nworkdir: {tmp_path / 'remote'}\nhosts: [picky]\n")
    env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": agent}
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "echo reached", cwd=tmp_path)
    if identities_only:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "[node-0] reached" in done.stdout
    else:
        # As with `ssh`: the agent's keys go first, and the node gives up before other_key.
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"cannot log in to node-0 as {getpass.getuser()!r}" in done.stderr
        assert "cut the login off after too many keys" in done.stderr
        assert "add `IdentitiesOnly yes`" in done.stderr


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("Ciphers aes256-cbc", "No matching encryption algorithm found"),
        ("KexAlgorithms diffie-hellman-group1-sha1", "No matching key exchange algorithm found"),
    ],
)
def test_a_config_that_leaves_no_algorithm_in_common_is_exit_2_naming_it(
    user_home, tmp_path, setting, said
):
    """A user's Ciphers or KexAlgorithms that the node's sshd accepts none of: one message
    saying so and where to look, exit 2, at once (the same on every try, so not retried)."""
    hosts, env = user_home
    config = tmp_path / "home" / ".ssh" / "config"
    config.write_text(config.read_text() + f"  {setting}\n")
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "true", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said_all = " ".join((done.stdout + done.stderr).split())
    assert "cannot agree on algorithms with node-" in said_all
    assert said in said_all
    assert "KexAlgorithms, MACs and HostKeyAlgorithms lines of ~/.ssh/config" in said_all
    assert "Traceback" not in said_all


def test_match_exec_runs_for_every_host_at_once(user_home, tmp_path):
    """`Match exec` in ~/.ssh/config runs a command to decide whether a block applies, for each
    host. dtrun reads the config for every host (its own resolution, then asyncssh's connect),
    each pass for all hosts at once. Before, its own pass went one host after another: a 1 s
    `Match exec` took 4 s on 2 nodes."""
    hosts, env = user_home
    ran, gate, match = tmp_path / "ran", tmp_path / "gate", tmp_path / "match.sh"
    # each run waits (up to 20 s) until both hosts' first runs have begun: one host after
    # another, the first would wait out its time and leave the gate file
    match.write_text(
        f"echo run >> {ran}; i=0\n"
        f"while [ $(wc -l < {ran}) -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done\n"
        f"[ $i -lt 200 ] || touch {gate}\nexit 1\n"
    )
    config = tmp_path / "home" / ".ssh" / "config"
    config.write_text(f'Match exec "sh {match}"\n  User nobody\n' + config.read_text())
    done = dtrun(env, "exec", "--hosts", str(hosts), "--", "echo reached", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout
    assert not gate.exists(), "a host's Match exec waited out the other's: one after another"
