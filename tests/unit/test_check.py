"""`dtrun check`'s pure half: which nodes meet in which round, the robust statistics, the
verdicts, the JSON and the exit code (docs/check.md)."""

from __future__ import annotations

import json
import math
import random
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dtrun.check.expected import Expected, Thresholds, expected_for
from dtrun.check.judge import judge_check
from dtrun.check.model import FLAGGED_EXIT, Cause, LinkVerdict, Verdict
from dtrun.check.result import Group, Measured, load, parse
from dtrun.check.stats import judge_series, others
from dtrun.errors import DamagedRunError
from dtrun.workloads.check_plan import bisection_levels, pair_rounds

CPU = Thresholds.for_device("cpu")


@pytest.mark.parametrize("n", [*range(2, 70), 100, 255, 256, 257, 1000, 1024])
def test_pair_rounds_are_disjoint_new_pairs_that_give_every_node_two_partners(n):
    rounds = pair_rounds(n)
    seen: set[tuple[int, int]] = set()
    partners: list[set[int]] = [set() for _ in range(n)]
    for pairs in rounds:
        ends = [x for pair in pairs for x in pair]
        assert len(ends) == len(set(ends)), "a node twice in one round"
        for a, b in pairs:
            assert 0 <= a < b < n
            assert (a, b) not in seen, "a pair measured twice"
            seen.add((a, b))
            partners[a].add(b)
            partners[b].add(a)
    assert all(len(p) >= min(2, n - 1) for p in partners)
    assert len(rounds) <= math.ceil(math.log2(n)) + 2  # O(log N) rounds, never O(N^2) pairs


