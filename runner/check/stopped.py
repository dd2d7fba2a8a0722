"""check.json of a check that did not finish: how it ended (a signal, its timeout, a failed
node), what each node's launch did, and no verdict (docs/check.md, "check.json")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from enum import StrEnum
from typing import Any

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
        results = stop.node_results if isinstance(stop, RunError) else tuple(ended)
    return {
        **record,
        "unreachable": dict(unreachable),
        "launch": [asdict(node) for node in with_cut_logs(results)],
        "wall_s": wall_s,
        "source": source,
    }
