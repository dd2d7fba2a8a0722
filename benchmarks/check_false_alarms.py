"""How often `dtrun check` flags a clean cluster, and how long a check takes (docs/check.md).

Runs `dtrun check` on the embedded cluster COUNT times in a row at each node count and prints,
per node count: checks that flagged anything (a false alarm: nothing is wrong), checks whose
bisection found a slow group that changed nothing (a note), the seconds per check (median,
min-max) and the machine's 1-minute load average around each check (other work shares the
cores). Run it when the machine is quiet and when it is not; the lead's figure is "0 false
alarms in 20 checks in a row" (issue 37). Six nodes or more give the bisection two halves to
compare.

    .venv/bin/python benchmarks/check_false_alarms.py --nodes 2,4,6 --count 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DTRUN = [sys.executable, "-m", "dtrun.cli"]


def one(nodes: int, port: int, out: Path, run_id: str) -> tuple[float, list[str], int, int]:
    """Seconds, what it flagged, whether it failed, and its bisection groups found slow."""
    started = time.monotonic()
    done = subprocess.run(
        [*DTRUN, "check", "--local-nodes", str(nodes), "--port", str(port), "--json",
         "--output", str(out), "--run-id", run_id],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode not in (0, 5):
        return wall, [f"check failed (exit {done.returncode}): {done.stderr.strip()[-300:]}"], 1, 0
    data = json.loads(done.stdout)
    flagged = [f"{n['host']} {n['verdict']} {n['cause']}: {n['figures']['evidence']}"
               for n in data["nodes"] if n["verdict"] != "ok"]  # fmt: skip
    flagged += [f"link {link['a']}-{link['b']}" for link in data["links"]
                if link["verdict"] == "slow"]  # fmt: skip
    groups = [g for g in data.get("groups", []) if g["verdict"] == "slow"]
    if done.returncode == 5 and not flagged:  # a slow group at two levels running
        flagged += [f"group {g['hosts']}" for g in groups]
    return wall, flagged, 0, len(groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--port", type=int, default=31400)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="dtrun-check-bench-"))
    port = args.port
    for nodes in (int(n) for n in args.nodes.split(",")):
        walls, loads, alarms, errors, notes = [], [], 0, 0, 0
        for index in range(args.count):
            port += 2
            before = os.getloadavg()[0]
            wall, flagged, error, groups = one(nodes, port, out, f"n{nodes}-{index}")
            load = (before + os.getloadavg()[0]) / 2
            walls.append(wall)
            loads.append(load)
            errors += error
            alarms += bool(flagged) and not error
            notes += bool(groups) and not flagged
            print(f"{nodes} nodes, check {index + 1}: {wall:.0f} s, load {load:.1f}"
                  + (f", flagged: {flagged}" if flagged else "")
                  + (f", {groups} slow group(s) noted" if groups else ""), flush=True)  # fmt: skip
        print(
            f"== {nodes} nodes: {alarms} false alarms in {args.count - errors} checks "
            f"({errors} did not run; {notes} with a bisection note); "
            f"{statistics.median(walls):.0f} s per check ({min(walls):.0f}-{max(walls):.0f}); "
            f"load {statistics.median(loads):.1f} ({min(loads):.1f}-{max(loads):.1f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
