"""One 2-node point through `dtrun bench --ray`, against the same training started by two bare
torchrun commands (issue 39: ratio target <= 1.3).

The cluster is the Ray tests' real one (tests/raycluster.py: a head on 127.0.0.2 and a second
raylet on 127.0.0.3, one CPU each), started once before the rounds, as a user's Ray cluster
is up before dtrun runs. Baseline (B): two torchrun commands as typed by hand on 127.0.0.2 and
127.0.0.3 (benchmarks/overhead_vs_bare_torchrun.py's), timed until both exit. Candidate (A):
`dtrun bench --ray HEAD:PORT --nodes 2 --launcher L` with the same workload (--no-busbw,
--no-health-gate: measurement the bare commands do not do), timed from start to exit: it joins
the cluster (one Ray job), places the launch's placement group, starts an actor per node, runs
the scripts, removes the group and writes the report. Also timed, to tell Ray's part from
dtrun's own: (C) the same `dtrun bench` on the embedded cluster (no --ray). A, B and C alternate
after one warm-up each. For A and C also: the time to the launch's end (runs.json written), which
leaves out the report dtrun writes after it.
Run it in a network namespace of its own:

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python benchmarks/ray_vs_torchrun.py'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
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


def dtrun(address: str | None, launcher: str, steps: int, warmup: int, port: int, run: str,
          workdir: Path, env: dict[str, str],
          trace: bool = False) -> tuple[float, float]:  # fmt: skip
    """(the whole command's wall time, the time until its launch ended: runs.json written).
    ``trace``: run through benchmarks/ray_trace.py, which writes ``trace.json`` in workdir."""
    where = ["--ray", address] if address else []
    exe = ([sys.executable, str(REPO / "benchmarks" / "ray_trace.py"), str(workdir / "trace.json")]
           if trace else [str(BIN / "dtrun")])  # fmt: skip
    command = [
        *exe, "bench", *where, "--launcher", launcher, "--nodes", "2",
        "--steps", str(steps), "--warmup", str(warmup), "--repeat", "1", "--port", str(port),
        "--output", str(workdir), "--run-id", run, "--no-busbw", "--no-health-gate", "--quiet",
    ]  # fmt: skip
    start, wall = time.perf_counter(), time.time()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not (workdir / run / "report.md").is_file():
        raise SystemExit(f"dtrun failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
    return elapsed, (workdir / run / "runs.json").stat().st_mtime - wall


def phases(trace: Path) -> str:
    """Each mark of a trace (benchmarks/ray_trace.py) with the seconds since the one before."""
    marks = json.loads(trace.read_text())
    lines, last = [], 0.0
    for what, at in marks:
        lines.append(f"    {at:7.3f} s  (+{at - last:6.3f})  {what}")
        last = at
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="counted A/B pairs")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--launcher", default="torchrun", help="torchrun or torchtrainer")
    parser.add_argument("--port", type=int, default=29800)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="time A's phases (benchmarks/ray_trace.py) and print each round's",
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load before: {Path('/proc/loadavg').read_text().strip()}"
    )
    print(f"one point: 2 Ray nodes x 1 process, {args.steps} steps ({args.warmup} warm-up), "
          f"--launcher {args.launcher}")  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster is stopped below
    rows: list[tuple[float, float, float, float, float]] = []
    with ray_cluster_up() as cluster, tempfile.TemporaryDirectory(prefix="dtrun-ray-") as tmp:
        for i in range(args.rounds + 1):
            dirs = [Path(tmp) / f"{kind}{i}" for kind in "abc"]
            for folder in dirs:
                folder.mkdir()
            port = args.port + 30 * i
            a, a_launch = dtrun(cluster.address, args.launcher, args.steps, args.warmup, port,
                                f"a{i}", dirs[0], cluster.env(), args.trace)  # fmt: skip
            b = bare(args.steps, args.warmup, port + 10, f"b{i}", dirs[1])
            c, c_launch = dtrun(None, "torchrun", args.steps, args.warmup, port + 20, f"c{i}",
                                dirs[2], cluster.env())  # fmt: skip
            label = "warm-up" if i == 0 else f"round {i}"
            load = Path("/proc/loadavg").read_text().split()[0]
            print(f"{label:>8}: dtrun --ray {a:6.2f} s (launch ended {a_launch:6.2f} s)   bare "
                  f"torchrun {b:6.2f} s   embedded dtrun {c:6.2f} s (launch ended "
                  f"{c_launch:6.2f} s)   ratio {a / b:.3f}, to the launch's end "
                  f"{a_launch / b:.3f} (embedded {c / b:.3f}, {c_launch / b:.3f})   load {load}",
                  flush=True)  # fmt: skip
            if args.trace:
                print(phases(dirs[0] / "trace.json"), flush=True)
            if i:
                rows.append((a, b, c, a_launch, c_launch))

    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    print(
        "median ratios over bare torchrun (min-max): dtrun --ray "
        f"{median([r[0] / r[1] for r in rows])}, "
        f"to its launch's end {median([r[3] / r[1] for r in rows])}; embedded dtrun "
        f"{median([r[2] / r[1] for r in rows])}, to its launch's end "
        f"{median([r[4] / r[1] for r in rows])}; target <= 1.3 (issue 39); load after: "
        f"{Path('/proc/loadavg').read_text().strip()}"
    )


if __name__ == "__main__":
    main()
