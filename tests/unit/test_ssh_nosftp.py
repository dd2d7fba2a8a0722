"""Nodes whose sshd offers no SFTP subsystem (some sites disable it): dtrun copies the launch
files and the result through the exec channel instead (runner/engines/ssh/transfer.py), and an SSH
failure that remains names the node, what failed and what to do, with no traceback.

Real sshd instances without a `Subsystem sftp` line on 127.0.0.19-20, port 2223 (not the shared
sshd_cluster's addresses); under the e2e lock like every test that starts daemons."""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from dtrun.engines.ssh.session import SshError, lost_connection
from dtrun.engines.ssh.transfer import put_script
from dtrun.spec.cluster import Node
from tests import sshd
from tests.e2e.test_ssh import hosts_file_text
from tests.sshd import SshCluster

PORT = 2223
FIRST = 19  # 127.0.0.19, 127.0.0.20
PYTHON_BIN = str(Path(sys.executable).parent)
# paths and contents a shell could misread: spaces, quotes, $(...), a here-doc's end word,
# every byte value
AWKWARD = {
    "plain.sh": (b"#!/bin/sh\necho hi\n", 0o700),
    "a b/it's $(touch pwned) `x`.txt": (bytes(range(256)) * 3, 0o644),
    "DTRUN_END_OF_FILE": (b"DTRUN_END_OF_FILE\n" * 2, 0o600),
    "empty": (b"", 0o644),
}


@pytest.fixture(scope="module")
def nosftp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshCluster]:
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    cluster = sshd.start_cluster(
        tmp_path_factory.mktemp("nosftp"), 2, PORT, first=FIRST, sftp=False
    )
    yield cluster
    cluster.close()


def _hosts_text(cluster: SshCluster, tmp: Path, **fields: object) -> str:
    return hosts_file_text(cluster, tmp, count=2, port=PORT, **fields)


def test_the_script_writes_every_file_whole_with_its_mode_and_leaves_no_part(tmp_path):
    files = {str(tmp_path / "remote" / name): content for name, content in AWKWARD.items()}
    subprocess.run(["sh", "-s"], input=put_script(files).encode(), check=True, cwd=tmp_path)
    for path, (content, mode) in files.items():
        assert Path(path).read_bytes() == content, path
        assert stat.S_IMODE(Path(path).stat().st_mode) == mode
    assert not list(tmp_path.rglob("*.dtrun-part.*"))
    assert not (tmp_path / "pwned").exists()


def test_a_write_that_fails_stops_there_and_leaves_no_part(tmp_path):
    (tmp_path / "blocker").write_text("a file where a directory should be")
    files = {
        str(tmp_path / "first"): (b"1", 0o644),
        str(tmp_path / "blocker" / "x"): (b"2", 0o644),
        str(tmp_path / "after"): (b"3", 0o644),
    }
    done = subprocess.run(["sh", "-s"], input=put_script(files).encode(), cwd=tmp_path,
                          capture_output=True, check=False)  # fmt: skip
    assert done.returncode != 0
    assert (tmp_path / "first").read_bytes() == b"1" and not (tmp_path / "after").exists()
    assert not list(tmp_path.rglob("*.dtrun-part.*"))


@pytest.mark.parametrize(
    ("raised", "says"),
    [
        (
            lambda: asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "no"),
            "the sshd of node-1 (10.0.0.5) refused a session for copying the launch files",
        ),
        (
            lambda: asyncssh.SFTPFailure("disk quota exceeded"),
            "copying the launch files on node-1 (10.0.0.5) failed over SSH",
        ),
        (
            lambda: asyncssh.ConnectionLost("gone"),
            "lost the SSH connection to node-1 (10.0.0.5)",
        ),
    ],
)
def test_an_ssh_failure_names_the_node_what_failed_and_what_to_do(raised, says):
    node = Node(name="node-1", address="10.0.0.5", slots=1)
    with pytest.raises(SshError) as caught, lost_connection(node, "copying the launch files"):
        raise raised()
    error = caught.value
    assert error.exit_code == 1
    assert says in error.message and "next:" in error.message
    assert error.__suppress_context__  # no chained traceback behind the message
