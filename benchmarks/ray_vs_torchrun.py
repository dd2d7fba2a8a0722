"""One 2-node point through `dtrun bench --ray`, against the same training started by two bare
torchrun commands (issue 39: ratio target <= 1.3).

The cluster is the Ray tests' real one (tests/raycluster.py: a head on 127.0.0.2 and a second
raylet on 127.0.0.3, one CPU each), started once before the rounds, as a user's Ray cluster
is up before dtrun runs. Baseline (B): two torchrun commands as typed by hand on 127.0.0.2 and
127.0.0.3 (benchmarks/overhead_vs_bare_torchrun.py's), timed until both exit. Candidate (A):
`dtrun bench --ray HEAD:PORT --nodes 2 --launcher L` with the same workload (--no-busbw,
--no-health-gate: measurement the bare commands do not do), timed from start to exit: it joins
the cluster (one Ray job), places the launch's placement group, starts an actor per node, runs
the scripts, removes the group and writes the report. A and B alternate after one warm-up each.
Run it in a network namespace of its own:

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python benchmarks/ray_vs_torchrun.py'
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
BIN = Path(sys.executable).parent

from overhead_vs_bare_torchrun import bare  # noqa: E402  (beside this file)

from tests.raycluster import ray_cluster_up  # noqa: E402


def dtrun(address: str, launcher: str, steps: int, warmup: int, port: int, run: str,
          workdir: Path, env: dict[str, str]) -> float:  # fmt: skip
    command = [
        str(BIN / "dtrun"), "bench", "--ray", address, "--launcher", launcher, "--nodes", "2",
        "--steps", str(steps), "--warmup", str(warmup), "--repeat", "1", "--port", str(port),
        "--output", str(workdir), "--run-id", run, "--no-busbw", "--no-health-gate", "--quiet",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not (workdir / run / "report.md").is_file():
        raise SystemExit(f"dtrun failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="counted A/B pairs")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--launcher", default="torchrun", help="torchrun or torchtrainer")
    parser.add_argument("--port", type=int, default=29800)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load before: {Path('/proc/loadavg').read_text().strip()}"
    )
    print(f"one point: 2 Ray nodes x 1 process, {args.steps} steps ({args.warmup} warm-up), "
          f"--launcher {args.launcher}")  # fmt: skip
    pairs: list[tuple[float, float]] = []
    with ray_cluster_up() as cluster, tempfile.TemporaryDirectory(prefix="dtrun-ray-") as tmp:
        for i in range(args.rounds + 1):
            a_dir, b_dir = Path(tmp) / f"a{i}", Path(tmp) / f"b{i}"
            a_dir.mkdir()
            b_dir.mkdir()
            a = dtrun(cluster.address, args.launcher, args.steps, args.warmup,
                      args.port + 20 * i, f"a{i}", a_dir, cluster.env())  # fmt: skip
            b = bare(args.steps, args.warmup, args.port + 20 * i + 10, f"b{i}", b_dir)
            label = "warm-up" if i == 0 else f"round {i}"
            load = Path("/proc/loadavg").read_text().split()[0]
            print(f"{label:>8}: dtrun --ray {a:6.2f} s   bare torchrun {b:6.2f} s   "
                  f"ratio {a / b:.3f}   load {load}", flush=True)  # fmt: skip
            if i:
                pairs.append((a, b))
    ratios = [a / b for a, b in pairs]
    print(
        f"median: dtrun --ray {statistics.median(a for a, _ in pairs):.2f} s, bare torchrun "
        f"{statistics.median(b for _, b in pairs):.2f} s, ratio {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); target <= 1.3 (issue 39); load "
        f"after: {Path('/proc/loadavg').read_text().strip()}"
    )


if __name__ == "__main__":
    main()
