"""Executors run a LaunchPlan's node scripts and report how each node ended.

One interface, one return type: ``run`` returns every node's NodeResult when all nodes exit 0,
and otherwise raises a RunError (NodeFailedError, RunTimeoutError) after stopping every node.
A KeyboardInterrupt also stops every node before it propagates.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from runner.spec import LaunchPlan, NodeResult

LineSink = Callable[[str, str], None]  # (node name, one line of its output without newline)

TAIL_LINES = 20  # lines of a failed node's log quoted in the error


class Executor(Protocol):
    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]: ...


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def discard(node: str, line: str) -> None:
    """A LineSink that drops output (it is still saved in the node logs)."""
