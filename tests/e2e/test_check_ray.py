"""`dtrun check --ray` on a real two-node Ray cluster (tests/raycluster.py: a head on 127.0.0.2
and a second raylet on 127.0.0.3): the nodes and their link named by their addresses, a raylet
lost during the check named by its node, without Ray's own report of it in dtrun's output, and
nothing left (docs/ray.md). A module of its own: a raylet started again on an address after a
kill took no task of a check here, so each module kills one raylet, last."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DTRUN, default_signals, ends_within, run_dtrun, wait_for
from tests.raycluster import HEAD, SECOND, RayCluster, ray_cluster_up

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]  # Ray under load: minutes

NOTHING: dict[str, list[object]] = {"actors": [], "groups": [], "processes": []}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """One cluster for the module; the test that kills a raylet comes last (a raylet started
    again on its address after a kill took no task of a check here)."""
    pytest.importorskip("ray", reason="./dev setup installs Ray (the ray extra)")
    with ray_cluster_up() as up:
        yield up


def _start(where: Path, *args: str) -> tuple[subprocess.Popen[bytes], object]:
    out = (where / "dtrun.out").open("w+")
    dtrun = subprocess.Popen([*DTRUN, *args], cwd=where, stdout=out, stderr=subprocess.STDOUT,
                             preexec_fn=default_signals)  # fmt: skip
    return dtrun, out


def _said(out: object) -> str:
    out.flush()  # type: ignore[attr-defined]
    out.seek(0)  # type: ignore[attr-defined]
    return out.read()  # type: ignore[attr-defined, no-any-return]


def test_check_names_each_ray_node_by_its_address_and_their_link(ray_cluster, tmp_path):
    done = run_dtrun(
        "check", "--ray", ray_cluster.address, "--json", "--output", str(tmp_path / "runs"),
        "--run-id", "check", cwd=tmp_path, timeout=900,
    )  # fmt: skip
    # a loaded machine may make a node slow: the names are what this test is about
    assert done.returncode in (0, 5), done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [node["host"] for node in data["nodes"]] == [HEAD, SECOND], data
    assert [(link["a"], link["b"]) for link in data["links"]] == [(HEAD, SECOND)], data
    assert "dtrun check: 2 nodes x 1 on ray:" in done.stderr
    assert ray_cluster.leftovers() == NOTHING


def test_a_raylet_lost_during_check_is_named_by_its_node(ray_cluster, tmp_path):
    # last in the module: it leaves 127.0.0.3 without a raylet
    dtrun, out = _start(tmp_path, "check", "--ray", ray_cluster.address, "--json",
                        "--output", str(tmp_path / "runs"), "--run-id", "c")  # fmt: skip
    wait_for(lambda: ray_cluster.under(SECOND, "dtrun.workloads.check") != [], timeout=400,
             what="the check's ranks on 127.0.0.3")  # fmt: skip
    ray_cluster.raylet(SECOND).kill()
    # the check goes on without it (before: the whole check failed, exit 1)
    assert ends_within(dtrun, 400, out) == 5  # type: ignore[arg-type]
    said = _said(out)
    data = json.loads((tmp_path / "runs" / "c" / "check.json").read_text())
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts.get(SECOND) == ("failed", "unreachable"), (verdicts, said)
    assert list(verdicts) == [HEAD, SECOND], verdicts
    evidence = next(n for n in data["nodes"] if n["host"] == SECOND)["figures"]["evidence"]
    assert evidence[0].startswith(f"lost during the check: ray-1 ({SECOND}) was lost"), evidence
    # Ray's own report of the dead raylet (its log's last lines) is not dtrun's output
    assert "Traceback" not in said and "Raylet is terminated" not in said, said
    wait_for(lambda: ray_cluster.leftovers() == NOTHING, timeout=120,
             what="no actor, placement group or process left")  # fmt: skip