@pytest.mark.parametrize("n", [2, 8, 64, 1024])
def test_a_power_of_two_fleet_meets_log2_n_partners_in_log2_n_rounds(n):
    rounds = pair_rounds(n)
    assert len(rounds) == int(math.log2(n))
    assert all(len(pairs) == n // 2 for pairs in rounds)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_fleet_of_up_to_four_nodes_measures_every_pair_of_them(n):
    # 4 nodes' hypercube met 4 of 6 pairs: a slow link 0-3 or 1-2 was never measured
    measured_pairs = {pair for pairs in pair_rounds(n) for pair in pairs}
    assert measured_pairs == {(a, b) for a in range(n) for b in range(a + 1, n)}
    if n == 4:
        assert len(pair_rounds(n)) == 3  # one round more than the hypercube's 2


def test_bisection_halves_the_fleet_down_to_groups_of_three_or_more():
    assert bisection_levels(2) == []
    assert bisection_levels(4) == [[[0, 1, 2, 3]]]
    assert bisection_levels(8) == [[list(range(8))], [[0, 1, 2, 3], [4, 5, 6, 7]]]
    levels = bisection_levels(1024)
    assert [len(level) for level in levels] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for level in levels:
        flat = [x for group in level for x in group]
        assert sorted(flat) == list(range(1024))


def _noisy(rng, base, cycles=3, spread=0.12):
    return [base * (1 - spread * rng.random()) for _ in range(cycles)]


def test_a_healthy_noisy_fleet_flags_nothing():
    rng = random.Random(7)
    for n in (2, 3, 4, 8, 32):
        for _ in range(200):
            series = [_noisy(rng, 100.0) for _ in range(n)]
            assert not any(f and f.flagged for f in judge_series(series, others(n), 0.35))


def test_load_that_moves_over_time_is_compared_within_each_cycle():
    # every node measured in cycle 1 ran under load (half speed); one node's best cycle was
    # cycle 0 alone: a best-of-everything comparison would flag the others
    series = [[100.0, 50.0, 100.0], [100.0, 48.0, 52.0], [98.0, 51.0, 99.0], [101.0, 50.0, 99.0]]
    found = judge_series(series, others(4), 0.35)
    assert not any(f and f.flagged for f in found)


def test_a_node_at_half_speed_in_every_cycle_is_flagged_alone():
    series = [[100.0, 98, 102], [50.0, 49, 52], [99.0, 101, 100], [100.0, 97, 103]]
    found = judge_series(series, others(4), 0.35)
    assert [bool(f and f.flagged) for f in found] == [False, True, False, False]
    assert found[1] is not None and found[1].shortfall == pytest.approx(0.5, abs=0.03)


def test_with_many_nodes_a_small_effect_inside_the_fleets_spread_is_not_flagged():
    # 40% below, but the fleet itself spreads that wide: the MAD z-score says no
    rng = random.Random(3)
    series = [[rng.uniform(40, 160)] * 3 for _ in range(20)]
    series[0] = [55.0] * 3
    found = judge_series(series, others(20), 0.35)
    assert found[0] is not None and not found[0].flagged


def test_a_node_a_tenth_as_fast_is_flagged_though_its_noisy_peers_widen_the_mad():
    # CI's six-node check: five nodes at 61 to 91 GFLOP/s put the MAD at 13.5, and node-4 at
    # 5.7 scored z -3.48, above the -3.5 cut; its shortfall, 92%, is past any fleet's spread
    peers = [75.5, 87.9, 74.6, 90.7, 61.0]
    series = [[value] * 5 for value in peers[:4]] + [[5.7] * 5] + [[peers[4]] * 5]
    found = judge_series(series, others(6), 0.35)
    assert found[4] is not None and found[4].z is not None and found[4].z > -3.5
    assert [bool(f and f.flagged) for f in found] == [False] * 4 + [True, False]


def test_a_node_at_half_its_noisy_peers_is_left_to_the_z_score():
    # below the gross cut, the fleet's spread still decides: 48% below, as a clean node once
    # read beside other work, in a fleet this wide is not flagged
    series = [[75.5] * 3, [87.9] * 3, [74.6] * 3, [90.7] * 3, [40.0] * 3, [61.0] * 3]
    found = judge_series(series, others(6), 0.35)
    assert found[4] is not None and 0.35 < found[4].shortfall < 0.75
    assert not any(f and f.flagged for f in found)


def measured(n=4, compute=None, memory=None, pairs=None, gpus=None, device="cpu", groups=None):
    """A check result of ``n`` healthy CPU nodes, with some figures replaced (``groups``: a
    bisection group's busbw by its nodes)."""
    rounds = pair_rounds(n)
    groups = groups or {}
    compute = compute or {}
    memory = memory or {}
    pairs = pairs or {}
    return Measured(
        device=device,
        names=tuple(f"node-{i}" for i in range(n)),
        procs=(1,) * n,
        compute=tuple(((compute.get(i, 100.0),) * 3,) for i in range(n)),
        memory=tuple(((memory.get(i, 20.0),) * 3,) for i in range(n)),
        gpus=tuple((gpus or {}).get(i) for i in range(n)),
        inside=((None,) * 3,) * n,
        rounds=tuple(
            tuple(Group(pair, (pairs.get(pair, 1.5),) * 3) for pair in round_) for round_ in rounds
        ),
        bisection=tuple(
            tuple(Group(tuple(g), (groups.get(tuple(g), 1.0),) * 3) for g in level)
            for level in bisection_levels(n)
        ),
        settings={},
    )


HOSTS = {f"node-{i}": f"10.0.0.{i}" for i in range(32)}


def check(m, unreachable=None, expected=None):
    return judge_check(m, HOSTS, unreachable or {}, Thresholds.for_device(m.device),
                       expected or Expected())  # fmt: skip


def test_a_healthy_cluster_is_ok_and_exits_0():
    report = check(measured())
    assert [node.verdict for node in report.nodes] == [Verdict.OK] * 4
    assert all(link.verdict is LinkVerdict.OK for link in report.links)
    assert report.exit_code == 0


def test_a_slow_compute_node_is_named_by_its_host_with_cause_compute():
    report = check(measured(compute={2: 40.0}))
    flagged = report.flagged_nodes
    assert [(n.host, n.verdict, n.cause) for n in flagged] == [
        ("10.0.0.2", Verdict.SLOW, Cause.COMPUTE)
    ]
    assert "60% below" in flagged[0].evidence[0]
    assert report.exit_code == FLAGGED_EXIT


def test_a_slow_memory_node_has_cause_memory():
    report = check(measured(memory={1: 5.0}))
    assert [(n.host, n.cause) for n in report.flagged_nodes] == [("10.0.0.1", Cause.MEMORY)]


def test_one_slow_pair_among_good_ones_is_a_link_not_a_node():
    report = check(measured(pairs={(0, 1): 0.02}))
    assert report.flagged_nodes == ()
    assert [(link.a, link.b, link.verdict) for link in report.slow_links] == [
        ("10.0.0.0", "10.0.0.1", LinkVerdict.SLOW)
    ]
    assert report.exit_code == FLAGGED_EXIT


def test_a_node_slow_with_every_partner_is_the_node_with_cause_network():
    rounds = pair_rounds(4)
    slow = {pair: 0.02 for pairs in rounds for pair in pairs if 3 in pair}
    report = check(measured(pairs=slow))
    assert [(n.host, n.cause) for n in report.flagged_nodes] == [("10.0.0.3", Cause.NETWORK)]
    assert report.slow_links == ()
    assert {link.verdict for link in report.links if "10.0.0.3" in (link.a, link.b)} == {
        LinkVerdict.NODE
    }


@pytest.mark.parametrize(
    ("waits", "cause"),
    [
        ((0.01, 0.02, 0.01, 0.45), Cause.COMPUTE),  # its processes waited for a CPU: held back
        ((0.01, 0.02, 0.01, 0.03), Cause.NETWORK),  # no more than the others: its network
        ((0.32, 0.39, 0.2, 0.44), Cause.NETWORK),  # clean nodes on a busy machine, as seen
        ((None, None, None, None), Cause.NETWORK),  # results from before: as before
    ],
)
def test_a_node_slow_with_every_partner_that_waited_for_its_cpu_is_slow_for_compute(waits, cause):
    """A quota turned on and off: the compute's best-of timings fall in free stretches, every
    all-reduce the node joins waits on it. Its time waiting for a CPU names the cause."""
    slow = {pair: 0.02 for pairs in pair_rounds(4) for pair in pairs if 3 in pair}
    report = check(replace(measured(pairs=slow), cpu_wait=waits))
    assert [(n.host, n.cause) for n in report.flagged_nodes] == [("10.0.0.3", cause)]
    evidence = report.flagged_nodes[0].evidence
    assert evidence[0].startswith("slow with every partner: 0.02 GB/s with 10.0.0.")
    if cause is Cause.COMPUTE:
        assert evidence[1] == (
            "its threads waited 0.45 s for a CPU each second of the cycles, the other nodes' "
            "0.01 s (median): a CPU quota or other processes held it back"
        )
    assert report.nodes[3].figures["cpu_wait_share"] == waits[3]


def test_a_slow_link_to_a_node_held_back_by_its_cpu_is_the_node_s_not_the_link_s():
    """Seen for real: a node under a 10% CPU quota every other second, its one pair whose
    timings fell in the quota 0.21 GB/s against 1.0-1.2, its other pairs fine: the link was
    blamed. Its threads waited 1.12 s for a CPU each second, the others 0.25-0.29."""
    waits = (0.25, 1.12, 0.26, 0.29)
    report = check(replace(measured(pairs={(0, 1): 0.21}), cpu_wait=waits))
    assert [(n.host, n.cause) for n in report.flagged_nodes] == [("10.0.0.1", Cause.COMPUTE)]
    assert report.flagged_nodes[0].evidence[0] == (
        "slow with 1 of 3 partners: 0.21 GB/s with 10.0.0.0"
    )
    assert report.slow_links == ()
    quiet = check(replace(measured(pairs={(0, 1): 0.21}), cpu_wait=(0.25, 0.3, 0.26, 0.29)))
    assert [(link.a, link.b) for link in quiet.slow_links] == [("10.0.0.0", "10.0.0.1")]


@pytest.mark.parametrize(
    ("waits", "flagged"),
    [
        ((0.14, 0.79, 0.12, 0.12), True),  # seen in CI: a 10% quota half the time, 6x
        ((0.32, 0.39, 0.2, 0.44), False),  # clean nodes on a busy machine, as seen
        ((0.25, 0.45, 0.26, 0.29), False),  # a 20% quota a third of the time: 1.7x, too little
        ((0.001, 0.004, 0.001, 0.001), False),  # a daemon's half core beside 120 busy threads
        ((0.01, 0.4, 0.01, 0.01), False),  # many times the others', but under half their time
        ((None, 0.79, None, None), False),  # nothing to compare with
    ],
)
def test_a_node_held_back_by_its_cpu_is_slow_for_compute_where_nothing_it_timed_was(waits, flagged):
    """Seen in CI: a node under a 10% quota every other second, all its pairs timed in free
    stretches (1.0-1.3 GB/s), its compute's best-of too: it was called ok. Its one compute
    thread was held from a CPU 79% of the cycles, the others 12-14%: that alone names it, from
    3x and half their time (counted per thread: on a many-core node a daemon beside the
    check's threads is a sliver of each)."""
    report = check(replace(measured(), cpu_wait=waits, cpu_wait_thread=waits))
    found = [(n.host, n.verdict, n.cause) for n in report.flagged_nodes]
    assert found == ([("10.0.0.1", Verdict.SLOW, Cause.COMPUTE)] if flagged else [])
    if flagged:
        assert report.flagged_nodes[0].evidence == (
            "nothing it timed read slow, but its threads waited 0.79 s for a CPU per compute "
            "thread each second of the cycles, the other nodes' 0.12 s (median): a CPU quota or "
            "other processes held it back",
        )
    assert report.slow_links == ()


def test_a_held_node_with_a_slow_pair_is_not_said_to_have_timed_nothing_slow():
    """Nodes with unlike thread counts: node 1's one thread held 60% of the time, the others' 8
    threads 10% each (0.8 summed, more than its 0.6). Its rule per thread names it; its pair with
    node 0 read slow, and its evidence said "nothing it timed read slow"."""
    report = check(
        replace(
            measured(pairs={(0, 1): 0.5}),
            cpu_wait=(0.8, 0.6, 0.8, 0.8),
            cpu_wait_thread=(0.1, 0.6, 0.1, 0.1),
        )
    )
    [node] = report.flagged_nodes
    assert (node.host, node.cause) == ("10.0.0.1", Cause.COMPUTE)
    assert node.evidence[0].startswith("slow with 1 of 3 partners: 0.5 GB/s with 10.0.0.0")
    assert not any("nothing it timed read slow" in line for line in node.evidence)
    assert "waited 0.60 s for a CPU per compute thread" in node.evidence[1]


def test_a_node_slow_with_every_partner_held_per_compute_thread_is_slow_for_compute():
    """rev15: with unlike thread counts only the rule per compute thread holds; a node slow
    with every partner whose one thread was held 60% of the time read cause network."""
    slow = {pair: 0.02 for pairs in pair_rounds(4) for pair in pairs if 3 in pair}
    report = check(
        replace(
            measured(pairs=slow),
            cpu_wait=(0.8, 0.8, 0.8, 0.6),
            cpu_wait_thread=(0.1, 0.1, 0.1, 0.6),
        )
    )
    [node] = report.flagged_nodes
    assert (node.host, node.cause) == ("10.0.0.3", Cause.COMPUTE)
    assert node.evidence[0].startswith("slow with every partner: 0.02 GB/s with 10.0.0.")
    assert "waited 0.60 s for a CPU per compute thread" in node.evidence[1]


def test_a_held_node_s_wait_per_thread_is_not_said_as_a_share_past_all_of_its_time():
    """The wait is every thread's of the rank (gloo's, the heartbeat's) over its compute
    threads: 1.33 s each second was seen here, said as "held from a CPU 133% of the cycles"."""
    waits = (0.12, 1.33, 0.14, 0.12)
    [node] = check(replace(measured(), cpu_wait=waits, cpu_wait_thread=waits)).flagged_nodes
    assert "waited 1.33 s for a CPU per compute thread each second" in node.evidence[0]
    assert "133%" not in node.evidence[0]


def test_a_busy_many_core_node_s_summed_wait_alone_names_nothing():
    """Half a second of waiting each second, summed over 120 busy threads, is a sliver of each:
    a daemon beside the check, not a node held back (rev14's case against the summed rule)."""
    summed = (0.1, 0.5, 0.1, 0.12)
    report = check(
        replace(measured(), cpu_wait=summed, cpu_wait_thread=tuple(w / 120 for w in summed))
    )
    assert report.flagged_nodes == ()


def test_on_gpus_a_node_s_cpu_wait_names_no_cause_its_slow_link_stays_the_link_s():
    """The CPU wait's figures come from CPU ranks, whose all-reduce is their CPU's work; NCCL's
    is the GPUs'. On GPU nodes a link slow beside a busier CPU stays a slow link."""
    waits = (0.25, 1.12, 0.26, 0.29)
    report = check(replace(measured(pairs={(0, 1): 0.21}, device="cuda"), cpu_wait=waits))
    assert [(link.a, link.b) for link in report.slow_links] == [("10.0.0.0", "10.0.0.1")]
    assert Cause.COMPUTE not in {node.cause for node in report.flagged_nodes}


def test_a_rank_s_cpu_wait_is_read_as_its_node_s_share_of_the_cycles():
    data = _two_nodes()
    data["ranks"][0].update(cpu_wait_s=0.5, measured_s=10.0)
    data["ranks"][1].update(cpu_wait_s=4.0, measured_s=10.0)
    assert parse(data).cpu_wait == (0.05, 0.4)
    del data["ranks"][0]["cpu_wait_s"]
    assert parse(data).cpu_wait == (None, 0.4)
    data["ranks"][1]["cpu_threads"] = 8
    assert parse(data).cpu_wait_thread == (None, 0.05)  # of each compute thread's time


@pytest.mark.parametrize("threads", [-8, 0])
def test_a_rank_s_compute_threads_below_one_are_damage(tmp_path, threads):
    """torch runs one compute thread at least: -8 turned a held node's share per thread
    negative, below every cut, and 0 silently dropped it; each is read as damage."""
    data = _two_nodes()
    data["ranks"][1].update(cpu_wait_s=4.0, measured_s=10.0, cpu_threads=threads)
    assert "'ranks[1].cpu_threads'" in _damage(tmp_path, data).message


def test_with_two_nodes_one_pair_has_nothing_to_compare_with_and_is_not_judged():
    """Said as such: before, the link read "ok" (two loopback Slurm nodes, one shaped to 20
    Mbit/s: 0.0034 GB/s against 1.0-1.2 clean, "ok", exit 0)."""
    report = check(measured(n=2, pairs={(0, 1): 0.01}))
    assert report.exit_code == 0
    assert [link.verdict for link in report.links] == [LinkVerdict.UNJUDGED]
    assert report.to_json()["links"][0]["verdict"] == "unjudged"
    slow = check(measured(n=2, compute={1: 20.0}))  # a slow node of two is still named
    assert [(n.host, n.cause) for n in slow.flagged_nodes] == [("10.0.0.1", Cause.COMPUTE)]
    assert [link.verdict for link in slow.links] == [LinkVerdict.UNJUDGED]
    many = check(measured(n=4))
    assert {link.verdict for link in many.links} == {LinkVerdict.OK}


def test_the_table_notes_two_nodes_unjudged_pair_with_its_busbw(capsys):
    from dtrun.cli.check_output import print_report
    from dtrun.record.rundir import RunDir
    from dtrun.sweep.check import CheckRun

    m = measured(n=2, pairs={(0, 1): 0.0034})
    print_report(CheckRun(check(m), RunDir(Path("runs/x")), Path("runs/x/check"), 1.0, {}, m))
    out = " ".join(capsys.readouterr().out.split())
    assert "note: link 10.0.0.0 - 10.0.0.1 (0.0034 GB/s) unjudged: no other pair" in out, out
    assert "ok 2 nodes, 1 pair checked" in out


def test_two_nodes_one_pair_is_judged_against_the_sizes_expected_busbw():
    expected = Expected(pair_gbs=370.0, pair_source="ND96isr_H100_v5 across nodes")
    report = check(measured(n=2, pairs={(0, 1): 400.0}), expected=expected)
    assert [link.verdict for link in report.links] == [LinkVerdict.OK]


def test_a_pair_below_the_sizes_expected_busbw_is_flagged_even_alone():
    expected = Expected(pair_gbs=370.0, pair_source="ND96isr_H100_v5 across nodes")
    report = check(measured(n=2, pairs={(0, 1): 150.0}), expected=expected)
    assert [link.verdict for link in report.links] == [LinkVerdict.SLOW]


def test_an_unreachable_host_is_failed_with_its_reason():
    report = check(measured(), unreachable={"10.0.0.9": "connection refused"})
    failed = report.flagged_nodes
    assert [(n.host, n.verdict, n.cause, n.evidence) for n in failed] == [
        ("10.0.0.9", Verdict.FAILED, Cause.UNREACHABLE, ("connection refused",))
    ]


def test_gpu_errors_fail_a_node_and_throttled_clocks_slow_it():
    ecc = ({"index": "0", "ecc.errors.uncorrected.volatile.total": "3"},)
    hot = ({"index": "5", "clocks_event_reasons.active": "0x0000000000000040"},)
    idle = ({"index": "1", "clocks_event_reasons.active": "0x1", "retired_pages.pending": "No"},)
    report = check(measured(gpus={0: ecc, 1: hot, 2: idle}))
    by_host = {n.host: n for n in report.nodes}
    assert (by_host["10.0.0.0"].verdict, by_host["10.0.0.0"].cause) == (Verdict.FAILED, Cause.GPU)
    assert (by_host["10.0.0.1"].verdict, by_host["10.0.0.1"].cause) == (Verdict.SLOW, Cause.GPU)
    assert "HW thermal" in by_host["10.0.0.1"].evidence[0]
    assert by_host["10.0.0.2"].verdict is Verdict.OK


def test_a_gpu_below_half_its_peak_is_slow_whatever_the_fleet():
    m = measured(n=2, compute={0: 300_000.0, 1: 300_000.0}, device="cuda")
    report = check(m, expected=expected_for("Standard_ND96isr_H100_v5", 8))
    assert {n.cause for n in report.nodes} == {Cause.COMPUTE}


def test_the_json_has_exactly_the_documented_shape():
    data = check(measured(compute={1: 10.0}), unreachable={"h9": "refused"}).to_json()
    assert set(data) == {"nodes", "links", "groups"}
    for node in data["nodes"]:
        assert set(node) == {"host", "verdict", "cause", "figures"}
        assert node["verdict"] in {"ok", "slow", "failed"}
        assert node["cause"] in {None, "compute", "memory", "network", "gpu", "unreachable"}
    for link in data["links"]:
        assert set(link) == {"a", "b", "busbw_gbs", "verdict"}
    assert data["groups"] == [
        {"level": 0, "hosts": [f"10.0.0.{i}" for i in range(4)], "busbw_gbs": 1.0,
         "verdict": "unjudged"}
    ]  # fmt: skip
    json.dumps(data)


def test_a_damaged_result_file_is_named_with_what_is_wrong(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"schema": "dtrun.check/1", "device": "cpu"}))
    with pytest.raises(DamagedRunError, match="has no 'settings'"):
        load(path)


