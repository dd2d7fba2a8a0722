"""check.json of a check that did not finish: how it ended (a signal, its timeout, a failed
node, the nodes that had stopped making progress), what each node's launch did, and no verdict
(docs/check.md, "check.json")."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dtrun.errors import (
    DtrunError,
    LaunchInterrupted,
    NodeFailedError,
    RunError,
    RunInterruptedError,
    RunTimeoutError,
    interruption,
    stop_signal,
)
from dtrun.record.writefail import with_cut_logs
from dtrun.redact import redact_text
from dtrun.spec.outcome import NodeResult
from dtrun.spec.text import host_label

if TYPE_CHECKING:
    from dtrun.execute import LineSink

CHECK_RECORD = "check.json"
CHECK_SCHEMA = "dtrun.check-report/1"


class CheckStatus(StrEnum):
    """How a check ended (check.json "status"; a record without one is completed)."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM, SIGHUP
    TIMEOUT = "timeout"  # --timeout
    # a node's launch failed past the retries, none answered, or rank 0's result was missing
    # or damaged
    FAILED = "failed"
    UNRECORDED = "unrecorded"  # dtrun was killed (SIGKILL): written by its guard


UNRECORDED_CHECK = (
    "dtrun ended without recording how the check ended (SIGKILL, out of memory): "
    "recorded by its guard; the node logs in check/ show how far it got"
)


# The check workload's lines (runner/workloads/check.py, Watch): a rank's start, then every
# HEARTBEAT_S (5 s) how long it has waited on the others and where, or worked since it waited
_STARTED = re.compile(r"dtrun: rank (\d+) of \d+ started$")
_WAITED = re.compile(r"dtrun: rank (\d+) has waited \d+ s for the others at (.+)$")
_WORKED = re.compile(r"dtrun: rank (\d+) has worked (\d+) s since it last waited$")
# A rank that said nothing this long before the others' last wait had stopped: three
# heartbeats missed. Before every rank said so while it worked, only the waiting ones spoke,
# and a rank was named only once silent 30 s: a --timeout had to pass start-up plus about 35 s.
QUIET_S = 15.0
# A rank that had worked this long without waiting on the others was stuck in its own work:
# six heartbeats, more than any one step of the check takes on its own
SILENT_S = 30.0


