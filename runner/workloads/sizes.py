"""Message sizes as nccl-tests writes them (4K, 64M, 1G: powers of 1024). No torch: the planner
checks --sizes with it before anything starts, and the all-reduce workload uses it on nodes."""

from __future__ import annotations

import re

UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE = re.compile(r"(\d+)([KMG]?)B?\Z", re.IGNORECASE)
# The largest message: an all-reduce holds its send and receive buffers, so one above 256G
# fits no accelerator's memory (288 GB at most in 2026). A larger one is a typo, and reached
# the nodes: every launch failed allocating it (docs/bench.md, Bounds).
MAX_SIZE = 256 * UNITS["G"]


def parse_size(text: str) -> int:
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size such as 4K, 64M or 1G")
    size = int(match.group(1)) * UNITS[match.group(2).upper()]
    if size > MAX_SIZE:
        raise ValueError(f"{text!r} is more than 256G: no accelerator holds its all-reduce")
    return size


def message_sizes(spec: str) -> list[int]:
    """``4K:64M`` doubles from 4 KiB to 64 MiB (nccl-tests -b 4K -e 64M -f 2); ``1K,1M`` lists."""
    if ":" in spec:
        low, high = (parse_size(part) for part in spec.split(":", 1))
        if not 0 < low <= high:
            raise ValueError(f"{spec!r}: the first size must be positive and not above the second")
        sizes = []
        while low <= high:
            sizes.append(low)
            low *= 2
        return sizes
    sizes = sorted({parse_size(part) for part in spec.split(",") if part.strip()})
    if not sizes or sizes[0] <= 0:
        raise ValueError(f"{spec!r} holds no positive size")
    return sizes


def format_size(size: int) -> str:
    """The shortest exact nccl-tests spelling: 4194304 -> 4M."""
    for unit in ("G", "M", "K"):
        if size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]}{unit}"
    return str(size)


PROBE_CAP = {"cuda": 1024**3, "cpu": 64 * 1024**2}  # the largest message a probe times
PROBE_MIN = 4 * 1024


def probe_sizes(gradient_bytes: int, device_type: str) -> list[int]:
    """Doubling from 4K up to half the gradient's size (capped), the gradient's size last."""
    top = max(PROBE_MIN, min(gradient_bytes, PROBE_CAP[device_type]))
    sizes, size = [], PROBE_MIN
    while size <= top // 2:
        sizes.append(size)
        size *= 2
    return [*sizes, top]
