"""--probe over SSH, on two real sshd nodes: the probe's launch directory is staged in its run's
folder on the nodes, and a full disk there during the probe is named as that disk
(runner/spec/launchplan.py staged_path, runner/record/writefail.py unwritten)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import sshd
from tests.conftest import DTRUN, fill, wait_for
from tests.e2e.test_ssh import hosts_file_text
from tests.paths import TESTS
from tests.sshd import SshCluster

pytestmark = pytest.mark.e2e

DDP = str(TESTS / "programs" / "ddp_loop.py")
PORT = 2292  # sshd's, on 127.0.0.80 and .81


def _bench(root: Path, cluster: SshCluster, run_id: str) -> list[str]:
    hosts = root / "hosts.yaml"
    hosts.write_text(hosts_file_text(cluster, root, count=2, port=PORT))
    return [
        *DTRUN, "bench", "--hosts", str(hosts), "--nodes", "2", "--repeat", "1", "--warmup",
        "2", "--no-health-gate", "--port", "2294", "--run-id", run_id, "--quiet", "--probe",
        "--", "python", DDP, "--steps", "5", "--sleep", "0",
    ]  # fmt: skip


@pytest.fixture
def nodes(no_leftovers: Path) -> Iterator[SshCluster]:
    """Two sshd on 127.0.0.80 and .81 that share this machine's disk (workdir: remote/)."""
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    cluster = sshd.start_cluster(no_leftovers / "sshd", count=2, port=PORT, first=80)
    yield cluster
    cluster.close()


@pytest.fixture
def nodes_with_own_disks(no_leftovers: Path) -> Iterator[SshCluster]:
    """Two sshd on 127.0.0.80 and .81, each whose sessions see a tmpfs of their own at
    remote/runs, where the launch directories are staged."""
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    runs = no_leftovers / "remote" / "runs"
    runs.mkdir(parents=True)
    wrapper = sshd.own_disk(runs, 4096)
    cluster = sshd.start_cluster(
        no_leftovers / "sshd", count=2, port=PORT, first=80, wrapper=wrapper
    )
    yield cluster
    cluster.close()


def test_each_run_s_probe_is_staged_in_its_own_run_s_folder_on_the_nodes(
    nodes: SshCluster, no_leftovers: Path
):
    """Two runs on nodes whose workdir they share: each run's probe runs in its run's folder
    there, beside the program's launch, and measures. Before, every run's probe was staged at
    remote/runs/n2/r0/probe: one folder for all runs, where one run's probe overwrote
    another's scripts and result."""
    for run_id in ("alice", "bob"):
        done = subprocess.run(
            _bench(no_leftovers, nodes, run_id), cwd=no_leftovers, capture_output=True,
            text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads((no_leftovers / "runs" / run_id / "n2/r0/result.json").read_text())
        assert "probe_error" not in result, result["probe_error"]
        assert result["busbw"]["rows"]
        staged = no_leftovers / "remote" / "runs" / run_id / "n2" / "r0" / "probe"
        assert (staged / "result.json").is_file(), sorted(staged.parent.rglob("*"))
    assert not (no_leftovers / "remote" / "runs" / "n2").exists()


def test_a_full_disk_on_a_node_during_the_probe_is_said_as_that_disk(
    nodes_with_own_disks: SshCluster, no_leftovers: Path
):
    """Node 0's disk fills once the probe is staged, before its all-reduce writes its
    result.json: the program's result says that disk is full, on node-0. Before, the node's
    full-disk line named a folder without the run id, which dtrun took for an older run's, and
    the probe was said to have failed: "node-0 (127.0.0.80) failed"."""
    cluster = nodes_with_own_disks
    node = cluster.processes[cluster.hosts[0].address].pid
    node_disk = Path(f"/proc/{node}/root{no_leftovers / 'remote' / 'runs'}")
    dtrun = subprocess.Popen(
        _bench(no_leftovers, cluster, "full"), cwd=no_leftovers, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    launch = no_leftovers / "runs" / "full" / "n2" / "r0"
    try:
        # the probe's node log is opened here once its files are staged on every node
        wait_for((launch / "probe" / "node-0.log").is_file, timeout=240, what="the probe")
        fill(node_disk)
        stdout, stderr = dtrun.communicate(timeout=240)
    finally:
        dtrun.kill()
    assert dtrun.returncode == 0, stdout + stderr  # the program's measurement stands
    staged = no_leftovers / "remote" / "runs" / "full" / "n2" / "r0" / "probe"
    said = json.loads((launch / "result.json").read_text())["probe_error"]
    assert said == (
        f"the all-reduce probe's result could not be kept: the disk holding {staged} on node-0 "
        "is full"
    )
    assert said in " ".join(stderr.split())  # a warning, under --quiet too
    assert "busbw" not in json.loads((launch / "result.json").read_text())