def _two_nodes() -> dict[str, Any]:
    """A check result as rank 0 writes it: two CPU nodes, one round."""
    return {
        "schema": "dtrun.check/1", "device": "cpu", "settings": {},
        "nodes": [{"name": "node-0", "address": "a", "ranks": [0]},
                  {"name": "node-1", "address": "b", "ranks": [1]}],
        "ranks": [{"node": 0, "compute_gflops": [1.0], "memory_gbs": [2.0], "gpus": None},
                  {"node": 1, "compute_gflops": [1.0], "memory_gbs": [2.0], "gpus": None}],
        "inside": [{"nodes": [0], "busbw_gbs": [None]}, {"nodes": [1], "busbw_gbs": [None]}],
        "rounds": [[{"nodes": [0, 1], "busbw_gbs": [1.5]}]],
        "bisection": [],
    }  # fmt: skip


def _damage(tmp_path: Path, data: dict[str, Any]) -> DamagedRunError:
    """What loading ``data`` as a check's result.json raises."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DamagedRunError) as caught:
        load(path)
    return caught.value


def test_a_result_round_trips_through_parse():
    data = _two_nodes()
    m = parse(data)
    assert m.names == ("node-0", "node-1")
    assert m.rounds[0][0] == Group((0, 1), (1.5,))
    assert m.addresses == ("a", "b")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d["rounds"][0][0].update(nodes=[0, 9]), "a group of 'rounds[0]' names node 9"),
        (lambda d: d["rounds"][0][0].update(nodes=[-1, 1]), "'rounds[0]' names node -1 of 2"),
        (lambda d: d["bisection"].append([{"nodes": [0, 5], "busbw_gbs": [1.0]}]), "node 5"),
        (lambda d: d["inside"].pop(), "'inside' holds 1 group for 2 nodes"),
    ],
)
def test_a_result_s_group_of_nodes_it_does_not_have_is_damage(tmp_path, edit, said):
    """A node index past the node count was an IndexError (a traceback); -1 blamed the last
    node for a pair it was never in."""
    data = _two_nodes()
    edit(data)
    assert said in _damage(tmp_path, data).message


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ({"index": "0", "xid": 5}, "'ranks[0].gpus[0].xid' is 5, not text"),
        ({"index": "0", "retired_pages.pending": None}, "'ranks[0].gpus[0].retired_pages"),
        ({"index": "0", "ecc.errors.uncorrected.volatile.total": "0x" + "f" * 4000},
         "'ranks[0].gpus[0].ecc.errors.uncorrected.volatile.total' is text of 4,002 characters"),
    ],
    ids=["number", "null", "4000-hex-digits"],
)  # fmt: skip
def test_a_gpu_row_that_is_not_nvidia_smi_s_text_is_damage(tmp_path, row, said):
    """nvidia-smi's rows are text of a few characters (runner/workloads/check_measure.py): a
    number there was a TypeError (int(5, 0)), and 4,000 hex digits of ECC errors a ValueError
    (str() of an int past 4,300 digits), each a traceback from `dtrun check`."""
    data = _two_nodes()
    data["device"], data["ranks"][0]["gpus"] = "cuda", [row]
    assert said in _damage(tmp_path, data).why


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d["ranks"][0].update(compute_gflops=[-1e308]),
         "'ranks[0].compute_gflops[0]' is -1e+308, outside 0 to 1e+09"),
        (lambda d: d["ranks"][1].update(memory_gbs=[1e308]),
         "'ranks[1].memory_gbs[0]' is 1e+308, outside 0 to 1e+06"),
        (lambda d: d["rounds"][0][0].update(busbw_gbs=[-2.0]),
         "'rounds[0][0].busbw_gbs[0]' is -2.0, outside 0 to 1e+06"),
    ],
    ids=["compute-minus-1e308", "memory-1e308", "busbw-negative"],
)  # fmt: skip
def test_a_figure_no_machine_measures_is_damage_not_a_verdict(tmp_path, edit, said):
    """-1e308 GFLOP/s flagged the node slow with a 300-digit percentage below the median, and
    1e308 GB/s of memory passed as fine: a figure outside what any machine measures is a
    damaged result, as the report's are (runner/record/readback.py, ranged)."""
    data = _two_nodes()
    edit(data)
    assert said in _damage(tmp_path, data).why


