"""How often a default `dtrun bench` reaches a verdict, and how wide its intervals are: issue
#13's measure.

Runs `dtrun bench` ROUNDS times on the embedded cluster with the defaults (plus any ARGS after
--), one after another, and reads each run's summary.json: every point's verdict (scales, loses,
inconclusive), its efficiency and 95% interval, and the run's wall time. Prints one line per run
and the totals: verdicts reached out of ROUNDS per point, the median interval width.

    .venv/bin/python benchmarks/verdict_rate.py [--rounds 10] [-- ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--port", type=int, default=29960)
    parser.add_argument("args", nargs="*", help="more `dtrun bench` arguments")
    args = parser.parse_args()
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; "
        f"dtrun bench {' '.join(args.args) or '(defaults)'}, {args.rounds} runs"
    )
    verdicts: dict[int, list[str]] = defaultdict(list)
    widths: dict[int, list[float]] = defaultdict(list)
    walls: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-verdict-") as tmp:
        for index in range(args.rounds):
            command = [
                sys.executable, "-m", "runner.cli", "bench", "--quiet", "--output", tmp,
                "--run-id", f"v{index}", "--port", str(args.port + 2 * index), *args.args,
            ]  # fmt: skip
            started = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            walls.append(time.monotonic() - started)
            if done.returncode != 0:
                print(f"run {index}: exit {done.returncode}: {done.stderr[-800:]}")
                continue
            summary = json.loads((Path(tmp) / f"v{index}" / "summary.json").read_text())
            said = []
            for row in summary["rows"]:
                if row.get("verdict") in (None, "baseline"):
                    continue
                low, high = row["efficiency_low"], row["efficiency_high"]
                verdicts[row["nodes"]].append(row["verdict"])
                widths[row["nodes"]].append(high - low)
                said.append(
                    f"{row['nodes']} nodes: {row['verdict']} {row['efficiency'] * 100:.1f}% "
                    f"[{low * 100:.1f}, {high * 100:.1f}]"
                )
            print(f"run {index}: {'; '.join(said)} ({walls[-1]:.0f} s)")
    for nodes in sorted(verdicts):
        said = verdicts[nodes]
        reached = sum(verdict != "inconclusive" for verdict in said)
        counts = {v: said.count(v) for v in sorted(set(said))}
        print(
            f"{nodes} nodes: a verdict in {reached} of {len(said)} runs {counts}; interval width "
            f"median {statistics.median(widths[nodes]) * 100:.1f} points (min "
            f"{min(widths[nodes]) * 100:.1f}, max {max(widths[nodes]) * 100:.1f})"
        )
    print(f"wall time per run: median {statistics.median(walls):.0f} s")


if __name__ == "__main__":
    main()
