"""The Pulumi program's run time under mocks at 2 nodes against 100 nodes (target: ratio ~1).

A scale set declares every node in one resource, so the program should do the same work for
any node count. Runs the program under pulumi.runtime mocks alternately at 2 and 100 nodes
after a warm-up of each, and prints the per-pair ratio t(100)/t(2) and its median.

    .venv/bin/python benchmarks/infra_mock_by_node_count.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dtrun.azure.config import cluster_spec
from tests.infra.harness import run


def timed(nodes: int) -> tuple[float, int]:
    spec = cluster_spec(
        {"adminCidrs": ["203.0.113.4/32"], "nodeCount": nodes}, today=datetime.date(2026, 11, 23)
    )
    start = time.perf_counter()
    program = run(spec)
    return time.perf_counter() - start, len(program.resources)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    timed(2), timed(100)  # warm-up: imports and first-use caches
    pairs = []
    for _ in range(args.rounds):
        small, small_resources = timed(2)
        large, large_resources = timed(100)
        pairs.append((small, large))
    ratios = [large / small for small, large in pairs]
    print(f"resources declared: {small_resources} at 2 nodes, {large_resources} at 100 nodes")
    print(
        f"median run: {statistics.median(s for s, _ in pairs) * 1000:.0f} ms at 2 nodes, "
        f"{statistics.median(large for _, large in pairs) * 1000:.0f} ms at 100 nodes; "
        f"ratio t(100)/t(2) median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} pairs); target ~1"
    )


if __name__ == "__main__":
    main()