def test_a_stacks_nodes_are_named_by_their_registered_address_and_embedded_by_name():
    from dtrun.spec.cluster import Inventory, Node
    from dtrun.sweep.check import host_labels

    nodes = (Node("node-0", "10.42.1.4"), Node("node-1", "10.42.1.5"))
    stack = Inventory(source="stack:dev", nodes=nodes, python_bin="/p", code_dir="/c")
    embedded = Inventory(source="embedded", nodes=nodes, python_bin="/p", code_dir="/c")
    assert host_labels(stack) == {"node-0": "10.42.1.4", "node-1": "10.42.1.5"}
    assert host_labels(embedded) == {"node-0": "node-0", "node-1": "node-1"}


@pytest.mark.parametrize(
    ("addresses", "hosts"),
    [(("10.0.0.7", "10.0.0.3"), ("10.0.0.7", "10.0.0.3")),  # a host each: the host
     # no host known: the inventory's placeholder (runner/engines/spark/inventory.py)
     (("spark-executor", "spark-executor"), ("spark-0", "spark-1"))],
)  # fmt: skip
def test_spark_nodes_are_named_by_the_host_their_executor_ran_on_where_it_is_theirs_alone(
    addresses, hosts
):
    from dataclasses import replace

    from dtrun.sweep.check import spark_labels

    m = replace(measured(2), names=("spark-0", "spark-1"), addresses=addresses)
    labels = spark_labels(m, {"spark-0": "spark-0", "spark-1": "spark-1"})
    assert tuple(labels[name] for name in m.names) == hosts


