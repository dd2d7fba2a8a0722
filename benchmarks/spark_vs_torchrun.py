"""A TorchDistributor point on a local-cluster against torchrun's, in one sitting: one launch and a
point of 5 (issue 41: at most 2x for one launch, at most 1.3x for a point of 5).

Each round times, for each point size R (launches, `--repeat R`):

- spark: `dtrun bench --spark 'local-cluster[2,1,1024]' --launcher torchdistributor`, 2 nodes;
  its whole wall time, the Spark application's start and stop included (one per sweep);
- torchrun: the same `dtrun bench` on the embedded cluster with `--launcher torchrun`, the
  baseline docs/benchmarks.md names ("dtrun's torchrun point");
- bare: R launches of two bare `torchrun` commands typed by hand (c10d rendezvous on 127.0.0.2
  and .3, the same workload and thread settings), one after the other
  (benchmarks/overhead_vs_bare_torchrun.py's baseline).

Every dtrun point runs the built-in training workload (20 steps, 5 warm-up by default) with
--no-health-gate and --no-busbw (the bare commands do neither). The ratios spark/torchrun and
spark/bare are taken within each round; their medians, minimum and maximum are printed with the
load average (/proc/loadavg) at each point. ``--vs DTRUN`` times another checkout's Spark point
in the same rounds (a before/after in one sitting).

Run it in a network namespace of your own so the ports and loopback addresses clash with nobody:

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python benchmarks/spark_vs_torchrun.py \\
        --rounds 3'
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
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SPARK = ("--spark", "local-cluster[2,1,1024]", "--launcher", "torchdistributor")
TORCHRUN = ("--launcher", "torchrun")


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def workload_args(steps: int, warmup: int, out: Path) -> list[str]:
    return [
        "-m", "dtrun.workloads.train", "--steps", str(steps), "--warmup", str(warmup),
        "--batch", "8", "--seq-len", "64", "--layers", "2", "--d-model", "128", "--heads", "4",
        "--vocab", "1024", "--device", "cpu", "--mode", "weak", "--timeout", "600",
        "--out", str(out),
    ]  # fmt: skip


def bare(args: argparse.Namespace, port: int, run: str, workdir: Path) -> float:
    """Two torchrun commands, as typed by hand, started together; wall time until both exit."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    common = [
        str(BIN / "torchrun"), "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.2:{port}", f"--rdzv-id={run}", "--max-restarts=0",
    ]  # fmt: skip
    workdir.mkdir(parents=True)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                *common,
                f"--rdzv-conf=is_host={int(i == 0)}",
                f"--local-addr=127.0.0.{i + 2}",
                *workload_args(args.steps, args.warmup, workdir / "result.json"),
            ],
            env=env,
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    codes = [proc.wait() for proc in procs]
    elapsed = time.perf_counter() - start
    if codes != [0, 0] or not (workdir / "result.json").is_file():
        raise SystemExit(f"bare torchrun failed: exit codes {codes}")
    return elapsed


def dtrun(
    exe: str, where: tuple[str, ...], repeat: int, args: argparse.Namespace, port: int, run: str,
    workdir: Path,
) -> float:  # fmt: skip
    command = [
        exe, "bench", "--nodes", "2", "--repeat", str(repeat), "--steps", str(args.steps),
        "--warmup", str(args.warmup), "--port", str(port), "--output", str(workdir),
        "--run-id", run, "--quiet", "--no-health-gate", "--no-busbw", *where,
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not (workdir / run / "report.md").is_file():
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): "
                         f"{done.stderr.decode()[-3000:]}")  # fmt: skip
    return elapsed


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="counted rounds")
    parser.add_argument("--warm-up", type=int, default=1, help="uncounted rounds first")
    parser.add_argument("--repeats", default="1,5", help="point sizes (launches), comma-separated")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29760)
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="the dtrun executable to time")
    parser.add_argument("--vs", help="another dtrun executable whose Spark point is timed too")
    args = parser.parse_args()
    repeats = [int(r) for r in args.repeats.split(",")]

    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"a point: 2 nodes x 1 process, {args.steps} steps ({args.warmup} warm-up) a launch")
    kinds: dict[str, Callable[[int, str, Path], float]] = {
        "spark": lambda r, run, d: dtrun(args.dtrun, SPARK, r, args, args.port, run, d),
        "torchrun": lambda r, run, d: dtrun(args.dtrun, TORCHRUN, r, args, args.port + 10, run, d),
        "bare": lambda r, run, d: sum(
            bare(args, args.port + 20, f"{run}-{i}", d / f"{run}-{i}") for i in range(r)
        ),
    }
    if args.vs:
        vs = args.vs
        kinds["vs"] = lambda r, run, d: dtrun(vs, SPARK, r, args, args.port + 30, run, d)
    walls: dict[tuple[str, int], list[float]] = {(kind, r): [] for kind in kinds for r in repeats}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-spark-bench-") as tmp:
        for round_ in range(args.warm_up + args.rounds):
            counted = round_ >= args.warm_up
            for r in repeats:
                line = []
                for kind, time_it in kinds.items():
                    run = f"{kind}-r{r}-{round_}"
                    before = load()
                    wall = time_it(r, run, Path(tmp))
                    loads.append(before)
                    line.append(f"{kind} {wall:6.1f} s (load {before:.1f})")
                    if counted:
                        walls[(kind, r)].append(wall)
                label = f"round {round_ - args.warm_up + 1}" if counted else "warm-up"
                print(f"{label:>8}, {r} launch(es): " + "   ".join(line), flush=True)

    print()
    print(f"load average (1 min) at the start of each point: {min(loads):.1f} to {max(loads):.1f}")
    for r in repeats:
        spark = walls[("spark", r)]
        for base in ("torchrun", "bare"):
            ratios = [s / b for s, b in zip(spark, walls[(base, r)], strict=True)]
            print(
                f"{r} launch(es): spark / {base:<8} {spread(ratios)}   "
                f"(median walls {statistics.median(spark):.1f} s / "
                f"{statistics.median(walls[(base, r)]):.1f} s, {len(ratios)} rounds)"
            )
        if args.vs:
            ratios = [v / b for v, b in zip(walls[("vs", r)], walls[("torchrun", r)], strict=True)]
            print(f"{r} launch(es): vs    / torchrun {spread(ratios)}")
    print("targets (issue 41): spark / torchrun <= 2 for one launch, <= 1.3 for a point of 5")


if __name__ == "__main__":
    main()