class Progress:
    """A launch's line sink that hears, beside ``on_line``, when each rank of the check last
    spoke, and since when it has worked without waiting on the others. A rank that stopped (a
    process stopped, a host frozen) falls silent, one stuck in its own work (a kernel stuck)
    says it works on, while the ranks that wait for it say so: at --timeout, its node is the
    one named (``hung``)."""

    def __init__(self, on_line: LineSink, clock: Callable[[], float] | None = None) -> None:
        self.on_line, self.clock = on_line, clock or time.monotonic
        self.started = self.clock()  # the launch's start (``start``), its deadline counted from
        self.heard: dict[int, tuple[str, float]] = {}  # rank -> its node, when it last spoke
        self.working: dict[int, float] = {}  # rank -> since when it has worked, not waited
        self.waited: tuple[float, str] | None = None  # the last wait said: when, where

    def start(self) -> None:
        """The launch starts now (its nodes ready)."""
        self.started = self.clock()

    def __call__(self, node: str, line: str) -> None:
        self.on_line(node, line)
        found = _WAITED.search(line) or _WORKED.search(line) or _STARTED.search(line)
        if found is None:
            return
        now, rank = self.clock(), int(found[1])
        self.heard[rank] = (node, now)
        self.working.pop(rank, None)
        if found.re is _WORKED:
            self.working[rank] = now - int(found[2])
        elif found.re is _WAITED:
            self.waited = (now, found[2][:200])

    def hung(self, timeout_s: float) -> tuple[list[tuple[str, float, str]], str]:
        """The nodes, the longest stalled first, whose ranks said nothing for more than QUIET_S
        or had worked without waiting for more than SILENT_S before the others' last wait
        (each with how long, and which), and where the others waited; none where no rank
        waited within QUIET_S of the deadline (every rank silent: nothing to tell the hung
        ones by)."""
        if self.waited is None or self.waited[0] < self.started + timeout_s - QUIET_S:
            return [], ""
        last, where = self.waited
        stalled: dict[str, tuple[float, str]] = {}
        for rank, (node, when) in self.heard.items():
            quiet, worked = last - when, last - self.working.get(rank, last)
            if quiet > QUIET_S:
                found = (quiet, "said nothing")
            elif worked > SILENT_S:
                found = (worked, "worked without waiting on the others")
            else:
                continue
            stalled[node] = max(stalled.get(node, found), found)
        ordered = sorted(stalled.items(), key=lambda item: -item[1][0])
        return [(node, seconds, said) for node, (seconds, said) in ordered], where

    def name_hung(self, error: RunError, timeout_s: float, labels: dict[str, str]) -> None:
        """A timeout's ``error`` naming the nodes that had stopped making progress, where the
        lines tell."""
        stalled, where = self.hung(timeout_s)
        if not stalled or not isinstance(error, RunTimeoutError):
            return
        error.hung_nodes = tuple(labels.get(node, node) for node, _, _ in stalled)
        said = ", ".join(f"{host_label(node, labels.get(node))} {what} for {seconds:.0f} s"
                         for node, seconds, what in stalled)  # fmt: skip
        logs = {result.node: result.log_path for result in error.node_results}
        read = ", ".join(logs.get(node) or f"{node}'s log" for node, _, _ in stalled)
        error.why = "; ".join([*filter(None, [error.why]),
                               f"{said} while the others waited at {where}: stopped making "
                               "progress (a process stopped or stuck, a host frozen)"])  # fmt: skip
        error.fix = f"read {read} for where it stopped; run dtrun check again without it"


def unrecorded_record() -> dict[str, Any]:
    """What the guard writes where a killed check left no check.json: no verdict, and nothing
    of the run (the guard's arguments are seen by ps)."""
    return {"schema": CHECK_SCHEMA, "status": CheckStatus.UNRECORDED.value,
            "error": UNRECORDED_CHECK}  # fmt: skip


def stopped_record(
    stop: DtrunError | KeyboardInterrupt,
    wall_s: float,
    unreachable: dict[str, str],
    labels: dict[str, str],
    source: str,
    ended: Sequence[NodeResult] = (),
) -> dict[str, Any]:
    """The record of a check ``stop`` ended: no nodes, links or groups, since a check that did
    not finish supports no verdict. ``ended``: how each node ended where the stop carries none
    (a full disk's, runner/sweep/check.py)."""
    record: dict[str, Any] = {"schema": CHECK_SCHEMA}
    if isinstance(stop, KeyboardInterrupt | RunInterruptedError):
        record.update(status=CheckStatus.INTERRUPTED, signal=stop_signal().name,
                      error=interruption(stop))  # fmt: skip
        results = stop.node_results if isinstance(stop, LaunchInterrupted | RunError) else ()
    else:
        timeout = isinstance(stop, RunTimeoutError)
        record.update(status=CheckStatus.TIMEOUT if timeout else CheckStatus.FAILED,
                      error=redact_text(stop.message))  # fmt: skip
        failed = (
            stop.node if isinstance(stop, NodeFailedError) else getattr(stop, "lost_node", None)
        )
        if failed is not None:
            record["failed_node"] = labels.get(failed, failed)
        if isinstance(stop, RunTimeoutError) and stop.hung_nodes:
            record["hung_nodes"] = list(stop.hung_nodes)
        results = stop.node_results if isinstance(stop, RunError) else tuple(ended)
    return {
        **record,
        "unreachable": dict(unreachable),
        "launch": [asdict(node) for node in with_cut_logs(results)],
        "wall_s": wall_s,
        "source": source,
    }