def test_write_hosts_under_spark_is_refused_before_anything_runs(tmp_path):
    from tests.conftest import run_dtrun

    done = run_dtrun(
        "check", "--spark", "spark://127.0.0.40:7199", "--write-hosts", "good.yaml", cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--write-hosts writes a hosts file" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["link.yaml", "folder", "missing/good.yaml"])
def test_a_write_hosts_file_that_cannot_be_written_is_refused_before_the_check_runs(
    tmp_path, target
):
    """A link (to a file outside), a folder at its name, a folder that is not there: exit 2
    before any cluster is asked (--outputs names a file that is not there: asked, it fails)."""
    from tests.conftest import run_dtrun

    (tmp_path / "victim").write_text("kept")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "victim")
    (tmp_path / "folder").mkdir()
    done = run_dtrun(
        "check", "--outputs", "none.json", "--write-hosts", str(tmp_path / target), cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot write --write-hosts {tmp_path / target}" in done.stderr
    assert "nothing was run" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "victim").read_text() == "kept"


def test_write_hosts_from_a_stack_reaches_the_nodes_through_its_head_as_the_stack_did():
    import yaml

    from dtrun.cli.check_output import kept_hosts
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
    from dtrun.spec.cluster import Inventory, Node, SshAccess

    nodes = (Node("node-0", "10.42.1.4"), Node("node-1", "10.42.1.5"), Node("node-2", "10.42.1.6"))
    ssh = SshAccess(user="azureuser", port=2222, jump_host="203.0.113.7",
                    private_key="-----BEGIN OPENSSH PRIVATE KEY-----secret")  # fmt: skip
    stack = Inventory(source="stack:dev", nodes=nodes, python_bin="/opt/dtrun/bin",
                      code_dir="/shared/.dtrun/code", ssh=ssh, shared_dir="/shared",
                      size="Standard_HB176rs_v4")  # fmt: skip
    labels = {node.name: node.address for node in nodes}
    text = yaml.safe_dump(kept_hosts(stack, {"10.42.1.5"}, labels), sort_keys=False)
    assert "secret" not in text  # the stack's private key stays out of the file
    back = parse_hosts_file(text, "good.yaml", Defaults(user="me", python_bin="/elsewhere"))
    assert [node.address for node in back.nodes] == ["10.42.1.4", "10.42.1.6"]
    assert back.ssh is not None
    assert (back.ssh.jump_host, back.ssh.user, back.ssh.port) == ("203.0.113.7", "azureuser", 2222)
    assert (back.python_bin, back.code_dir, back.size) == (
        stack.python_bin,
        stack.code_dir,
        stack.size,
    )


