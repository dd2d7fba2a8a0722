"""`dtrun check` for real: the embedded cluster, real sshd nodes (127.0.0.2-5:2222) and a host
that does not answer (docs/check.md). The judging itself: tests/unit/test_check.py."""

from __future__ import annotations

import json

import pytest
import yaml

from tests import faults
from tests.conftest import run_dtrun
from tests.e2e.test_ssh import hosts_file_text

pytestmark = pytest.mark.e2e


def _check(tmp, *args, run_id="check"):
    done = run_dtrun(
        "check", *args, "--output", str(tmp / "runs"), "--run-id", run_id, "--json",
        cwd=tmp, timeout=280,
    )  # fmt: skip
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


@pytest.mark.parametrize(("nodes", "port"), [(2, 29810), (4, 29820)])
def test_a_clean_embedded_cluster_checks_ok_and_exits_0(no_leftovers, nodes, port):
    done, data = _check(no_leftovers, "--local-nodes", str(nodes), "--port", str(port))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(n["host"], n["verdict"], n["cause"]) for n in data["nodes"]] == [
        (f"node-{i}", "ok", None) for i in range(nodes)
    ]
    assert len(data["links"]) == (1 if nodes == 2 else 4)  # 1 round of 1 pair; 2 rounds of 2
    assert all(link["verdict"] == "ok" and link["busbw_gbs"] > 0 for link in data["links"])
    for node in data["nodes"]:
        assert node["figures"]["compute_gflops"] > 0 and node["figures"]["memory_gbs"] > 0
    record = json.loads((no_leftovers / "runs" / "check" / "check.json").read_text())
    assert record["nodes"] == data["nodes"] and record["wall_s"] > 0
    assert (no_leftovers / "runs" / "check" / "check" / "result.json").is_file()


def _hosts(cluster, tmp, extra=()):
    text = hosts_file_text(cluster, tmp)
    data = yaml.safe_load(text)
    data["hosts"] += list(extra)
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _kept(path):
    """The hosts a written hosts file lists (entries as the original wrote them)."""
    return [
        e["host"] if isinstance(e, dict) else e for e in yaml.safe_load(path.read_text())["hosts"]
    ]


def test_clean_sshd_nodes_check_ok_and_write_hosts_keeps_them_all(sshd_cluster, no_leftovers):
    hosts = _hosts(sshd_cluster, no_leftovers)
    kept = no_leftovers / "good.yaml"
    done, data = _check(
        no_leftovers, "--hosts", str(hosts), "--port", "29830", "--write-hosts", str(kept)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [n["verdict"] for n in data["nodes"]] == ["ok"] * 4
    assert [n["host"] for n in data["nodes"]] == [h.address for h in sshd_cluster.hosts]
    assert yaml.safe_load(kept.read_text()) == yaml.safe_load(hosts.read_text())


def test_a_host_that_does_not_answer_is_named_and_the_others_are_checked(
    sshd_cluster, no_leftovers
):
    # nothing listens on 127.0.0.9: the login is refused, the four sshd nodes are checked
    hosts = _hosts(sshd_cluster, no_leftovers, extra=[{"host": "127.0.0.9"}])
    kept = no_leftovers / "good.yaml"
    done, data = _check(
        no_leftovers, "--hosts", str(hosts), "--port", "29840", "--write-hosts", str(kept)
    )
    assert done.returncode == 5, done.stdout + done.stderr
    flagged = [(n["host"], n["verdict"], n["cause"]) for n in data["nodes"] if n["verdict"] != "ok"]
    assert flagged == [("127.0.0.9", "failed", "unreachable")]
    assert len([n for n in data["nodes"] if n["verdict"] == "ok"]) == 4
    assert _kept(kept) == [h.address for h in sshd_cluster.hosts]


# A fifth of a CPU (tests/faults.py): the throttled node computes and copies about 5x slower
# when its turn comes, alone, whatever else the machine runs.
SHARE = 0.2


def _flagged(data):
    nodes = [(n["host"], n["verdict"], n["cause"]) for n in data["nodes"] if n["verdict"] != "ok"]
    links = [(link["a"], link["b"]) for link in data["links"] if link["verdict"] == "slow"]
    return nodes, links


def test_a_throttled_sshd_node_is_named_alone_with_cause_compute(sshd_cluster, no_leftovers):
    slow = sshd_cluster.hosts[2].address
    hosts = _hosts(sshd_cluster, no_leftovers)
    kept = no_leftovers / "good.yaml"
    with faults.slow_sshd(sshd_cluster, slow, SHARE) as group:
        done, data = _check(
            no_leftovers, "--hosts", str(hosts), "--port", "29850", "--write-hosts", str(kept)
        )
        periods, _ = group.throttled()
    assert periods > 0, "the quota never held the node back"
    assert done.returncode == 5, done.stdout + done.stderr
    nodes, links = _flagged(data)
    assert nodes == [(slow, "slow", "compute")], done.stdout
    assert links == []
    assert _kept(kept) == [h.address for h in sshd_cluster.hosts if h.address != slow]


def test_a_node_whose_link_is_shaped_is_named_alone_with_cause_network(sshd_cluster, no_leftovers):
    # every packet to the node at 20 Mbit/s (tests/faults.py slow_link): slow with each of
    # its partners, while the pairs without it run at loopback speed
    slow = sshd_cluster.hosts[1].address
    hosts = _hosts(sshd_cluster, no_leftovers)
    with faults.slow_link(slow, "20mbit"):
        done, data = _check(no_leftovers, "--hosts", str(hosts), "--port", "29860")
    assert done.returncode == 5, done.stdout + done.stderr
    nodes, links = _flagged(data)
    assert nodes == [(slow, "slow", "network")], done.stdout
    assert links == []
    by_pair = {(link["a"], link["b"]): link["verdict"] for link in data["links"]}
    assert {v for (a, b), v in by_pair.items() if slow in (a, b)} == {"node"}
    assert {v for (a, b), v in by_pair.items() if slow not in (a, b)} == {"ok"}
