"""`dtrun check`'s bisection (docs/check.md, "The bisection"): each level's groups judged
against the other groups of their level, the slow group followed down the levels, a node the
pairs flagged corroborated by it, and a slow group in which the pairs flagged nothing reported
with what to do next. Figures in, verdicts out."""

from __future__ import annotations

import random
from dataclasses import replace

from dtrun.check.expected import Expected, Thresholds
from dtrun.check.judge import judge_check
from dtrun.check.model import FLAGGED_EXIT, Cause, GroupVerdict
from dtrun.check.result import Group
from dtrun.workloads.check_plan import bisection_levels
from tests.unit.test_check import check, measured


def _verdicts(report):
    return [(g.level, g.hosts, g.verdict) for g in report.groups]


def _hosts(*nodes):
    return tuple(f"10.0.0.{i}" for i in nodes)


def test_a_slow_node_in_the_slow_half_gets_the_bisection_as_corroborating_evidence():
    report = check(measured(6, compute={4: 40.0}, groups={(3, 4, 5): 0.4}))
    assert _verdicts(report) == [
        (0, _hosts(*range(6)), GroupVerdict.UNJUDGED),
        (1, _hosts(0, 1, 2), GroupVerdict.OK),
        (1, _hosts(3, 4, 5), GroupVerdict.SLOW),
    ]
    (node,) = report.flagged_nodes
    assert (node.host, node.cause) == ("10.0.0.4", Cause.COMPUTE)
    assert node.evidence[-1].startswith("bisection: its group slow at its level, down to 10.0.0.3")
    assert "60% below" in node.evidence[-1]
    assert [g for g in report.groups if g.follow] == []  # explained: nothing more to do
    assert report.exit_code == FLAGGED_EXIT
    assert report.to_json()["groups"][2] == {
        "level": 1,
        "hosts": list(_hosts(3, 4, 5)),
        "busbw_gbs": 0.4,
        "verdict": "slow",
    }


def test_a_node_is_corroborated_only_when_its_group_is_slow_at_every_level():
    # 12 nodes: halves, then quarters; node 10's half is slow but its quarter is not
    slow_half = measured(12, compute={10: 40.0}, groups={tuple(range(6, 12)): 0.4})
    (node,) = check(slow_half).flagged_nodes
    assert not any(line.startswith("bisection") for line in node.evidence)
    both = measured(12, compute={10: 40.0}, groups={tuple(range(6, 12)): 0.4, (9, 10, 11): 0.4})
    (node,) = check(both).flagged_nodes
    assert node.evidence[-1].startswith("bisection: its group slow at every level, down to")


def test_a_slow_group_with_nothing_flagged_at_one_level_is_a_note_with_what_to_do_next():
    report = check(measured(6, groups={(0, 1, 2): 0.3}))
    assert report.flagged_nodes == () and report.slow_links == ()
    (group,) = [g for g in report.groups if g.follow]
    assert group.hosts == _hosts(0, 1, 2) and group.levels == 1
    assert "the pairs flagged no node or link in it" in group.follow
    assert "10.0.0.0-10.0.0.1 1.5 GB/s" in group.follow  # the pair figures it saw
    assert group.follow.endswith("dtrun check --hosts FILE with 10.0.0.0, 10.0.0.1, 10.0.0.2")
    assert report.slow_groups == ()
    assert report.exit_code == 0  # one comparison of two groups: not enough alone


def test_a_slow_group_followed_down_two_levels_with_nothing_flagged_exits_flagged():
    report = check(measured(12, groups={tuple(range(6)): 0.3, (3, 4, 5): 0.3}))
    assert report.flagged_nodes == () and report.slow_links == ()
    slow = [(g.level, g.hosts) for g in report.groups if g.verdict is GroupVerdict.SLOW]
    assert slow == [(1, _hosts(*range(6))), (2, _hosts(3, 4, 5))]
    (group,) = report.slow_groups  # the deepest of the path, not the half above it
    assert (group.hosts, group.levels) == (_hosts(3, 4, 5), 2)
    assert report.exit_code == FLAGGED_EXIT


def test_a_slow_group_outside_the_slow_group_above_is_not_on_its_path():
    # the slow quarter is in the other half: two single-level findings, not a path
    report = check(measured(12, groups={tuple(range(6)): 0.3, (9, 10, 11): 0.3}))
    assert {g.hosts: g.levels for g in report.groups if g.follow} == {
        _hosts(*range(6)): 1,
        _hosts(9, 10, 11): 1,
    }
    assert report.exit_code == 0


def test_a_slow_link_inside_a_slow_group_explains_it():
    report = check(measured(6, pairs={(0, 1): 0.02}, groups={(0, 1, 2): 0.3}))
    assert [(link.a, link.b) for link in report.slow_links] == [("10.0.0.0", "10.0.0.1")]
    assert [g for g in report.groups if g.follow] == []


def _noisy(rng, base, cycles, spread):
    return tuple(base * (1 - spread * rng.random()) for _ in range(cycles))


def test_a_healthy_noisy_fleet_flags_no_group_at_any_level():
    # every figure up to 30% low in any cycle, as loopback nodes on shared cores see
    rng = random.Random(11)
    network = Thresholds.for_device("cpu").network
    for n in (6, 7, 12, 24, 100):
        for _ in range(100):
            m = measured(n)
            levels = tuple(
                tuple(Group(tuple(g), _noisy(rng, 1.0, 5, 0.3)) for g in level)
                for level in bisection_levels(n)
            )
            m = replace(m, bisection=levels)
            labels = {f"node-{i}": f"h{i}" for i in range(n)}
            report = judge_check(m, labels, {}, Thresholds(0.35, 0.4, network), Expected())
            assert not any(g.verdict is GroupVerdict.SLOW for g in report.groups)
            assert report.exit_code == 0


def test_the_table_says_a_slow_groups_hosts_and_whether_it_changed_the_exit_code(capsys):
    from pathlib import Path

    from dtrun.cli.check_output import print_report
    from dtrun.record.rundir import RunDir
    from dtrun.sweep.check import CheckRun

    for m, said, last in (
        (measured(6, groups={(0, 1, 2): 0.3}), "note: a group (bisection level 1", "ok 6 nodes"),
        (
            measured(12, groups={tuple(range(6)): 0.3, (3, 4, 5): 0.3}),
            "slow group (bisection level 2, slow at 2 levels running)",
            "flagged 1 slow group",
        ),
    ):
        print_report(CheckRun(check(m), RunDir(Path("runs/x")), Path("runs/x/check"), 1.0, {}, m))
        out = " ".join(capsys.readouterr().out.split())
        assert said in out and "dtrun check --hosts FILE with 10.0.0." in out
        assert last in out and "[green]" not in out and "[red]" not in out  # text, not markup
