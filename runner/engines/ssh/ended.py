"""How an SSH launch's nodes ended, and what its stop says (runner/engines/ssh/executor.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dtrun.errors import RunError
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from dtrun.spec.outcome import NodeResult


@dataclass
class Ended:
    launch: NodeLaunch
    exit_code: int | None  # None: stopped by dtrun
    wall_s: float
    error: RunError | None = None  # the connection was lost
    left: list[str] | None = None  # pids its wrapper's stop left; None: it did not stop them
    cut: OSError | None = None  # its log could not be written (a full disk): the launch stops


def node_results(
    plan: LaunchPlan, workdir: Path, ended: dict[str, Ended]
) -> tuple[NodeResult, ...]:
    """How each node of the launch ended; exit code None where dtrun stopped it."""
    return tuple(
        NodeResult(
            node=launch.node.name,
            address=launch.node.address,
            exit_code=ended[launch.node.name].exit_code if launch.node.name in ended else None,
            log_path=str(workdir / f"{launch.node.name}.log"),
            wall_s=ended[launch.node.name].wall_s if launch.node.name in ended else 0.0,
        )
        for launch in plan.launches
    )


def with_left(verdict: RunError | None, left: list[str]) -> RunError | None:
    """The launch's verdict, saying what its stop left running, if anything."""
    if left and verdict is None:
        return RunError(
            "processes of the launch were left behind",
            why="; ".join(left),
            fix="stop them by hand (they carry DTRUN_LAUNCH in their environment)",
        )
    if left and verdict is not None:
        verdict.why += "\nafter stopping: " + "; ".join(left)
    return verdict


class StoppedLate(Exception):
    """Ctrl-C came while the launch's nodes were stopped for its own end (a failure, its
    timeout, worker0's exit): raised by the session's loop, and by run as the interruption."""

    def __init__(self, nodes: tuple[NodeResult, ...], ended: RunError | None) -> None:
        super().__init__()
        self.nodes, self.ended = nodes, ended
