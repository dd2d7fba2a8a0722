"""What `dtrun check` found: each node's verdict and cause with its figures, each link's; and
the JSON it prints (docs/check.md, "Output"). Frozen values; stdlib only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# `dtrun check`'s exit code when it flags a node or a link (docs/check.md): not 1 (the check
# itself failed), 2 (bad input), 3 (an upload) or 4 (bench's health gate under --strict).
FLAGGED_EXIT = 5
# A bisection group whose pairs flagged nothing changes the exit code only when it and the
# group it is in were both slow: one comparison of two groups is too little (docs/check.md)
CONFIRMING_LEVELS = 2


class Verdict(StrEnum):
    OK = "ok"
    SLOW = "slow"
    FAILED = "failed"


class Cause(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    NETWORK = "network"
    GPU = "gpu"
    UNREACHABLE = "unreachable"


class LinkVerdict(StrEnum):
    OK = "ok"
    SLOW = "slow"  # the link: its two nodes are fine with their other partners
    NODE = "node"  # slow because one of its nodes is flagged
    UNJUDGED = "unjudged"  # two nodes' one pair, no busbw expected: nothing to compare it with


class GroupVerdict(StrEnum):
    OK = "ok"
    SLOW = "slow"  # below the other groups of its bisection level
    UNJUDGED = "unjudged"  # the only group of its level: nothing to compare it with


@dataclass(frozen=True)
class NodeCheck:
    host: str  # as the hosts file, stack or scheduler names it
    verdict: Verdict
    cause: Cause | None  # None when ok
    figures: Mapping[str, Any] = field(default_factory=dict)  # JSON values
    evidence: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        return self.verdict is not Verdict.OK


@dataclass(frozen=True)
class LinkCheck:
    a: str
    b: str
    busbw_gbs: float | None
    verdict: LinkVerdict
    evidence: str = ""


@dataclass(frozen=True)
class GroupCheck:
    """A group of one bisection level, judged against the other groups of its level."""

    level: int  # 0: the whole fleet, 1: its halves, ...
    hosts: tuple[str, ...]
    busbw_gbs: float | None
    verdict: GroupVerdict
    evidence: str = ""  # why slow
    levels: int = 0  # slow levels running down to this group (it and the groups it is in)
    follow: str = ""  # slow, the deepest of its path, and nothing flagged inside: what next

    @property
    def slow(self) -> bool:
        """Slow at two levels running with nothing inside flagged (docs/check.md)."""
        return bool(self.follow) and self.levels >= CONFIRMING_LEVELS


@dataclass(frozen=True)
class CheckReport:
    nodes: tuple[NodeCheck, ...]
    links: tuple[LinkCheck, ...]
    groups: tuple[GroupCheck, ...] = ()

    @property
    def flagged_nodes(self) -> tuple[NodeCheck, ...]:
        return tuple(node for node in self.nodes if node.flagged)

    @property
    def slow_links(self) -> tuple[LinkCheck, ...]:
        return tuple(link for link in self.links if link.verdict is LinkVerdict.SLOW)

    @property
    def slow_groups(self) -> tuple[GroupCheck, ...]:
        return tuple(group for group in self.groups if group.slow)

    @property
    def exit_code(self) -> int:
        return FLAGGED_EXIT if self.flagged_nodes or self.slow_links or self.slow_groups else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": [
                {
                    "host": node.host,
                    "verdict": node.verdict.value,
                    "cause": node.cause.value if node.cause else None,
                    "figures": {**node.figures, "evidence": list(node.evidence)},
                }
                for node in self.nodes
            ],
            "links": [
                {
                    "a": link.a,
                    "b": link.b,
                    "busbw_gbs": link.busbw_gbs,
                    "verdict": link.verdict.value,
                }
                for link in self.links
            ],
            "groups": [
                {
                    "level": group.level,
                    "hosts": list(group.hosts),
                    "busbw_gbs": group.busbw_gbs,
                    "verdict": group.verdict.value,
                }
                for group in self.groups
            ],
        }
