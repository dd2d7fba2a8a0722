"""A pipeline's step time with balanced stages, against the even split, on one large-vocabulary GPT.

Both run the training workload's pipeline strategy directly under `torchrun --standalone` (a
free port each time, nothing of the embedded cluster), with the same model, batch and schedule;
only `--stage-split` differs. Candidate (A): `balanced`; baseline (B): `even`. After one warm-up
pair, A and B alternate (A B A B ...), and each pair's ratio of median step times A/B is printed,
then the median ratio and its spread (min, max). Beside it: the slowest stage's predicted FLOPs
(counted, runner/workloads/stagecost.py) and its measured compute alone (each stage's forward and
backward over one step's micro-batches, timed after training), as ratios A/B.

The default model: 12 blocks of d = 128 and a 16,000-token vocabulary, whose LM head counts as
9.6 blocks in FLOPs: even puts 6 blocks and the head on the last stage; balanced splits by the
pieces' times measured at the start of each launch (printed per round: [9, 3] or [10, 2] on a
2-core CPU, where the head takes about 7 blocks' time). Lower is better.

    .venv/bin/python benchmarks/stage_split.py [--rounds 7] [--nproc 2] [--device cpu]
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))

from dtrun.workloads.stagecost import Shape, split, stage_costs  # noqa: E402


def launch(split_kind: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One pipeline launch; its result.json."""
    command = [
        str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(args.nproc),
        "-m", "dtrun.workloads.train", "--strategy", "pipeline", "--schedule", args.schedule,
        "--micro-batches", str(args.micro_batches), "--stage-split", split_kind,
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
        "--seq-len", str(args.seq_len), "--layers", str(args.layers),
        "--d-model", str(args.d_model), "--heads", str(args.heads), "--vocab", str(args.vocab),
        "--device", args.device, "--probe-steps", "5", "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(args.threads))
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{split_kind} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def predicted_ratio(args: argparse.Namespace) -> tuple[float, list[int], list[int]]:
    shape = Shape(args.layers, args.d_model, args.seq_len, args.vocab)
    stages = args.nproc * (2 if args.schedule == "interleaved-1f1b" else 1)
    even, balanced = split("even", shape, stages), split("balanced", shape, stages)
    slowest = [max(c.flops for c in stage_costs(shape, b)) for b in (balanced, even)]
    return slowest[0] / slowest[1], balanced, even


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="counted A/B pairs")
    parser.add_argument("--nproc", type=int, default=2, help="pipeline ranks (one pipeline)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per rank")
    parser.add_argument("--schedule", default="1f1b")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=16_000)
    args = parser.parse_args()

    predicted, balanced, even = predicted_ratio(args)
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"model: {args.layers} layers, d {args.d_model}, vocab {args.vocab}, sequence "
        f"{args.seq_len}; {args.nproc} ranks, {args.schedule}, {args.micro_batches} micro-batches "
        f"of {args.batch // args.micro_batches}; {args.steps} steps ({args.warmup} warm-up)"
    )
    print(f"blocks per stage, counted: balanced {balanced}, even {even} (balanced: measured below)")
    steps: list[float] = []
    stages: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-stage-split-") as tmp:
        for i in range(args.rounds + 1):
            a = launch("balanced", args, Path(tmp) / f"a{i}.json")
            b = launch("even", args, Path(tmp) / f"b{i}.json")
            step = a["step_time_s"]["p50"] / b["step_time_s"]["p50"]
            stage = max(a["stage_time_s"]) / max(b["stage_time_s"])
            label = "warm-up" if i == 0 else f"round {i}"
            print(
                f"{label:>8}: balanced {a['stage_blocks']}: step p50 balanced "
                f"{a['step_time_s']['p50'] * 1000:7.1f} ms   even "
                f"{b['step_time_s']['p50'] * 1000:7.1f} ms   ratio {step:.3f}   slowest stage "
                f"alone {max(a['stage_time_s']) * 1000:6.1f} / {max(b['stage_time_s']) * 1000:6.1f}"
                f" ms, ratio {stage:.3f}"
            )
            if i:
                steps.append(step)
                stages.append(stage)
    print(f"step time balanced/even: median {spread(steps)}")
    print(
        f"slowest stage alone, balanced/even: measured {spread(stages)}; "
        f"counted FLOPs of the counted split {predicted:.3f}"
    )


if __name__ == "__main__":
    main()
