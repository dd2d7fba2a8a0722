"""The time a cluster billed before a sweep began, recorded as the sweep starts
(docs/report.md "Cost", "Before the sweep").

A stack's nodes bill from the moment Azure creates them: while they boot, while cloud-init
installs, and while nobody uses them. The stack says when its scale set was created (outputs
version 4, `nodes_created_at`); the time from then to the sweep's start was paid for this sweep,
unless an earlier sweep on the same nodes already counted it. So the start of the time before is
the later of the nodes' creation and the end of the last sweep beside this one (the same results
directory) that ran on the same nodes. Nodes are the same when the cluster's creation time, size
and region are (a stack brought down and up again is new nodes; one stack reached as `--stack`
and as `--outputs FILE` is the same). A resumed sweep ran on each of its clusters in turn: its
part on these nodes ended at its start plus that part's wall time (runs.json `segment_wall_s`),
its last part when runs.json was last written. A `dtrun run` is no sweep: its time has no cost
section, so it stays in the next sweep's time before. Run directories that cannot be read are
passed over (they are not this sweep's to judge).

Only the cluster knows when its nodes were created; for the embedded cluster, a hosts file, a
Slurm allocation or a Spark cluster the record says nothing (None), and the report says the time
is not known.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dtrun.azure.expiry import ExpiryError, iso, parse_iso
from dtrun.errors import DamagedRunError
from dtrun.record.readback import load_json
from dtrun.spec.cluster import Inventory

CREATED = "the nodes were created"


def paid_before(
    results: Path, inventory: Inventory, now: datetime.datetime
) -> dict[str, Any] | None:
    """manifest.json's ``paid_before``: from when, why then, and how long before ``now`` (the
    sweep's start) the inventory's nodes billed; None when the cluster does not say when its
    nodes were created."""
    if inventory.nodes_created_at is None:
        return None
    try:
        since = parse_iso(inventory.nodes_created_at, "nodes_created_at")
    except ExpiryError:
        return None  # the outputs' reader checked it; a hand-edited record is not ours to fix
    reason = CREATED
    for ended, sweep in _ends(results, inventory):
        if since < ended <= now:
            since, reason = ended, f"the end of sweep {sweep} on the same nodes"
    return {
        "from": iso(since),
        "since": reason,
        # a clock behind Azure's can put the creation after the start: nothing paid before
        "seconds": max(0.0, (now - since).total_seconds()),
        "nodes": len(inventory.nodes),
    }


def _ends(results: Path, inventory: Inventory) -> Iterator[tuple[datetime.datetime, str]]:
    """(when it ended, run directory) of each part of every sweep in ``results`` that ran on
    the inventory's nodes."""
    if not results.is_dir():
        return
    for directory in results.iterdir():
        try:
            # the one reader: regular files only (a FIFO there would hang the sweep's start)
            manifest = load_json(directory / "manifest.json", root=directory)
            runs = load_json(directory / "runs.json", root=directory)
            parts = [(manifest["inventory"], manifest["created_at"])] + [
                (entry["inventory"], entry["at"]) for entry in manifest.get("resumed", [])
            ]
            walls = runs.get("segment_wall_s") or []
            # the last part wrote runs.json last, unless it stopped before writing it
            last_wrote = len(walls) == len(parts) or (not walls and len(parts) == 1)
            for index, (used, started) in enumerate(parts):
                if not _same(inventory, used):
                    continue
                if index == len(parts) - 1 and last_wrote:
                    yield parse_iso(runs["updated_at"], "updated_at"), directory.name
                elif index < len(walls) and walls[index] is not None:
                    wall = datetime.timedelta(seconds=float(walls[index]))
                    yield parse_iso(started, "created_at") + wall, directory.name
                # else: a part whose end is not recorded is passed over
        # OverflowError: a wall time of 1e300 s (timedelta) or one past the year 9999 (the sum)
        except (DamagedRunError, OSError, ValueError, KeyError, TypeError, AttributeError,
                OverflowError, ExpiryError):  # fmt: skip
            continue


def _same(inventory: Inventory, recorded: Mapping[str, Any]) -> bool:
    """The same nodes: the same creation time (to the microsecond, as Python reads Azure's),
    size and region."""
    created = recorded.get("nodes_created_at")
    if not isinstance(created, str) or inventory.nodes_created_at is None:
        return False
    try:
        same_time = parse_iso(created, "nodes_created_at") == parse_iso(
            inventory.nodes_created_at, "nodes_created_at"
        )
    except ExpiryError:
        return False
    return same_time and (recorded.get("size"), recorded.get("region")) == (
        inventory.size,
        inventory.region,
    )