def test_write_hosts_from_a_hosts_file_yaml_cannot_build_lists_the_inventory_s_nodes(tmp_path):
    """Hosts text whose YAML type raises (a port of 5,000 digits) was a ValueError after the
    check."""
    from dtrun.cli.check_output import kept_hosts
    from dtrun.spec.cluster import Inventory, Node

    hosts = tmp_path / "hosts.yaml"
    nodes = (Node("node-0", "a"), Node("node-1", "b"))
    inventory = Inventory(f"hosts:{hosts}", nodes, python_bin="/usr/bin", code_dir="/c",
                          hosts_text=f"hosts: [a, b]\nport: {'9' * 5000}\n")  # fmt: skip
    kept = kept_hosts(inventory, {"b"}, {"node-0": "a", "node-1": "b"})
    assert kept["hosts"] == [{"host": "a"}]


def test_write_hosts_keeps_each_name_of_a_hosts_file_as_written(tmp_path):
    """The hosts file's own YAML, less the flagged hosts: each name as the check read it, as
    written. YAML 1.1 reads `1_000` as the number 1000 and `on` as true: the file written named
    hosts 1000 and true, user 83, and kept the flagged host `on`. (A host YAML reads as a
    number or boolean is refused unless quoted; the user is as written.)"""
    from dataclasses import replace

    import yaml

    from dtrun.cli.check_output import kept_hosts
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
    from dtrun.sweep.check import host_labels

    text = (
        "user: 0123\nport: 2222\nhosts:\n  - host: '1_000'\n  - host: 'on'\n"
        "  - {host: c, port: 22}\n"
    )
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    defaults = Defaults(user="me", python_bin="/v/bin")
    checked = replace(parse_hosts_file(text, str(hosts), defaults), hosts_text=text)
    labels = host_labels(checked)
    kept = kept_hosts(checked, {labels["node-1"]}, labels)
    back = parse_hosts_file(yaml.safe_dump(kept, sort_keys=False), "good.yaml", defaults)
    assert labels["node-1"] == "on"
    assert [(n.address, n.ssh_port) for n in back.nodes] == [("1_000", 2222), ("c", 22)]
    assert back.ssh is not None and (back.ssh.user, back.ssh.port) == ("0123", 2222)


