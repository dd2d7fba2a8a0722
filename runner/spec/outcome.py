"""How launches ended: each node's exit, each (node count, repeat) point's status. Frozen
values; stdlib only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dtrun.spec.text import host_label, plural


class SuccessRule(StrEnum):
    """When a launch has succeeded (--success; docs/launchers.md "When a launch succeeds")."""

    ALL = "all"  # every node's script exited 0
    # node 0's script exited 0 (Volcano Engine's MPI rule); the nodes still running are stopped
    WORKER0 = "worker0"


@dataclass(frozen=True)
class NodeResult:
    """How one node's launch ended."""

    node: str
    address: str
    exit_code: int | None  # None: still running when dtrun stopped it
    log_path: str
    wall_s: float
    # --success worker0: still running when node 0 exited 0, so stopped (not a failure)
    stopped_after_worker0: bool = False
    # what ended the node when neither its script nor dtrun did, in the engine's words (a
    # Slurm node failure, a time limit, a scancel from outside dtrun, a lost Spark executor)
    cause: str | None = None
    # why the node's log on this machine stopped short of its output (a full disk); None: whole
    log_cut: str | None = None


class RunStatus(StrEnum):
    """How one launch ended (runs.json, run.json)."""

    RUNNING = "running"  # run.json while `dtrun run` is under way; never in runs.json
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    EVICTED = "evicted"  # a node was evicted (a spot VM taken back) or vanished (--resume)
    # run.json of a dtrun that ended still "running" (SIGKILL), set by its guard (record/ended.py)
    UNRECORDED = "unrecorded"


@dataclass(frozen=True)
class RunResult:
    """One launch of one plan: a (node count, repeat) point of the sweep."""

    nodes: int
    repeat: int
    status: RunStatus
    wall_s: float
    run_dir: str  # relative to the sweep's directory, e.g. "n2/r0"
    node_results: tuple[NodeResult, ...] = ()
    error: str | None = None


class SweepStatus(StrEnum):
    """How a whole sweep stands (runs.json "status")."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class GateStatus(StrEnum):
    """The health gate's verdict (health.json "status")."""

    PASSED = "passed"
    WARNED = "warned"  # some nodes below the pass mark; the sweep runs
    FAILED = "failed"  # some nodes below it under --strict; the sweep stops
    SKIPPED = "skipped"  # no pass mark known, one process per node, or --no-health-gate


@dataclass(frozen=True)
class NodeHealth:
    """One node's health-gate check."""

    node: str
    address: str
    busbw: float | None  # in-place busbw at the gate's size, GB/s; None: it did not run
    passed: bool
    error: str | None = None
    directory: str = ""  # relative to the run directory


@dataclass(frozen=True)
class Health:
    """The health gate's outcome (health.json)."""

    status: GateStatus
    note: str = ""
    threshold_gbs: float | None = None
    threshold_source: str | None = None
    size: str | None = None
    procs_per_node: int | None = None
    nodes: tuple[NodeHealth, ...] = ()

    @property
    def below(self) -> tuple[NodeHealth, ...]:
        return tuple(node for node in self.nodes if not node.passed)

    def describe(self) -> str:
        if self.status is GateStatus.SKIPPED:
            return f"health gate skipped: {self.note}"
        nodes = plural(len(self.nodes), "node")
        checked = f"{nodes} at {self.size}, pass mark {self.threshold_gbs:g} GB/s"
        if not self.below:
            return f"health gate passed: {checked}"
        names = ", ".join(gate_figure(n.node, n.address, n.busbw) for n in self.below)
        return f"health gate: {len(self.below)} below the mark: {names}; {checked}"


def gate_figure(node: str, address: str, busbw: float | None) -> str:
    """A node's gate figure, named with its host: 'node-1 (127.0.0.3) at 12.3 GB/s'."""
    where = host_label(node, address)
    return f"{where} at {busbw:.1f} GB/s" if busbw is not None else f"{where}, which did not run"


def health_below(health: Mapping[str, Any] | None) -> list[str]:
    """health.json's nodes below the mark, each with its host and figure (gate_figure)."""
    nodes = (health or {}).get("nodes") or ()
    return [
        gate_figure(str(n["node"]), str(n.get("address") or ""), n.get("busbw"))
        for n in nodes
        if not n.get("passed")
    ]
