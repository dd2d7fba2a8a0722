"""A Ray node that hangs (its raylet SIGSTOPped: alive, answering nothing) during a launch, on
a real two-node Ray cluster of its own (tests/raycluster.py): after it, the node's raylet is
gone for good, as after a kill, so it shares no cluster with the other fault tests."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import DTRUN, default_signals, ends_within, wait_for
from tests.e2e.test_e2e_ray_faults import SLEEP, _nothing_left, _said, _sleepers
from tests.raycluster import SECOND, RayCluster, ray_cluster_up

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TIMEOUT_S = 150  # the launch's --timeout: past Ray's health checks (about 60 s)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    pytest.importorskip("ray", reason="./dev setup installs Ray (the ray extra)")
    with ray_cluster_up() as up:
        yield up


def test_a_hung_raylet_fails_the_launch_by_its_node_before_its_timeout(cluster, tmp_path):
    """The raylet of ray-1 hangs; its worker, and the rank in it, run on and answer dtrun's
    polls. Ray calls the node dead once its health checks fail (65 s here, tried by hand):
    the launch fails naming ray-1, before --timeout, and leaves nothing on the cluster. A node
    hung whole (worker too) at --timeout is named as hung there (tests/unit/test_ray.py)."""
    (tmp_path / "sleep.py").write_text(SLEEP)
    out = (tmp_path / "dtrun.out").open("w+")
    dtrun = subprocess.Popen(
        [*DTRUN, "run", "--ray", cluster.address, "--nodes", "2", "--timeout", str(TIMEOUT_S),
         "--output", str(tmp_path / "runs"), "--run-id", "h", "--", "python",
         str(tmp_path / "sleep.py")],
        cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, preexec_fn=default_signals,
    )  # fmt: skip
    raylet = None
    try:
        wait_for(lambda: len(_sleepers(cluster)) >= 2, timeout=400, what="both nodes' ranks")
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
