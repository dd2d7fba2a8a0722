"""The bisection of `dtrun check` (docs/check.md, "The bisection"): each level's groups against
the other groups of the same level, the slow group followed down the levels, and what that says
of the nodes and links the pairs flagged.

A group's busbw is its ring's: one slow node or link in the ring holds the whole group back, so
the groups that hold a bad node are slow at every level. A level of one group (the whole fleet)
decides nothing. A node the pairs flagged whose group is slow at every level gets that as
corroborating evidence. A slow group that is the deepest of its path, in which the pairs flagged
no node and no link, gets what to do next; it changes the exit code only when the group it is
in was slow too (runner/check/model.py, CONFIRMING_LEVELS).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtrun.check.model import GroupCheck, GroupVerdict, LinkCheck, LinkVerdict, NodeCheck
from dtrun.check.result import Group, Series
from dtrun.check.stats import Finding, judge_series, others

SHOWN_PAIRS = 6  # a slow group's own pairs named in what to do next, at most


@dataclass(frozen=True)
class _Judged:
    level: int
    nodes: frozenset[int]
    group: Group
    finding: Finding | None
    judged: bool  # its level had other groups

    @property
    def flagged(self) -> bool:
        return self.finding is not None and self.finding.flagged


def _median(series: Series) -> float | None:
    present = [value for value in series if value is not None]
    return statistics.median(present) if present else None


def _judge(levels: Sequence[Sequence[Group]], min_effect: float) -> list[list[_Judged]]:
    out = []
    for index, level in enumerate(levels):
        judged = len(level) > 1
        findings: Sequence[Finding | None] = (
            judge_series([g.busbw_gbs for g in level], others(len(level)), min_effect)
            if judged else [None] * len(level)
        )  # fmt: skip
        out.append([
            _Judged(index, frozenset(g.nodes), g, finding, judged)
            for g, finding in zip(level, findings, strict=True)
        ])  # fmt: skip
    return out


def _running(levels: Sequence[Sequence[_Judged]]) -> dict[tuple[int, frozenset[int]], int]:
    """Each group's slow levels running down to it: it and the groups it is in, each slow."""
    out: dict[tuple[int, frozenset[int]], int] = {}
    for level in levels:
        for group in level:
            above = next(
                (out[(group.level - 1, g.nodes)] for g in levels[group.level - 1]
                 if group.nodes <= g.nodes),
                0,
            ) if group.level > 0 else 0  # fmt: skip
            out[(group.level, group.nodes)] = above + 1 if group.flagged else 0
    return out


def _next_step(hosts: Sequence[str], inside: Sequence[LinkCheck],
               nodes: Mapping[str, NodeCheck]) -> str:  # fmt: skip
    if inside:
        shown = ", ".join(
            f"{link.a}-{link.b} {link.busbw_gbs:.3g} GB/s"
            for link in inside[:SHOWN_PAIRS]
            if link.busbw_gbs is not None
        )
        figures = f"its pairs: {shown}" + (", ..." if len(inside) > SHOWN_PAIRS else "")
    else:
        each = [(host, nodes[host].figures.get("network_busbw_gbs")) for host in hosts]
        figures = "its nodes' pairs: " + ", ".join(
            f"{host} {value:.3g} GB/s" for host, value in each if isinstance(value, float)
        )
    return (
        f"the pairs flagged no node or link in it ({figures}); check just these hosts: "
        f"dtrun check --hosts FILE with {', '.join(hosts)}"
    )


def judge_bisection(
    levels: Sequence[Sequence[Group]],
    labels: Sequence[str],
    min_effect: float,
    nodes: Sequence[NodeCheck],
    links: Sequence[LinkCheck],
) -> tuple[tuple[GroupCheck, ...], dict[str, str]]:
    """The groups, level by level, and the corroborating line for each flagged node whose
    group is slow at every level it is in (by host)."""
    judged = _judge(levels, min_effect)
    running = _running(judged)
    by_host = {node.host: node for node in nodes}
    flagged_hosts = {node.host for node in nodes if node.flagged}
    out = []
    for level in judged:
        deeper = judged[level[0].level + 1] if level[0].level + 1 < len(judged) else []
        for group in level:
            hosts = tuple(labels[i] for i in sorted(group.nodes))
            verdict = (
                GroupVerdict.UNJUDGED if not group.judged
                else GroupVerdict.SLOW if group.flagged else GroupVerdict.OK
            )  # fmt: skip
            evidence = group.finding.describe("GB/s") if group.flagged and group.finding else ""
            follow = ""
            deepest = not any(g.flagged and g.nodes <= group.nodes for g in deeper)
            if group.flagged and deepest and not _explained(hosts, flagged_hosts, links):
                inside = [link for link in links if link.a in hosts and link.b in hosts]
                follow = _next_step(hosts, inside, by_host)
            out.append(GroupCheck(
                group.level, hosts, _median(group.group.busbw_gbs), verdict, evidence,
                running[(group.level, group.nodes)], follow,
            ))  # fmt: skip
    return tuple(out), _corroborated(out, flagged_hosts)


def _explained(hosts: Sequence[str], flagged: set[str], links: Sequence[LinkCheck]) -> bool:
    """A flagged node in the group, or a slow link with an end in it."""
    return bool(flagged & set(hosts)) or any(
        link.verdict is LinkVerdict.SLOW and (link.a in hosts or link.b in hosts) for link in links
    )


def _corroborated(groups: Sequence[GroupCheck], flagged: set[str]) -> dict[str, str]:
    out = {}
    for host in sorted(flagged):
        mine = [g for g in groups if g.verdict is not GroupVerdict.UNJUDGED and host in g.hosts]
        if mine and all(g.verdict is GroupVerdict.SLOW for g in mine):
            deepest = mine[-1]
            out[host] = (
                f"bisection: its group slow at {'every level' if len(mine) > 1 else 'its level'}"
                f", down to {', '.join(deepest.hosts)}: {deepest.evidence}"
            )
    return out
