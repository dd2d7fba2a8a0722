"""The time a cluster billed before a sweep began, recorded as the sweep starts
(docs/report.md "Cost", "Before the sweep").

A stack's nodes bill from the moment Azure creates them: while they boot, while cloud-init
installs, and while nobody uses them. The stack says when its scale set was created (outputs
version 4, `nodes_created_at`); the time from then to the sweep's start was paid for this sweep,
unless an earlier sweep or `dtrun run` on the same nodes already counted it. So the start of
the time before is the later of the nodes' creation and the last record of any run directory
beside this one (the same results directory) made on the same nodes: the same inventory
source and the same creation time, so a stack brought down and up again is new nodes. Run
directories that cannot be read are passed over (they are not this sweep's to judge).

Only the cluster knows when its nodes were created; for the embedded cluster, a hosts file or a
Slurm allocation the record says nothing (None), and the report says the time is not known.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.azure.expiry import ExpiryError, iso, parse_iso
from runner.spec.cluster import Inventory

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
    for ended, record in _earlier(results, inventory):
        if since < ended <= now:
            since, reason = ended, f"the last record of run {record} on the same nodes"
    return {
        "from": iso(since),
        "since": reason,
        "seconds": max(0.0, (now - since).total_seconds()),
        "nodes": len(inventory.nodes),
    }


def _earlier(results: Path, inventory: Inventory) -> Iterator[tuple[datetime.datetime, str]]:
    """(last record, run directory) of every run directory in ``results`` made on the same
    nodes: a sweep's runs.json or a `dtrun run`'s run.json."""
    if not results.is_dir():
        return
    for directory in results.iterdir():
        for record, holder in (("runs.json", "manifest.json"), ("run.json", "run.json")):
            try:
                last = json.loads((directory / record).read_text())
                made = json.loads((directory / holder).read_text())
                # a resumed sweep ran on the manifest's inventory and on each resume's
                used = [made["inventory"]] + [r["inventory"] for r in made.get("resumed", [])]
                if any(_same(inventory, other) for other in used):
                    yield parse_iso(last["updated_at"], "updated_at"), directory.name
            except (OSError, ValueError, KeyError, TypeError, AttributeError, ExpiryError):
                continue


def _same(inventory: Inventory, recorded: dict[str, Any]) -> bool:
    return (recorded["source"], recorded.get("nodes_created_at")) == (
        inventory.source,
        inventory.nodes_created_at,
    )
