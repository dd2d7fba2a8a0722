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
class CheckReport:
    nodes: tuple[NodeCheck, ...]
    links: tuple[LinkCheck, ...]
    notes: tuple[str, ...] = ()  # what the check could not judge, and why

    @property
    def flagged_nodes(self) -> tuple[NodeCheck, ...]:
        return tuple(node for node in self.nodes if node.flagged)

    @property
    def slow_links(self) -> tuple[LinkCheck, ...]:
        return tuple(link for link in self.links if link.verdict is LinkVerdict.SLOW)

    @property
    def exit_code(self) -> int:
        return FLAGGED_EXIT if self.flagged_nodes or self.slow_links else 0

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
        }
