"""`dtrun check` for real: the embedded cluster, real sshd nodes (127.0.0.2-5:2222) and a host
that does not answer, a saved stack outputs file over the sshd nodes (docs/check.md; Slurm:
tests/e2e/test_check_slurm.py; Spark: tests/e2e/test_check_spark.py). The judging itself:
tests/unit/test_check.py."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tests import faults, sshd
from tests.conftest import DTRUN, default_signals, ends_within, run_dtrun, wait_for
from tests.e2e.test_ssh import hosts_file_text
from tests.e2e.test_ssh_jump import user_env
from tests.paths import TESTS

pytestmark = pytest.mark.e2e


def _check(tmp, *args, run_id="check", timeout=280):
    done = run_dtrun(
        "check", *args, "--output", str(tmp / "runs"), "--run-id", run_id, "--json",
        cwd=tmp, timeout=timeout,
    )  # fmt: skip
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


@pytest.mark.alone  # a clean check flags nothing: a quiet machine's claim (pyproject.toml)
@pytest.mark.parametrize(("nodes", "port"), [(2, 29810), (4, 29820)])
def test_a_clean_embedded_cluster_checks_ok_and_exits_0(no_leftovers, nodes, port):
    done, data = _check(no_leftovers, "--local-nodes", str(nodes), "--port", str(port))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(n["host"], n["verdict"], n["cause"]) for n in data["nodes"]] == [
        (f"node-{i}", "ok", None) for i in range(nodes)
    ]
    assert len(data["links"]) == (1 if nodes == 2 else 6)  # every pair: 1 round; 3 rounds of 2
    judged = "unjudged" if nodes == 2 else "ok"  # two nodes' one pair: nothing to compare
    assert all(link["verdict"] == judged and link["busbw_gbs"] > 0 for link in data["links"])
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


@pytest.mark.alone  # a clean check flags nothing: a quiet machine's claim (pyproject.toml)
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


@pytest.mark.alone  # "named alone": the clean nodes flag nothing, a quiet machine's claim
def test_a_throttled_sshd_node_is_named_alone_with_cause_compute(sshd_cluster, no_leftovers):
    slow = sshd_cluster.hosts[2].address
    hosts = _hosts(sshd_cluster, no_leftovers)
    kept = no_leftovers / "good.yaml"
    sshd = sshd_cluster.processes[slow].pid
    with faults.slow_tree(
        sshd, SHARE, after=lambda: faults.check_said(no_leftovers, "dtrun: checking"),
        until=lambda: faults.check_said(no_leftovers, "dtrun: checked"),
    ) as group:  # fmt: skip
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


@pytest.mark.alone  # "named alone": the clean nodes flag nothing, a quiet machine's claim
def test_a_node_throttled_part_of_the_time_is_named_with_cause_compute(sshd_cluster, no_leftovers):
    """A 10% quota on for 1 s, off for 1 s: each compute timing's best of two can fall in a
    free stretch, while a pair timed in the quota reads slow. Before, that pair was named a
    slow link (0.21 GB/s against 1.0-1.2), or the node, slow with every partner, got cause
    network. The time its threads waited for a CPU names the node and its CPU, alone where
    every timing fell in a free stretch (CI: 0.79 s/s, the others 0.12-0.14, called ok)."""
    slow = sshd_cluster.hosts[1].address
    hosts = _hosts(sshd_cluster, no_leftovers)
    sshd = sshd_cluster.processes[slow].pid
    with faults.slow_tree(
        sshd, 0.1, after=lambda: faults.check_said(no_leftovers, "dtrun: checking"),
        until=lambda: faults.check_said(no_leftovers, "dtrun: checked"),
    ) as group, faults.intermittent(group, on_s=1.0, off_s=1.0):  # fmt: skip
        done, data = _check(no_leftovers, "--hosts", str(hosts), "--port", "29880")
        periods, _ = group.throttled()
    assert periods > 0, "the quota never held the node back"
    assert done.returncode == 5, done.stdout + done.stderr
    nodes, links = _flagged(data)
    assert nodes == [(slow, "slow", "compute")], done.stdout
    assert links == []


def _shaped_pairs(run, shaped):
    """The pairs a slow link on ``shaped`` slows: gloo's higher rank of a pair connects to the
    lower's address, and the connecting socket is not bound, so on loopback it sends from
    127.0.0.1. Packets to the shaped address then flow only in the pairs where the shaped node
    listens: those whose other node has a higher rank."""
    result = json.loads((run / "check" / "result.json").read_text())
    rank = {node["address"]: min(node["ranks"]) for node in result["nodes"]}
    pairs = [tuple(pair["nodes"]) for round_ in result["rounds"] for pair in round_]
    address = [node["address"] for node in result["nodes"]]
    return {
        (address[a], address[b])
        for a, b in pairs
        if shaped in (address[a], address[b])
        and rank[address[b] if address[a] == shaped else address[a]] > rank[shaped]
    }


@pytest.mark.alone  # "named alone": the clean nodes flag nothing, a quiet machine's claim
@pytest.mark.parametrize(("index", "port"), [(0, 29860), (1, 29870)])
def test_a_shaped_link_is_named_alone_as_its_link_or_its_node(
    sshd_cluster, no_leftovers, index, port
):
    # every packet to one node's address at 200 Mbit/s (tests/faults.py slow_link), about 30x
    # below its partners' busbw here (0.033 against 1.1-1.3 GB/s, under load): the node that
    # every partner connects to is slow with each (a node, cause network); one that only some
    # connect to has slow links with those alone (_shaped_pairs)
    shaped = sshd_cluster.hosts[index].address
    hosts = _hosts(sshd_cluster, no_leftovers)
    with faults.slow_link(shaped, "200mbit"):
        done, data = _check(no_leftovers, "--hosts", str(hosts), "--port", str(port))
    assert done.returncode == 5, done.stdout + done.stderr
    slow = _shaped_pairs(no_leftovers / "runs" / "check", shaped)
    result = (no_leftovers / "runs" / "check" / "check" / "result.json").read_text()
    assert slow, f"the shaped address carried none of the check's pairs: {data} {result}"
    mine = {(a, b) for a, b in slow}
    theirs = {(link["a"], link["b"]) for link in data["links"] if shaped in (link["a"], link["b"])}
    nodes, links = _flagged(data)
    if mine == theirs:  # slow with every partner: the node
        assert nodes == [(shaped, "slow", "network")], done.stdout
        assert links == []
    else:
        assert nodes == [], done.stdout
        assert set(links) == mine, done.stdout


def _outputs_file(cluster, tmp):
    """A saved stack outputs file (version 4, runner/cluster/outputs.py) for the sshd nodes:
    the head on 127.0.0.2, and 127.0.0.3 and 127.0.0.4 registered as the stack's CPU nodes on
    the "shared storage" (a directory here, read through the head, as `dtrun up`'s nodes are)."""
    head, *nodes = cluster.hosts[:3]
    shared = tmp / "shared"
    registry = shared / ".dtrun" / "nodes"
    registry.mkdir(parents=True)
    entry = json.loads((TESTS / "data" / "registry" / "dtrunnode000000.json").read_text())
    for index, node in enumerate(nodes):
        (registry / f"dtrunnode00000{index}.json").write_text(json.dumps(
            entry | {"hostname": f"dtrunnode00000{index}", "address": node.address, "gpus": 0,
                     "vm_size": "Standard_HB176rs_v4"}
        ))  # fmt: skip
    recorded = TESTS / "data" / "outputs" / "v4-h100-azurefiles-created.json"
    values = json.loads(recorded.read_text())
    values |= {
        "head_public_address": head.address, "ssh_user": cluster.user, "ssh_port": sshd.PORT,
        "ssh_private_key": cluster.key.read_text(),
        "known_hosts": [host.known_hosts_line for host in cluster.hosts],
        "node_count": len(nodes), "vm_size": "Standard_HB176rs_v4", "gpus_per_node": 0,
        "mount_path": str(shared), "registry_path": str(registry),
        "python_bin": str(Path(DTRUN[0]).parent),
        "expires_at": None, "idle_minutes": 0, "expiry_action": None,
    }  # fmt: skip
    path = tmp / "loop.json"
    path.write_text(json.dumps(values))
    return path, [node.address for node in nodes]


def test_a_check_on_a_saved_stack_outputs_file_names_the_nodes_by_their_addresses(
    sshd_cluster, no_leftovers
):
    outputs, addresses = _outputs_file(sshd_cluster, no_leftovers)
    kept = no_leftovers / "good.yaml"
    done, data = _check(
        no_leftovers, "--outputs", str(outputs), "--port", "29890", "--write-hosts", str(kept)
    )
    # 5: a noisy figure, not the stack: beside the other e2e worker a clean node once computed
    # 48% below its peer, twice (load 10-15); the verdicts are test_clean_sshd_nodes_check_ok's
    assert done.returncode in (0, 5), done.stdout + done.stderr
    assert [n["host"] for n in data["nodes"]] == addresses
    assert [(link["a"], link["b"]) for link in data["links"]] == [tuple(addresses)]
    flagged = {n["host"] for n in data["nodes"] if n["verdict"] != "ok"}
    assert (done.returncode == 5) == bool(flagged), data["nodes"]
    good = [a for a in addresses if a not in flagged]
    # the nodes ran the check from the stack's shared storage, each on its own address
    result = json.loads((no_leftovers / "runs" / "check" / "check" / "result.json").read_text())
    assert [node["address"] for node in result["nodes"]] == addresses
    assert (no_leftovers / "shared" / ".dtrun" / "code" / "dtrun" / "workloads").is_dir()
    assert _kept(kept) == good  # the flagged, if any, left out
    record = json.loads((no_leftovers / "runs" / "check" / "check.json").read_text())
    assert record["source"] == "stack:loop"
    # the written hosts file reaches the nodes as the stack did: through its head, with its
    # user, port, Python and shared storage; not its private key nor its known hosts, which
    # here are the user's own (the default key and ~/.ssh/known_hosts of a HOME of the test's)
    written = yaml.safe_load(kept.read_text())
    head = sshd_cluster.hosts[0].address
    assert (written["jump"], written["user"], written["port"]) == (
        head,
        sshd_cluster.user,
        sshd.PORT,
    )
    assert "PRIVATE KEY" not in kept.read_text() and "known_hosts" not in written
    again = run_dtrun(
        "check", "--hosts", str(kept), "--port", "29900", "--output", str(no_leftovers / "runs"),
        "--run-id", "again", "--json", cwd=no_leftovers, timeout=280,
        env=user_env(sshd_cluster, no_leftovers, ""),
    )  # fmt: skip
    assert again.returncode in (0, 5), again.stdout + again.stderr  # 5: a noisy figure, not SSH
    assert [n["host"] for n in json.loads(again.stdout)["nodes"]] == good


def test_a_node_lost_mid_check_is_named_and_the_others_are_checked(sshd_cluster, no_leftovers):
    """The fourth node's sshd and sessions go away once every rank has joined (a node going
    down): the check names it and measures the other three (before: the whole check failed)."""
    lost = sshd_cluster.hosts[3]
    hosts = _hosts(sshd_cluster, no_leftovers)

    def go_down() -> None:
        wait_for(lambda: faults.check_said(no_leftovers, "dtrun: checking"), timeout=200,
                 what="every rank to join")  # fmt: skip
        sshd_cluster.stop(lost.address)

    stopper = threading.Thread(target=go_down, daemon=True)
    stopper.start()
    try:
        done, data = _check(no_leftovers, "--hosts", str(hosts), "--port", "29960")
    finally:
        stopper.join(timeout=60)
        if lost.address not in sshd_cluster.processes:  # stopped: back for the next test
            sshd_cluster.start(lost)
    assert done.returncode == 5, done.stdout + done.stderr
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts.pop(lost.address) == ("failed", "unreachable")
    assert sorted(verdicts) == sorted(h.address for h in sshd_cluster.hosts[:3])
    assert [link for link in data["links"] if lost.address in (link["a"], link["b"])] == []
    evidence = next(n for n in data["nodes"] if n["host"] == lost.address)["figures"]["evidence"]
    assert evidence[0].startswith(
        f"lost during the check: lost the SSH connection to node-3 ({lost.address})"
    )
    record = json.loads((no_leftovers / "runs" / "check" / "check.json").read_text())
    assert record["nodes"] == data["nodes"]


def test_a_check_on_a_full_disk_exits_1_saying_so_and_leaves_no_process(small_disk, no_leftovers):
    """-o on a disk with room for no launch script: the embedded executor's write fails.
    Before: OSError [Errno 28] as a traceback (bench's sweep already said it in words)."""
    disk = small_disk(8)
    done = run_dtrun(
        "check", "--local-nodes", "2", "--port", "29828", "--output", str(disk),
        "--run-id", "full", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: the disk holding {disk / 'full'} is full (" in done.stderr
    assert "next: free space and run the command again" in done.stderr
    assert "Traceback" not in done.stderr
    assert not [path for path in disk.rglob("*") if ".partial" in path.name]


def test_a_check_stopped_by_sigterm_records_the_stop_in_check_json(no_leftovers):
    """SIGTERM mid-launch: exit 143 as before, and check.json now says how the check ended,
    each node's end and no verdict (before: only check/ with the node logs was left)."""
    out = no_leftovers / "runs"
    log = out / "stopped" / "check" / "node-0.log"
    with (no_leftovers / "dtrun.out").open("w+") as said:
        dtrun = subprocess.Popen(
            [*DTRUN, "check", "--local-nodes", "2", "--port", "29836", "--output", str(out),
             "--run-id", "stopped"],
            cwd=no_leftovers, stdout=said, stderr=subprocess.STDOUT, preexec_fn=default_signals,
        )  # fmt: skip
        try:
            wait_for(lambda: log.is_file() and log.stat().st_size > 0, timeout=120,
                     what="node 0's launch to begin")  # fmt: skip
        except BaseException:
            dtrun.kill()
            raise
        dtrun.send_signal(signal.SIGTERM)
        assert ends_within(dtrun, 120, said) == 143
    record = json.loads((out / "stopped" / "check.json").read_text())
    assert (record["status"], record["signal"], record["error"]) == (
        "interrupted", "SIGTERM", "stopped by SIGTERM",
    )  # fmt: skip
    assert sorted(node["node"] for node in record["launch"]) == ["node-0", "node-1"]
    assert "nodes" not in record and "links" not in record


def test_a_check_past_its_timeout_records_timeout_in_check_json(no_leftovers):
    """--timeout 2: no check finishes a launch in 2 s; exit 1 as before, check.json says
    timeout and names no verdict."""
    done, data = _check(no_leftovers, "--local-nodes", "2", "--port", "29838", "--timeout", "2",
                        run_id="late")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert data is None and "did not finish within 2 s" in done.stderr
    record = json.loads((no_leftovers / "runs" / "late" / "check.json").read_text())
    assert record["status"] == "timeout"
    assert "did not finish within 2 s" in record["error"]
    assert "nodes" not in record and record["wall_s"] > 0


def test_a_sigkilled_check_leaves_check_json_saying_unrecorded(no_leftovers):
    """SIGKILL runs none of dtrun's code: the guard beside the check writes check.json
    (runner/record/ended.py). Before: no check.json at all."""
    out = no_leftovers / "runs"
    log = out / "killed" / "check" / "node-0.log"
    dtrun = subprocess.Popen(
        [*DTRUN, "check", "--local-nodes", "2", "--port", "29842", "--output", str(out),
         "--run-id", "killed"],
        cwd=no_leftovers, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=default_signals,
    )  # fmt: skip
    try:
        wait_for(lambda: log.is_file() and log.stat().st_size > 0, timeout=120,
                 what="node 0's launch to begin")  # fmt: skip
    finally:
        dtrun.send_signal(signal.SIGKILL)
        dtrun.wait(timeout=10)
    record_path = out / "killed" / "check.json"
    wait_for(record_path.is_file, timeout=30, what="the guard to write check.json")
    record = json.loads(record_path.read_text())
    assert (record["status"], record["schema"]) == ("unrecorded", "dtrun.check-report/1")
    assert "nodes" not in record
