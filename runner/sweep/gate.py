"""The health gate's verdict: each node's single-node all-reduce against the pass mark.

Azure's node health checks run NCCL's all-reduce on one VM with all its GPUs and compare the bus
bandwidth with a per-size threshold (docs/facts.md §6). dtrun does the same with its all-reduce
workload on every node the sweep will use, one node at a time. The launches are planned with the
sweep (dtrun.plan.sweep.plan_gate) and run by its loop; this module only judges their results.
Below the mark the sweep warns, or with --strict stops before its first point.
"""

from __future__ import annotations

from collections.abc import Sequence

from dtrun.errors import HealthGateError, RunDirWriteError
from dtrun.plan.sweep import HEALTH_DIR, GatePlan, Launch
from dtrun.report.resultfile import AllreduceResult
from dtrun.spec.outcome import GateStatus, Health, NodeHealth
from dtrun.sweep.runlaunch import Outcome


def skipped(note: str) -> Health:
    return Health(GateStatus.SKIPPED, note=note)


def judge(gate: GatePlan, outcomes: Sequence[Outcome], *, strict: bool) -> Health:
    """Every node's figure against the pass mark, and the verdict."""
    checks = tuple(
        _node(gate, launch, outcome) for launch, outcome in zip(gate.checks, outcomes, strict=True)
    )
    below = [check for check in checks if not check.passed]
    status = (
        GateStatus.PASSED if not below else (GateStatus.FAILED if strict else GateStatus.WARNED)
    )
    return Health(
        status,
        threshold_gbs=gate.threshold_gbs,
        threshold_source=gate.threshold_source,
        size=gate.size,
        procs_per_node=gate.procs_per_node,
        nodes=checks,
    )


def written(outcome: Outcome) -> Outcome:
    """A check's outcome, unless the run directory could not take its launch's files (a full
    disk): that error is raised, the disk's and not the node's health, and stops the sweep."""
    if isinstance(outcome.error, RunDirWriteError):
        raise outcome.error
    return outcome


def refuse(health: Health, run_path: str) -> HealthGateError:
    """The error that stops a sweep whose gate failed under --strict or --drain-failing."""
    if health.note:  # the scheduler took the nodes out
        return HealthGateError(
            health.describe(),
            why=f"{health.note}; the sweep stops before it runs on them",
            fix=f"read {run_path}/{HEALTH_DIR} and run again: Slurm gives the next allocation "
            "other nodes (`scontrol update nodename=NAME state=resume` returns one to service)",
        )
    return HealthGateError(
        health.describe(),
        why="--strict stops the sweep before it runs on unhealthy nodes",
        fix=f"read {run_path}/{HEALTH_DIR}, replace or reboot those nodes, or run without "
        "--strict to sweep anyway",
    )


def _node(gate: GatePlan, launch: Launch, outcome: Outcome) -> NodeHealth:
    node = launch.plan.nodes[0]
    if outcome.error is not None:
        return NodeHealth(
            node.name, node.address, None, False, outcome.error.message, launch.workdir
        )
    result = outcome.result
    if not isinstance(result, AllreduceResult):  # pragma: no cover - the module writes one
        return NodeHealth(node.name, node.address, None, False, "not an all-reduce result")
    busbw = result.largest.in_place.busbw
    error = f"{result.wrong} wrong elements" if result.wrong else None
    passed = busbw >= gate.threshold_gbs and not result.wrong
    return NodeHealth(node.name, node.address, busbw, passed, error, launch.workdir)
