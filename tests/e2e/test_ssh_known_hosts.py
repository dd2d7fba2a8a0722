"""Host keys as OpenSSH keeps them: a known_hosts file written by `ssh-keyscan -H` (hashed
names, `[address]:port` for a port other than 22), checked under the HostName a Host alias of
~/.ssh/config leads to, and a new key recorded where `ssh` itself reads it. Real sshd on
127.0.0.44-45, port 2244; the hosts file names only the aliases."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import sshd
from tests.conftest import DTRUN, require_tool
from tests.sshd import SshCluster

pytestmark = pytest.mark.e2e

PORT = 2244
ADDRESSES = ("127.0.0.44", "127.0.0.45")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    cluster = sshd.start_cluster(tmp_path_factory.mktemp("known"), 2, PORT, first=44)
    yield cluster
    cluster.close()


class Home:
    """A user's HOME: ~/.ssh/config with the aliases gpu0 and gpu1, the default key, and a
    known_hosts file the test writes; no agent."""

    def __init__(self, cluster: SshCluster, tmp: Path) -> None:
        self.tmp = tmp
        self.ssh = tmp / "home" / ".ssh"
        self.ssh.mkdir(parents=True)
        self.key = self.ssh / "id_ed25519"
        shutil.copy(cluster.key, self.key)
        self.key.chmod(0o600)
        self.known = self.ssh / "known_hosts"
        self.config = self.ssh / "config"
        self.config.write_text(
            "".join(
                f"Host gpu{index}\n  HostName {address}\n  Port {PORT}\n"
                for index, address in enumerate(ADDRESSES)
            )
        )
        self.hosts = tmp / "hosts.yaml"
        self.hosts.write_text(
            f"cpus: 1\ninterface: lo\nworkdir: {tmp / 'remote'}\nhosts: [gpu0, gpu1]\n"
        )
        env = {key: value for key, value in os.environ.items() if key != "SSH_AUTH_SOCK"}
        self.env = {**env, "HOME": str(tmp / "home")}

    def exec(self, *options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*DTRUN, "exec", "--hosts", str(self.hosts), *options, "--", "echo reached"],
            cwd=self.tmp, env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def ssh_to(self, *destination: str, config: Path | None = None) -> int:
        """The real `ssh`, refusing any key it cannot check against this known_hosts."""
        require_tool("ssh")
        done = subprocess.run(
            [
                "ssh", "-F", str(config or os.devnull), "-i", str(self.key),
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.known}",
                "-o", "GlobalKnownHostsFile=/dev/null", *destination, "true",
            ],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return done.returncode


def keyscan(*addresses: str) -> list[str]:
    """`ssh-keyscan -H`'s lines: `|1|salt|hash ssh-ed25519 KEY`, the name hashed."""
    require_tool("ssh-keyscan")
    done = subprocess.run(
        ["ssh-keyscan", "-H", "-t", "ed25519", "-p", str(PORT), *addresses],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert len(lines) == len(addresses) and all(line.startswith("|1|") for line in lines)
    return lines


def test_hashed_entries_of_host_and_port_are_trusted(cluster, tmp_path):
    home = Home(cluster, tmp_path)
    home.known.write_text("\n".join(keyscan(*ADDRESSES)) + "\n")
    done = home.exec()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[node-0] reached" in done.stdout and "[node-1] reached" in done.stdout


def test_a_changed_key_under_a_hashed_entry_is_refused_as_changed(cluster, tmp_path):
    home = Home(cluster, tmp_path)
    hashed_name = keyscan(ADDRESSES[0])[0].split()[0]
    impostor = cluster.hosts[1].host_key  # 127.0.0.45's key, on record for 127.0.0.44
    home.known.write_text(f"{hashed_name} {impostor}\n" + keyscan(ADDRESSES[1])[0] + "\n")
    for options in ((), ("--accept-new-host-keys",)):
        refused = home.exec(*options)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"the host key of node-0 ([{ADDRESSES[0]}]:{PORT}) has CHANGED" in refused.stderr
        assert "Traceback" not in refused.stderr


def test_an_unknown_key_of_an_alias_names_its_address_to_scan(cluster, tmp_path):
    home = Home(cluster, tmp_path)
    home.known.write_text(keyscan(ADDRESSES[1])[0] + "\n")
    refused = home.exec()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"the host key of node-0 ([{ADDRESSES[0]}]:{PORT}) is not known" in refused.stderr
    assert f"ssh-keyscan -p {PORT} {ADDRESSES[0]} >> {home.known}" in refused.stderr


def test_the_suggested_keyscan_line_works_pasted_into_a_shell_for_an_odd_path(cluster, tmp_path):
    """A hosts file's known_hosts in a folder whose name has a space and a `;`: the line dtrun
    suggests, run by sh as a user pastes it, records the key there (unquoted, it wrote to
    `.../my` and ran `x/known_hosts`)."""
    home = Home(cluster, tmp_path)
    odd = tmp_path / "my keys; x" / "known_hosts"
    odd.parent.mkdir()
    odd.write_text(keyscan(ADDRESSES[1])[0] + "\n")
    home.hosts.write_text(home.hosts.read_text() + f"known_hosts: {json.dumps(str(odd))}\n")
    refused = home.exec()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = re.search(r"run `(ssh-keyscan [^`]*)`", " ".join(refused.stderr.split()))
    assert line is not None, refused.stderr
    require_tool("ssh-keyscan")
    subprocess.run(["sh", "-c", line.group(1)], cwd=tmp_path, check=True, timeout=30,
                   capture_output=True)  # fmt: skip
    reached = home.exec()
    assert reached.returncode == 0, reached.stdout + reached.stderr


def test_an_accepted_key_is_recorded_where_ssh_itself_reads_it(cluster, tmp_path):
    home = Home(cluster, tmp_path)
    home.known.write_text("")
    assert home.ssh_to("-p", str(PORT), ADDRESSES[0]) != 0  # nothing on record yet
    accepted = home.exec("--accept-new-host-keys")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    recorded = sorted(line.split()[0] for line in home.known.read_text().splitlines())
    assert recorded == [f"[{address}]:{PORT}" for address in ADDRESSES]
    for address in ADDRESSES:
        assert home.ssh_to("-p", str(PORT), address) == 0
    assert home.ssh_to("gpu1", config=home.config) == 0
