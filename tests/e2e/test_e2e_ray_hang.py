"""A Ray node that hangs (SIGSTOPped: alive, answering nothing) during a launch, each test on
a real two-node Ray cluster of its own (tests/raycluster.py): after it, the node's raylet is
gone for good, as after a kill, so it shares no cluster with another test."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import psutil
import pytest

from tests.conftest import DTRUN, default_signals, ends_within, wait_for
from tests.e2e.test_e2e_ray_faults import SLEEP, _nothing_left, _said, _sleepers
from tests.raycluster import SECOND, RayCluster, ray_cluster_up

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TIMEOUT_S = 150  # the launch's --timeout: past Ray's health checks (about 60 s)
SHORT_S = 40  # one before them, with the node hung from the first seconds of the launch


@pytest.fixture
def cluster() -> Iterator[RayCluster]:
    pytest.importorskip("ray", reason="./dev setup installs Ray (the ray extra)")
    with ray_cluster_up() as up:
        yield up


def _start(
    cluster: RayCluster, where: Path, timeout_s: float
) -> tuple[subprocess.Popen[bytes], IO[str]]:
    (where / "sleep.py").write_text(SLEEP)
    out = (where / "dtrun.out").open("w+")
    dtrun = subprocess.Popen(
        [*DTRUN, "run", "--ray", cluster.address, "--nodes", "2", "--timeout", f"{timeout_s:g}",
         "--output", str(where / "runs"), "--run-id", "h", "--", "python",
         str(where / "sleep.py")],
        cwd=where, stdout=out, stderr=subprocess.STDOUT, preexec_fn=default_signals,
    )  # fmt: skip
    try:
        wait_for(lambda: len(_sleepers(cluster)) >= 2, timeout=400, what="both nodes' ranks")
    except BaseException:
        ends_within(dtrun, 0.1, out)  # fails the test with what dtrun said, and its stacks
        raise
    return dtrun, out


def test_a_hung_raylet_fails_the_launch_by_its_node_before_its_timeout(cluster, tmp_path):
    """The raylet of ray-1 hangs; its worker, and the rank in it, run on and answer dtrun's
    polls. Ray calls the node dead once its health checks fail (65 s here, tried by hand):
    the launch fails naming ray-1, before --timeout, and leaves nothing on the cluster. A node
    hung whole (worker too) at --timeout is named as hung there (tests/unit/test_ray.py)."""
    dtrun, out = _start(cluster, tmp_path, TIMEOUT_S)
    raylet = None
    try:
        raylet = cluster.raylet(SECOND)
        raylet.send_signal(signal.SIGSTOP)
        code = ends_within(dtrun, TIMEOUT_S + 120, out)
    finally:
        if raylet is not None:
            raylet.send_signal(signal.SIGCONT)
        dtrun.kill()
    said = _said(out)
    assert code == 1, said
    assert f"ray-1 ({SECOND}) was lost" in said, said
    assert "Traceback" not in said, said
    record = json.loads((tmp_path / "runs" / "h" / "run.json").read_text())
    assert record["status"] == "failed"
    lost = {n["node"]: n.get("cause") for n in record["nodes"]}
    assert (lost["ray-1"] or "").startswith("Ray lost it"), record["nodes"]
    _nothing_left(cluster)


def test_a_node_hung_whole_is_named_at_the_launchs_timeout(cluster, tmp_path):
    """ray-1's raylet, worker and rank all SIGSTOPped: its actor answers no poll. At --timeout,
    before Ray calls the node dead, the launch stops every node (the hung one's stop waits out
    its grace) and names ray-1 as the node that stopped answering."""
    dtrun, out = _start(cluster, tmp_path, SHORT_S)
    frozen: list[psutil.Process] = []
    try:
        frozen = [cluster.raylet(SECOND), *cluster.under(SECOND, "")]  # its worker, the rank
        for proc in frozen:
            proc.send_signal(signal.SIGSTOP)
        code = ends_within(dtrun, SHORT_S + 120, out)
    finally:
        for proc in frozen:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGCONT)
        dtrun.kill()
    said = _said(out)
    assert code == 1, said
    assert f"did not finish within {SHORT_S} s" in said, said
    assert f"ray-1 ({SECOND}) had not answered dtrun for" in said, said
    assert "ray-0 (" not in said.partition("still running")[2], said
    assert "Traceback" not in said, said
    _nothing_left(cluster)