def test_write_hosts_writes_the_hosts_file_the_check_read_not_what_it_became(tmp_path):
    """The file was read again after the check: changed meanwhile (a host added, another jump
    host), dtrun wrote what it never checked (time of check, time of use)."""
    import types
    from typing import cast

    import yaml

    from dtrun.cli.check_output import write_hosts_file
    from dtrun.engines.ssh.engine import _hosts_inventory
    from dtrun.sweep.check import CheckRun

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("jump: 10.0.0.1\nhosts: [a, b]\n")
    inventory = _hosts_inventory(str(hosts))
    hosts.write_text("jump: 198.51.100.66\nhosts: [a, b, unchecked]\n")
    good = tmp_path / "good.yaml"
    done = types.SimpleNamespace(hosts={"node-0": "a", "node-1": "b"})
    write_hosts_file(good, inventory, cast(CheckRun, done), {"b"})
    assert yaml.safe_load(good.read_text()) == {"jump": "10.0.0.1", "hosts": ["a"]}


@pytest.mark.parametrize(
    ("before", "source", "after"),
    [(None, 0o600, 0o600), (0o640, 0o600, 0o640), (None, None, 0o644)],
)
def test_write_hosts_keeps_the_mode_of_the_file_it_replaces_else_of_its_source(
    tmp_path, before, source, after
):
    """A 0600 hosts file's copy was written 0644, over a 0600 file too."""
    import types
    from typing import cast

    from dtrun.cli.check_output import write_hosts_file
    from dtrun.spec.cluster import Inventory, Node
    from dtrun.sweep.check import CheckRun

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts: [a, b]\n")
    if source is not None:
        hosts.chmod(source)
    given = f"hosts:{hosts}" if source is not None else "embedded"
    inventory = Inventory(
        given, (Node("node-0", "a"), Node("node-1", "b")), python_bin="/u", code_dir="/c"
    )
    good = tmp_path / "good.yaml"
    if before is not None:
        good.write_text("hosts: [old]\n")
        good.chmod(before)
    done = types.SimpleNamespace(hosts={"node-0": "a", "node-1": "b"})
    write_hosts_file(good, inventory, cast(CheckRun, done), {"b"})
    assert "a" in good.read_text() and "b" not in good.read_text().replace("hosts", "")
    assert stat.S_IMODE(good.stat().st_mode) == after


