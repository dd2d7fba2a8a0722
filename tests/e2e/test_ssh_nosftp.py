"""ssh nosftp: the tests that start daemons or real launches; the others are in
tests/unit/test_ssh_nosftp.py."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.session import SshError, SshSession
from dtrun.engines.ssh.transfer import exec_put
from tests.conftest import run_dtrun
from tests.unit.test_ssh_nosftp import (
    AWKWARD,
    PYTHON_BIN,
    _hosts_text,
    nosftp,  # noqa: F401 - a fixture
)


@pytest.mark.e2e
def test_files_reach_a_node_without_sftp_byte_for_byte(nosftp, tmp_path):
    inventory = parse_hosts_file(
        _hosts_text(nosftp, tmp_path), "hosts.yaml", Defaults(nosftp.user, PYTHON_BIN)
    )
    node = inventory.nodes[0]
    remote = tmp_path / "remote" / "files"
    files = {str(remote / name): content for name, content in AWKWARD.items()}
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        session.call(executor._put(node, files, {}))
        session.call(executor._put(node, {str(remote / "again"): (b"2", 0o600)}, {}))
    for path, (content, mode) in files.items():
        assert Path(path).read_bytes() == content, path
        assert stat.S_IMODE(Path(path).stat().st_mode) == mode
    assert (remote / "again").read_bytes() == b"2"
    assert not list(tmp_path.rglob("*.dtrun-part.*"))
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


@pytest.mark.e2e
def test_a_write_that_fails_on_a_node_without_sftp_names_the_node_and_what_to_do(nosftp, tmp_path):
    inventory = parse_hosts_file(
        _hosts_text(nosftp, tmp_path), "hosts.yaml", Defaults(nosftp.user, PYTHON_BIN)
    )
    (tmp_path / "blocker").write_text("a file where a directory should be")
    with SshSession(inventory) as session, pytest.raises(SshError) as caught:
        session.call(
            SshExecutor(session)._put(
                inventory.nodes[1], {str(tmp_path / "blocker" / "x.sh"): (b"x", 0o700)}, {}
            )
        )
    error = caught.value
    assert "cannot write the launch files on node-1 (127.0.0.20)" in error.message
    assert "through the SSH session" in error.message and "next:" in error.message


@pytest.mark.e2e
def test_bench_runs_on_nodes_whose_sshd_offers_no_sftp(nosftp, no_leftovers):
    hosts = no_leftovers / "hosts.yaml"
    hosts.write_text(_hosts_text(nosftp, no_leftovers))
    done = run_dtrun(
        "bench", "--hosts", str(hosts), "--nodes", "1,2", "--steps", "3", "--warmup", "1",
        "--repeat", "1", "--port", "29780", "--output", str(no_leftovers / "runs"),
        "--run-id", "nosftp", "--quiet", cwd=no_leftovers,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output
    run = no_leftovers / "runs" / "nosftp"
    summary = json.loads((run / "summary.json").read_text())
    assert [(row["nodes"], row["in_sync"]) for row in summary["rows"]] == [(1, True), (2, True)]
    result = json.loads((run / "n2" / "r0" / "result.json").read_text())
    assert sorted(rank["address"] for rank in result["ranks"]) == ["127.0.0.19", "127.0.0.20"]
    scripts = list((no_leftovers / "remote").rglob("node-*.sh"))
    assert scripts and all(stat.S_IMODE(s.stat().st_mode) == 0o700 for s in scripts)
    assert not list(no_leftovers.rglob("*.dtrun-part.*")) and not list(run.rglob(".*.part"))


@pytest.mark.e2e
def test_the_code_goes_to_a_node_once_and_again_when_it_changed_there(nosftp, tmp_path):
    """Through a real login: the node answers whether it holds the code (sha256sum -c), and
    only a node that lacks it, or holds another version, is sent it (transfer.py, exec_put)."""
    inventory = parse_hosts_file(
        _hosts_text(nosftp, tmp_path), "hosts.yaml", Defaults(nosftp.user, PYTHON_BIN)
    )
    node = inventory.nodes[0]
    target = tmp_path / "code" / "dtrun" / "train.py"
    code = {str(target): (b"steps = 10\n" * 2000, 0o644)}
    launch = {str(tmp_path / "runs" / "node-0.sh"): (b"true\n", 0o700)}

    async def put() -> bool:
        return await exec_put(await session.connection(node), node, launch, code)

    with SshSession(inventory) as session:
        assert session.call(put()) is True
        assert session.call(put()) is False  # there already: only the launch's files go
        target.write_bytes(b"steps = 11\n")
        assert session.call(put()) is True
    assert target.read_bytes() == code[str(target)][0]
    assert (tmp_path / "runs" / "node-0.sh").read_bytes() == b"true\n"
