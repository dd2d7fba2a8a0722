"""`dtrun --help` wall time: what every command pays before it does anything.

Times a command as a whole process (start, import, print, exit), ROUNDS times after one warm-up
of each, alternating A and B when a baseline is given, and prints each one's median, min and
max and the median of the pairs' ratios A/B. Issue #11's measure: `dtrun --help` before and
after the redesign, one sitting; B is typically another checkout's dtrun.

    .venv/bin/python benchmarks/cli_startup.py [--rounds 30] [--vs 'OTHER DTRUN'] [-- ARGS]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed: {done.stderr.decode()[-2000:]}")
    return elapsed


def describe(name: str, times: list[float]) -> str:
    return (
        f"{name}: median {statistics.median(times) * 1000:.0f} ms "
        f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, {len(times)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="A: the dtrun to time")
    parser.add_argument("--vs", help="B: a baseline command line, e.g. another checkout's dtrun")
    parser.add_argument("args", nargs="*", default=["--help"], help="arguments (default --help)")
    args = parser.parse_args()
    a_cmd = [args.dtrun, *args.args]
    b_cmd = [*shlex.split(args.vs), *args.args] if args.vs else None
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"A: {shlex.join(a_cmd)}" + (f"\nB: {shlex.join(b_cmd)}" if b_cmd else ""))
    wall(a_cmd)  # warm-up: page cache, bytecode
    if b_cmd:
        wall(b_cmd)
    a_times: list[float] = []
    b_times: list[float] = []
    for _ in range(args.rounds):
        a_times.append(wall(a_cmd))
        if b_cmd:
            b_times.append(wall(b_cmd))
    print(describe("A", a_times))
    if b_cmd:
        print(describe("B", b_times))
        ratios = [a / b for a, b in zip(a_times, b_times, strict=True)]
        print(
            f"ratio A/B: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
