"""What echoing a program's output costs the program: the same `dtrun bench` launch with its
node lines on the console (E) and with --quiet (Q).

The program (written here) takes about --step-ms a step (a sleep and an optimizer step on a
small model) and prints --line-chars-character lines at --rate bytes a second (1 MB/s: 100
lines of 200 characters a 20 ms step). One embedded node (127.0.0.2), one process, --port
29871; dtrun's stdout is a pipe read by this script, as in a CI log. The figure is the median
step time dtrun measured (result.json), E over Q: what dtrun's own console adds to the timing
it reports. Runs E and Q alternately (E Q, then Q E, ...) after one warm-up of each; prints
each pair's ratio and their median, min and max. Target: ratio <= 1.05.

--code DIR times another checkout of dtrun (its PYTHONPATH), to compare before and after.

    .venv/bin/python benchmarks/echo_cost.py [--rounds 5] [--steps 60] [--code DIR]
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))

from dtrun.report.results import TrainResult, parse_program_result  # noqa: E402
from dtrun.report.stats import median_step  # noqa: E402

PROGRAM = """
import sys, time, torch
steps, lines, chars = int(sys.argv[1]), int(sys.argv[3]), int(sys.argv[4])
step_s = float(sys.argv[2])
model = torch.nn.Linear(64, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    model(torch.randn(16, 64)).square().mean().backward()
    time.sleep(step_s)
    optimizer.step()
    optimizer.zero_grad()
    for i in range(lines):
        head = f"step {step} line {i} loss 0.{step * 7919 % 10000:04d} "
        print(head + "x" * (chars - len(head)))
    sys.stdout.flush()
"""


def launch(args: argparse.Namespace, quiet: bool, workdir: Path, run_id: str) -> float:
    """One launch; the median step time dtrun measured, in seconds."""
    workdir.mkdir()
    program = workdir / "printer.py"
    program.write_text(PROGRAM)
    lines = max(1, round(args.rate * args.step_ms / 1000 / args.line_chars))
    command = [
        str(BIN / "dtrun"), "bench", "--nodes", "1", "--repeat", "1", "--warmup", "5",
        "--port", str(args.port), "--output", str(workdir), "--run-id", run_id,
        "--no-health-gate", *(["--quiet"] if quiet else []),
        "--", "python", str(program), str(args.steps), str(args.step_ms / 1000), str(lines),
        str(args.line_chars),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(args.code), OMP_NUM_THREADS="1")
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"dtrun failed ({done.returncode}): {done.stderr.decode()[-3000:]}")
    shown = done.stdout.count(b"[node-0] step ")
    if not quiet and shown == 0:
        raise SystemExit("the echoed launch showed no line of the program")
    data = json.loads((workdir / run_id / "n1" / "r0" / "result.json").read_text())
    result = parse_program_result(data, run_id)
    if not isinstance(result, TrainResult):
        raise SystemExit(f"{run_id}: no step times in its result.json")
    return median_step(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="counted E/Q pairs")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-ms", type=float, default=20.0, help="the program's own step")
    parser.add_argument("--rate", type=float, default=1e6, help="bytes printed a second")
    parser.add_argument("--line-chars", type=int, default=200)
    parser.add_argument("--port", type=int, default=29871)
    parser.add_argument("--code", type=Path, default=REPO, help="the dtrun checkout timed")
    args = parser.parse_args()

    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; dtrun from {args.code}"
    )
    print(
        f"one launch: 1 embedded node, {args.steps} steps of {args.step_ms:.0f} ms, printing "
        f"{args.rate / 1e6:.2f} MB/s in {args.line_chars}-character lines"
    )
    pairs: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-echo-") as tmp:
        for i in range(args.rounds + 1):
            order = (False, True) if i % 2 == 0 else (True, False)  # neither always first
            timed = {
                quiet: launch(args, quiet, Path(tmp) / f"{i}-{int(quiet)}", f"r{i}q{int(quiet)}")
                for quiet in order
            }
            echoed, quiet = timed[False], timed[True]
            label = "warm-up" if i == 0 else f"round {i}"
            print(
                f"{label:>8}: echoed {echoed * 1000:7.1f} ms   --quiet {quiet * 1000:7.1f} ms"
                f"   ratio {echoed / quiet:.3f}"
            )
            if i:
                pairs.append((echoed, quiet))
    ratios = [a / b for a, b in pairs]
    print(
        f"median step: echoed {statistics.median(a for a, _ in pairs) * 1000:.1f} ms, --quiet "
        f"{statistics.median(b for _, b in pairs) * 1000:.1f} ms, ratio "
        f"{statistics.median(ratios):.3f} (best {min(ratios):.3f}, worst {max(ratios):.3f}, "
        f"{len(ratios)} pairs); target <= 1.05"
    )


if __name__ == "__main__":
    main()
