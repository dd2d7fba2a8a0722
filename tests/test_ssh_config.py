"""SSH as OpenSSH users have it: a hosts file that names only Host aliases of the user's
~/.ssh/config, logged into with the user's default key, against real sshd on 127.0.0.x."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import DTRUN

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
    assert "│ node-0 │ 127.0.0.2 │ 0" in done.stdout and "│ node-1 │ 127.0.0.3 │ 0" in done.stdout


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
    assert "│ node-0 │ 127.0.0.2 │ 0" in done.stdout and "│ node-1 │ 127.0.0.3 │ 0" in done.stdout
