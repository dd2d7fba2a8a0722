"""A node's GPUs as nvidia-smi reported them in the check (runner/workloads/check.py): what
fails a node and what slows it (docs/check.md, "GPUs")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# nvidia-smi's clocks_event_reasons bits (NVML's nvmlClocksEventReason*) that mean the GPU runs
# slower than it should: HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80.
# Idle (0x1), application clocks (0x2), SW power cap (0x4) and sync boost (0x10) are normal.
THROTTLING = {0x8: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "HW power brake"}


def _number(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def gpu_problems(rows: Sequence[Mapping[str, str]] | None) -> tuple[list[str], list[str]]:
    """(what fails the node, what slows it), one line per GPU and reason."""
    failed: list[str] = []
    slowed: list[str] = []
    for row in rows or ():
        gpu = row.get("index", "?")
        if "error" in row:
            failed.append(f"nvidia-smi failed: {row['error']}")
            continue
        ecc = _number(row.get("ecc.errors.uncorrected.volatile.total", ""))
        if ecc:
            failed.append(f"GPU {gpu}: {ecc} uncorrectable ECC errors since boot")
        if row.get("retired_pages.pending", "").strip().lower() == "yes":
            failed.append(f"GPU {gpu}: retired pages pending (reset the GPU)")
        xid = _number(row.get("xid", ""))
        if xid:
            failed.append(f"GPU {gpu}: {xid} XID errors in the kernel log")
        mask = _number(row.get("clocks_event_reasons.active", ""))
        if mask:
            reasons = [name for bit, name in THROTTLING.items() if mask & bit]
            if reasons:
                slowed.append(f"GPU {gpu}: clocks held down ({', '.join(reasons)}, {mask:#x})")
    return failed, slowed
