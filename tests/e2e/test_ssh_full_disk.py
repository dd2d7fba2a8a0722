"""A full disk on an SSH node with a disk of its own whose launch directory has the path of
this machine's run directory (the hosts file's workdir is the folder dtrun runs in): the node
and its disk are named, not this machine's disk (runner/record/writefail.py ``unwritten``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import sshd
from tests.conftest import DTRUN, fill, wait_for
from tests.e2e.test_ssh import hosts_file_text
from tests.sshd import SshCluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def node_with_its_own_disk(no_leftovers: Path) -> Iterator[SshCluster]:
    """One sshd on 127.0.0.60 whose sessions see a tmpfs of their own at ``no_leftovers``/runs,
    where this machine has its own folder of that name."""
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    runs = no_leftovers / "runs"
    runs.mkdir()
    wrapper = sshd.own_disk(runs, 4096)
    cluster = sshd.start_cluster(no_leftovers / "sshd", count=1, first=60, wrapper=wrapper)
    yield cluster
    cluster.close()


def test_a_full_disk_on_a_node_at_the_run_directory_s_path_names_that_node(
    node_with_its_own_disk: SshCluster, no_leftovers: Path
):
    """The node's disk fills while the workload runs; its result.json cannot be written. The
    node's log names the file by the path the run directory has here. Before, this machine's
    disk was said full, with this machine's free space, and its fix was to free space here."""
    cluster = node_with_its_own_disk
    runs = no_leftovers / "runs"
    hosts = no_leftovers / "hosts.yaml"
    hosts.write_text(hosts_file_text(cluster, no_leftovers, count=1, workdir=str(no_leftovers)))
    dtrun = subprocess.Popen(
        [*DTRUN, "bench", "--hosts", str(hosts), "--nodes", "1", "--steps", "60", "--warmup",
         "1", "--repeat", "1", "--port", "29836", "--run-id", "full", "--quiet"],
        cwd=no_leftovers, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    node_disk = Path(f"/proc/{cluster.processes[cluster.hosts[0].address].pid}/root{runs}")
    log = runs / "full" / "n1" / "r0" / "node-0.log"  # this machine's, its lines streamed
    try:
        # the workload's first timed step: staged, started, its result.json still to come
        wait_for(lambda: log.is_file() and "step" in log.read_text(), timeout=120, what="a step")
        fill(node_disk)
        stdout, stderr = dtrun.communicate(timeout=240)
    finally:
        dtrun.kill()
    said = " ".join(stderr.split())
    assert dtrun.returncode == 1, stdout + stderr
    staged = runs / "full" / "n1" / "r0"
    assert f"error: the disk holding {staged} on node-0 is full" in said, said
    assert "next: free space on node-0 and run the command again" in said
    assert "bytes free" not in said  # this machine's disk has room: no figure of it
    assert not (node_disk / "full" / "n1" / "r0" / "result.json").exists()
    record = json.loads((runs / "full" / "runs.json").read_text())
    assert [run["status"] for run in record["runs"]] == ["failed"]
    assert "on node-0 is full" in record["runs"][0]["error"]
