"""dtrun's overhead on one embedded 2-node bench point, against two bare torchrun commands.

Baseline (B): what an engineer types by hand in two terminals: two `torchrun` commands with a
c10d rendezvous on 127.0.0.2 and 127.0.0.3, running the same training workload with the same
arguments and thread settings. Candidate (A): `dtrun bench --nodes 2` with the same workload,
which plans, renders, launches, streams, collects, and writes the report and plots. dtrun
runs with --no-busbw: the all-reduce probe after training is extra measurement the bare
commands do not do, not overhead.

dtrun's nodes run torchrun's own entry point and leave as soon as it returns
(runner/plan/launchers/torchrun.py QUICK_EXIT), which skips the 0.6-0.8 s interpreter teardown
that the bare torchrun commands pay. So each round also times the bare commands with that same
exit (Q): A/Q is dtrun's own cost, apart from that saving.

Runs A, B and Q in turn after one warm-up of each, and prints the wall times, the ratio A/B of
each round and their median, and the median of A/Q. Targets: issue #2 median ratio <= 1.10; issue
#11 (after the redesign) <= 1.06. ``--dtrun`` times another dtrun executable (another checkout's,
for a before/after comparison in one sitting); ``--vs`` times a second one in the same rounds
(A, A', B each round), and prints both ratios to the same bare commands.

    .venv/bin/python benchmarks/overhead_vs_bare_torchrun.py [--rounds 5] [--dtrun PATH]
        [--vs PATH]
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
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))
from dtrun.plan.launchers.torchrun import QUICK_EXIT  # noqa: E402


def workload_args(steps: int, warmup: int, out: Path) -> list[str]:
    return [
        "-m", "dtrun.workloads.train", "--steps", str(steps), "--warmup", str(warmup),
        "--batch", "8", "--seq-len", "64", "--layers", "2", "--d-model", "128", "--heads", "4",
        "--vocab", "1024", "--device", "cpu", "--mode", "weak", "--timeout", "600",
        "--out", str(out),
    ]  # fmt: skip


def bare(steps: int, warmup: int, port: int, run: str, workdir: Path, quick: bool = False) -> float:
    """Two torchrun commands, as typed by hand, started together; wall time until both exit.
    ``quick``: torchrun's entry point with dtrun's quick exit instead of the torchrun script."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    torchrun = [str(BIN / "python"), "-c", QUICK_EXIT] if quick else [str(BIN / "torchrun")]
    common = [
        *torchrun, "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.2:{port}", f"--rdzv-id={run}", "--max-restarts=0",
    ]  # fmt: skip
    log = (workdir / "bare.log").open("wb")
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                *common,
                f"--rdzv-conf=is_host={int(i == 0)}",
                f"--local-addr=127.0.0.{i + 2}",
                *workload_args(steps, warmup, workdir / "result.json"),
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
    log.close()
    if codes != [0, 0] or not (workdir / "result.json").is_file():
        tail = (workdir / "bare.log").read_text()[-3000:]
        raise SystemExit(f"bare torchrun failed: exit codes {codes}\n{tail}")
    return elapsed


def quick_exit_line(pairs: list[tuple[float, float]], quick: list[float]) -> str:
    """dtrun's wall times (A) and the bare torchrun ones (B) of ``pairs`` against the bare
    commands with the quick exit (``quick``, the same rounds): medians, A/Q with min and max."""
    own = [a / q for (a, _), q in zip(pairs, quick, strict=True)]
    teardown = statistics.median(b / q for (_, b), q in zip(pairs, quick, strict=True))
    return (
        f"dtrun / bare with the same quick exit: median {statistics.median(own):.3f} "
        f"(min {min(own):.3f}, max {max(own):.3f}); bare torchrun / bare with the quick exit: "
        f"median {teardown:.3f}"
    )


def dtrun(steps: int, warmup: int, port: int, run: str, workdir: Path, exe: str) -> float:
    command = [
        exe, "bench", "--nodes", "2", "--steps", str(steps),
        "--warmup", str(warmup), "--repeat", "1", "--port", str(port), "--output", str(workdir),
        "--run-id", run, "--quiet", "--no-busbw",  # the bare commands time no all-reduce probe
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not (workdir / run / "report.md").is_file():
        raise SystemExit(f"dtrun failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="counted A/B pairs")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29700)
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="the dtrun executable to time")
    parser.add_argument("--vs", help="a second dtrun executable, timed in the same rounds")
    args = parser.parse_args()

    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"one point: 2 embedded nodes x 1 process, {args.steps} steps ({args.warmup} warm-up)")
    print(f"dtrun: {args.dtrun}" + (f"; vs: {args.vs}" if args.vs else ""))
    pairs: list[tuple[float, float]] = []
    second: list[float] = []
    quick: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-bench-") as tmp:
        for i in range(args.rounds + 1):
            a_dir = Path(tmp) / f"a{i}"
            b_dir = Path(tmp) / f"b{i}"
            a_dir.mkdir()
            b_dir.mkdir()
            a = dtrun(args.steps, args.warmup, args.port, f"a{i}", a_dir, args.dtrun)
            vs = None
            if args.vs:
                (Path(tmp) / f"v{i}").mkdir()
                vs = dtrun(args.steps, args.warmup, args.port + 20, f"v{i}", Path(tmp) / f"v{i}",
                           args.vs)  # fmt: skip
            b = bare(args.steps, args.warmup, args.port + 10, f"b{i}", b_dir)
            (Path(tmp) / f"q{i}").mkdir()
            q = bare(args.steps, args.warmup, args.port + 30, f"q{i}", Path(tmp) / f"q{i}", True)
            label = "warm-up" if i == 0 else f"round {i}"
            also = f"   vs {vs:6.2f} s ratio {vs / b:.3f}" if vs is not None else ""
            print(
                f"{label:>8}: dtrun {a:6.2f} s   bare torchrun {b:6.2f} s   ratio {a / b:.3f}"
                f"   bare, quick exit {q:6.2f} s   ratio {a / q:.3f}{also}"
            )
            if i:
                pairs.append((a, b))
                quick.append(q)
                if vs is not None:
                    second.append(vs)
    ratios = [a / b for a, b in pairs]
    print(
        f"median: dtrun {statistics.median(a for a, _ in pairs):.2f} s, "
        f"bare {statistics.median(b for _, b in pairs):.2f} s, "
        f"ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
        "target <= 1.05 (issue 41)"
    )
    print(quick_exit_line(pairs, quick))
    if second:
        vs_ratios = [vs / b for vs, (_, b) in zip(second, pairs, strict=True)]
        print(
            f"vs: {statistics.median(second):.2f} s, ratio {statistics.median(vs_ratios):.3f} "
            f"(min {min(vs_ratios):.3f}, max {max(vs_ratios):.3f}); vs / dtrun, median "
            f"{statistics.median(v / a for v, (a, _) in zip(second, pairs, strict=True)):.3f}"
        )


if __name__ == "__main__":
    main()
