"""run.json of a `dtrun run` (check.json of a check) that ended without recording how:
SIGKILL (`kill -9`, the OOM killer, a CI runner's hard stop) runs none of dtrun's code, so
run.json would say "running" for ever, and a check would leave no check.json. A guard
(runner/execute/guard.py) started beside the run runs this module when dtrun ends, however it
ends; it rewrites a run.json that still says "running" to "unrecorded" (writes a check's
record where there is none), atomically and through no link. A run that recorded its end
(ok, failed, ...) is left as it is.

Run as ``python -I -S -c GUARD_CODE ROOT RECORD [MISSING]`` (guard_command): the standard
library, the run's record types and the one atomic write only, nothing dtrun's process held.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dtrun.spec.outcome import RunStatus
from dtrun.workloads.files import write_atomic

UNRECORDED_RUN = (
    "dtrun ended without recording how the run ended (SIGKILL, out of memory): "
    "recorded by its guard; the node logs show how far the program got"
)
# the guard's program: the package's root first on the path (-I keeps PYTHONPATH out)
GUARD_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from dtrun.record.ended import settle; settle(*sys.argv[2:])"
)


def guard_command(record: Path, missing: Mapping[str, Any] | None = None) -> list[str]:
    """The command a guard runs when dtrun ends: this interpreter, this package's root.
    ``missing``: the record to write where none is (check.json); else run.json's rewrite."""
    import dtrun

    root = Path(dtrun.__file__).parent.parent  # not resolved: a checkout's dtrun -> runner
    extra = [json.dumps(missing)] if missing is not None else []
    # the guard runs from / (start_guard): a record under `--output runs` is named from here
    where = str(record.absolute())  # not resolved: a link there is refused when written
    return [sys.executable, "-I", "-S", "-c", GUARD_CODE, str(root), where, *extra]


def settle(record: str, missing: str | None = None) -> bool:
    """The guard's work: ``missing`` (JSON) written where no record is, else mark_unrecorded."""
    if missing is None:
        return mark_unrecorded(record)
    path = Path(record)
    if os.path.lexists(path):  # dtrun recorded how it ended (or something is there: kept)
        return False
    data = {**json.loads(missing), "updated_at": _now()}
    try:
        write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())
    except OSError:
        return False
    return True


# run.json holds a node's end each: 10,000 nodes (--nodes' most) take a few MB
MAX_RECORD = 32 * 1024 * 1024


def _read_record(path: Path) -> bytes:
    """The record's bytes: a regular file, no larger than any run.json (the program runs in
    the run directory: a FIFO put there was waited on for ever, O_NONBLOCK opens it at once;
    a sparse 2 GiB file was read whole); else OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD:
            raise OSError(f"{path} is no record: not a regular file of a record's size")
        return file.read(MAX_RECORD + 1)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def mark_unrecorded(run_json: str | Path) -> bool:
    """Rewrite ``run_json``'s status from running to unrecorded; False where it says anything
    else, or cannot be read or written (nothing is then changed)."""
    path = Path(run_json)
    try:
        data = json.loads(_read_record(path).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(data, dict) or data.get("status") != RunStatus.RUNNING:
        return False
    data.update(
        status=RunStatus.UNRECORDED.value,
        error=UNRECORDED_RUN,
        updated_at=_now(),
    )
    try:
        write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())
    except OSError:  # a link put there, a full disk: left as it was
        return False
    return True
