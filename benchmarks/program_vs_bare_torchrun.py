"""A user-program point of `dtrun bench -- PROGRAM` against bare torchrun running the same program.

Baseline (B): two `torchrun` commands, as typed by hand, with a c10d rendezvous on 127.0.0.2 and
127.0.0.3, running tests/programs/ddp_loop.py. Candidate (A): `dtrun bench --nodes 2 --repeat 1
-- python tests/programs/ddp_loop.py` with the same arguments: it plans, checks the program is
on the nodes, renders, launches with the step hook on every process, collects the ranks' step
records, makes result.json, and writes the report and plots. Runs A and B alternately (A B A B
...) after one warm-up of each and prints each pair's wall times, their ratio, and the median
ratio with its min and max. Issue 41's target: median ratio <= 1.05.

dtrun's nodes run torchrun's own entry point and leave as soon as it returns
(runner/plan/launchers/torchrun.py QUICK_EXIT), which skips the interpreter teardown the bare
torchrun commands pay. Each round also times the bare commands with that same exit (Q) and
prints the median of A/Q: dtrun's own cost, apart from that saving.

    .venv/bin/python benchmarks/program_vs_bare_torchrun.py [--rounds 9] [--steps 40]
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
PROGRAM = REPO / "tests" / "programs" / "ddp_loop.py"
sys.path.insert(0, str(REPO))
from overhead_vs_bare_torchrun import quick_exit_line  # noqa: E402  (beside this file)

from dtrun.plan.launchers.torchrun import QUICK_EXIT  # noqa: E402


def program_args(steps: int, sleep: float) -> list[str]:
    return [str(PROGRAM), "--steps", str(steps), "--sleep", str(sleep)]


def bare(
    steps: int, sleep: float, port: int, run: str, workdir: Path, quick: bool = False
) -> float:
    """Two torchrun commands started together; wall time until both exit. ``quick``: torchrun's
    entry point with dtrun's quick exit instead of the torchrun script."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    torchrun = [str(BIN / "python"), "-c", QUICK_EXIT] if quick else [str(BIN / "torchrun")]
    common = [
        *torchrun, "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.2:{port}", f"--rdzv-id={run}", "--max-restarts=0",
    ]  # fmt: skip
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                *common,
                f"--rdzv-conf=is_host={int(i == 0)}",
                f"--local-addr=127.0.0.{i + 2}",
                *program_args(steps, sleep),
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
    if codes != [0, 0]:
        raise SystemExit(f"bare torchrun failed: exit codes {codes}")
    return elapsed


def dtrun(steps: int, sleep: float, port: int, run: str, workdir: Path, exe: str) -> float:
    command = [
        exe, "bench", "--nodes", "2", "--repeat", "1", "--warmup", "2", "--port", str(port),
        "--output", str(workdir), "--run-id", run, "--quiet",
        "--", "python", *program_args(steps, sleep),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not (workdir / run / "report.md").is_file():
        raise SystemExit(f"dtrun failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="counted A/B pairs")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sleep", type=float, default=0.05, help="the program's extra s/step")
    parser.add_argument("--port", type=int, default=29750)
    parser.add_argument("--dtrun", default=str(BIN / "dtrun"), help="the dtrun executable to time")
    args = parser.parse_args()

    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"one point: 2 embedded nodes x 1 process, ddp_loop.py --steps {args.steps}")
    pairs: list[tuple[float, float]] = []
    quick: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-bench-") as tmp:
        for i in range(args.rounds + 1):
            a_dir, b_dir = Path(tmp) / f"a{i}", Path(tmp) / f"b{i}"
            a_dir.mkdir()
            b_dir.mkdir()
            a = dtrun(args.steps, args.sleep, args.port, f"a{i}", a_dir, args.dtrun)
            b = bare(args.steps, args.sleep, args.port + 10, f"b{i}", b_dir)
            (Path(tmp) / f"q{i}").mkdir()
            q = bare(args.steps, args.sleep, args.port + 20, f"q{i}", Path(tmp) / f"q{i}", True)
            label = "warm-up" if i == 0 else f"round {i}"
            print(
                f"{label:>8}: dtrun {a:6.2f} s   bare torchrun {b:6.2f} s   ratio {a / b:.3f}"
                f"   bare, quick exit {q:6.2f} s   ratio {a / q:.3f}"
            )
            if i:
                pairs.append((a, b))
                quick.append(q)
    ratios = [a / b for a, b in pairs]
    print(
        f"median: dtrun {statistics.median(a for a, _ in pairs):.2f} s, "
        f"bare {statistics.median(b for _, b in pairs):.2f} s, "
        f"ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
        "target <= 1.05 (issue 41)"
    )
    print(quick_exit_line(pairs, quick))


if __name__ == "__main__":
    main()
