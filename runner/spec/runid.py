"""What a run id may be, wherever one comes from: --run-id, a manifest read back for a report,
a comparison or a resume. Pure.

A run id names a directory and a rendezvous, and every console line, report and plot title
shows it: letters, digits, '.', '_' and '-' only, so none holds a path separator, a shell or
Markdown character, rich markup or a control character.
"""

from __future__ import annotations

# Bytes, as UTF-8: a file system's names stop at 255 bytes, not characters (a letter outside
# ASCII takes 2 to 4), and the rendezvous id adds a prefix.
MAX_RUN_ID = 100
RUN_ID_RULE = "letters, digits, '.', '_' and '-', not starting with '.'"


def run_id_size(run_id: str) -> int:
    """The run id's length in bytes, as UTF-8 (a lone surrogate counts as it is written)."""
    return len(run_id.encode("utf-8", "surrogateescape"))


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` cannot be a run id; None when it can."""
    size = run_id_size(run_id)
    if size > MAX_RUN_ID:
        return f"it is {size} bytes long, more than {MAX_RUN_ID} as UTF-8"
    if not run_id or not all(c.isalnum() or c in "._-" for c in run_id) or run_id[0] == ".":
        return f"a run id holds {RUN_ID_RULE}"
    return None
