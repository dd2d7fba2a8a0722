"""A failed program launch whose cause is a rank that ended early, with no error.

Under data parallelism every rank takes every step: a rank that leaves the training loop alone
(a ``return`` or ``sys.exit(0)`` on one rank) ends cleanly, and the others fail in the next
collective ("Connection closed by peer"), on nodes whose logs then hold the only error. The
node that failed first is the wrong one to name. The step hook's records say how each process
ended (runner/workloads/stephook/_dtrun_stephook.py: its exit time, and the uncaught exception
that ended it, if one did), so the rank that ended first, with no error, before any rank that
raised, is named first, and the failure as the executor saw it follows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dtrun.errors import DtrunError, Lines, NodeFailedError, ResultError, RunError
from dtrun.sweep.programresult import read_step_files

# What a rank raises when a peer is gone: gloo's RuntimeError ("Connection closed by peer"),
# torch.distributed's DistError kinds (NCCL's DistBackendError, DistNetworkError,
# DistStoreError), Horovod's HorovodInternalError ("Horovod has been shut down ... after one of
# the ranks finished execution", horovod/torch/mpi_ops.py's synchronize). A rank that raised
# another (OSError saving a checkpoint, a ValueError) failed of its own, whichever rank ended
# cleanly first. So did one whose error says a file write failed for want of space, whatever
# its type (the step hook's ``raised_write``): torch.save on a full disk raises RuntimeError.
PEER_ERRORS = frozenset(
    {
        "RuntimeError",
        "DistError",
        "DistBackendError",
        "DistNetworkError",
        "DistStoreError",
        "HorovodInternalError",
    }
)


class EarlyExitError(RunError):
    """A rank ended with no traceback (a return, or sys.exit with any code: the step hook sees no
    exit code) while the others ran on; their failure followed from it."""


def early_exit(error: DtrunError, steps: Path) -> DtrunError:
    """``error`` as it was, or an EarlyExitError naming the rank that ended first with no
    error while the others ran on, from the step records in ``steps``."""
    if not isinstance(error, NodeFailedError):
        return error
    try:
        records = list(read_step_files(steps).values())
    except ResultError:  # the records are said wrong where the result is made
        return error
    ended = [r for r in records if isinstance(r.get("ended_at_s"), float | int)]
    raised = [r for r in ended if r.get("raised")]
    clean = [r for r in ended if not r.get("raised")]
    if not raised or not clean or any(_own(r) for r in raised):
        return error  # one raised its own error (a bug saving a checkpoint): no peer left
    first = min(clean, key=lambda r: r["ended_at_s"])
    if first["ended_at_s"] >= min(r["ended_at_s"] for r in raised) or _steps(first) > min(
        _steps(r) for r in raised
    ):  # it ended with them or after them: no cause of theirs
        return error
    node = str(first.get("node") or "")
    result = next((n for n in error.node_results if n.node == node), None)
    if result is not None and result.exit_code not in (None, 0):
        return error  # its node failed of its own: no clean end
    taken = _steps(first)
    after = f"after step {taken}" if taken else "before its first step"
    who = f"{node}'s rank {first['rank']}" if node else f"rank {first['rank']}"
    log = result.log_path if result is not None else error.log_path
    early = EarlyExitError(
        f"{who} ended with no traceback {after} while the others ran on; the others then failed",
        why=Lines(f"{error.what}: {error.why}"),
        fix=f"find why rank {first['rank']} left its training loop early (a return or "
        f"sys.exit on that rank only: every rank must take the same steps); read {log}",
    )
    early.node_results = error.node_results
    return early


def _own(record: dict[str, Any]) -> bool:
    """Whether a rank's error was its own, not its peer's going (a full disk's, say)."""
    return record["raised"] not in PEER_ERRORS or record.get("raised_write") is True


def _steps(record: dict[str, Any]) -> int:
    return len(record["step_ends_s"])