def test_the_spark_tasks_of_one_host_are_one_node_and_other_nodes_stay_apart():
    """The check workload's fleet: ranks whose Spark executor ran on one host are that host's
    processes (node_series then takes the slowest); without a host, the node dtrun named."""
    from dtrun.workloads.check import Fleet

    def info(rank, node, host):
        return {"rank": rank, "node": node, "address": host or "10.0.0.9", "host": host}

    spark = [info(0, "spark-0", "127.0.0.42"), info(1, "spark-1", "127.0.0.41"),
             info(2, "spark-2", "127.0.0.42"), info(3, "spark-3", "127.0.0.41")]  # fmt: skip
    fleet = Fleet(spark, me=3)
    assert (fleet.names, fleet.addresses) == (["spark-0", "spark-1"], ["127.0.0.42", "127.0.0.41"])
    assert (fleet.ranks, fleet.mine) == ([[0, 2], [1, 3]], 1)
    hosts = Fleet([info(0, "node-0", ""), info(1, "node-0", ""), info(2, "node-1", "")], me=2)
    assert (hosts.names, hosts.ranks, hosts.mine) == (["node-0", "node-1"], [[0, 1], [2]], 1)


@pytest.mark.parametrize("master", ["local-cluster[2,1,1024]", "local-cluster[ 4 , 1 , 512 ]"])
def test_a_local_cluster_check_is_refused_as_one_host_before_anything_runs(tmp_path, master):
    from tests.conftest import run_dtrun

    done = run_dtrun("check", "--spark", master, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "one host" in done.stderr and "--local-nodes" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_spark_check_whose_tasks_all_ran_on_one_host_is_an_error_not_a_verdict():
    from dataclasses import replace

    from dtrun.errors import RunError
    from dtrun.sweep.check import one_spark_host

    one = replace(measured(1), names=("spark-0",), addresses=("127.0.0.41",))
    with pytest.raises(RunError, match=r"4 tasks on one host, 127\.0\.0\.41"):
        one_spark_host(one, 4)
    one_spark_host(one, 1)  # asked for one: one host is what was asked
    two = replace(measured(2), names=("spark-0", "spark-1"), addresses=("10.0.0.1", "10.0.0.2"))
    one_spark_host(two, 4)


def test_a_gpu_s_figures_print_whole_above_a_thousand_never_as_an_exponent():
    from dtrun.cli.check_output import _figure

    # an H200's copy bandwidth as `dtrun check` measured it on one (docs/benchmarks.md)
    assert _figure(4272.11, "GB/s") == "4,272 GB/s"
    assert _figure(769.485, "TFLOP/s") == "769 TFLOP/s"
    assert _figure(30.4219, "GB/s") == "30.4 GB/s"
    assert _figure(999.4, "GB/s") == "999 GB/s"
    assert _figure(999.7, "GB/s") == "1,000 GB/s"  # three figures of it would be 1e+03
    assert _figure(None, "GB/s") == "-"


def test_a_host_put_out_and_measured_later_is_one_failed_row_with_its_figures():
    """Spark: a task dropped after its executor was killed can land on a new executor on the
    same host in the next attempt; the host is one row, failed, the earlier loss first."""
    from dtrun.check.model import CheckReport, NodeCheck
    from dtrun.sweep.check import failed_earlier

    report = CheckReport(
        (NodeCheck("127.0.0.42", Verdict.OK, None, {"compute_gflops": 40.0}, ("fine",)),
         NodeCheck("127.0.0.43", Verdict.OK, None, {"compute_gflops": 41.0})),
        (),
    )  # fmt: skip
    merged = failed_earlier(report, {"127.0.0.42": "its launch failed: exit code 137"})
    assert [(n.host, n.verdict, n.cause) for n in merged.nodes] == [
        ("127.0.0.42", Verdict.FAILED, Cause.UNREACHABLE),
        ("127.0.0.43", Verdict.OK, None),
    ]
    assert merged.nodes[0].evidence == ("its launch failed: exit code 137", "fine")
    assert merged.nodes[0].figures == {"compute_gflops": 40.0}
    assert merged.exit_code == FLAGGED_EXIT
