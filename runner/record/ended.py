"""run.json of a `dtrun run` that ended without recording how: SIGKILL (`kill -9`, the OOM
killer, a CI runner's hard stop) runs none of dtrun's code, so run.json would say "running"
for ever. A guard (runner/execute/guard.py) started beside the run runs this module when dtrun
ends, however it ends; it rewrites a run.json that still says "running" to "unrecorded",
atomically and through no link. A run that recorded its end (ok, failed, ...) is left as it is.

Run as ``python -I -S -c GUARD_CODE ROOT RUN_JSON`` (guard_command): the standard library, the
run's record types and the one atomic write only, nothing dtrun's process held.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from dtrun.spec.outcome import RunStatus
from dtrun.workloads.files import write_atomic

UNRECORDED_RUN = (
    "dtrun ended without recording how the run ended (SIGKILL, out of memory): "
    "recorded by its guard; the node logs show how far the program got"
)
# the guard's program: the package's root first on the path (-I keeps PYTHONPATH out)
GUARD_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from dtrun.record.ended import mark_unrecorded; mark_unrecorded(sys.argv[2])"
)


def guard_command(run_json: Path) -> list[str]:
    """The command a guard runs when dtrun ends: this interpreter, this package's root."""
    import dtrun

    root = Path(dtrun.__file__).parent.parent  # not resolved: a checkout's dtrun -> runner
    return [sys.executable, "-I", "-S", "-c", GUARD_CODE, str(root), str(run_json)]


def mark_unrecorded(run_json: str | Path) -> bool:
    """Rewrite ``run_json``'s status from running to unrecorded; False where it says anything
    else, or cannot be read or written (nothing is then changed)."""
    path = Path(run_json)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or data.get("status") != RunStatus.RUNNING:
        return False
    data.update(
        status=RunStatus.UNRECORDED.value,
        error=UNRECORDED_RUN,
        updated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    try:
        write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())
    except OSError:  # a link put there, a full disk: left as it was
        return False
    return True
