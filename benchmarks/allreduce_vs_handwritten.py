"""dtrun's all-reduce workload against a minimal hand-written torch.distributed timing loop.

Baseline (B): the loop an engineer writes in five minutes: init gloo, for each size a float32
tensor, a few warm-up `dist.all_reduce`, a barrier, then `iters` timed in-place all-reduces;
busbw = size / t * 2(n-1)/n. Launched by two bare `torchrun` commands with a c10d rendezvous on
127.0.0.2 and 127.0.0.3, one process each. Candidate (A): `dtrun bench --workload allreduce
--nodes 2 -p 1` with the same sizes and iteration counts on the embedded cluster (the same two
loopback nodes), its in-place busbw read from the saved result.

Runs A and B alternately (A B A B ...) after one warm-up of each, and prints, per size, the
median busbw of each and their ratio A/B, then the geometric mean of the per-size ratios.
Target from issue #6: ratio >= 0.95 (dtrun measures no less bandwidth than the hand loop).

    .venv/bin/python benchmarks/allreduce_vs_handwritten.py [--rounds 3] [--sizes 64K:16M]
"""

from __future__ import annotations

import argparse
import json
import math
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

from dtrun.workloads.sizes import format_size, message_sizes  # noqa: E402

HAND_WRITTEN = """\
import json, sys, time
import torch
import torch.distributed as dist

sizes, warmup, iters = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
n = dist.get_world_size()
out = {}
for size in sizes:
    x = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(x)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    t = (time.perf_counter() - start) / iters
    out[size] = size / 1e9 / t * 2 * (n - 1) / n
if dist.get_rank() == 0:
    print("BUSBW " + json.dumps(out))
dist.destroy_process_group()
"""


Busbw = dict[int, float]  # message size in bytes -> busbw, GB/s


def bare(sizes: list[int], warmup: int, iters: int, port: int, run: str, work: Path) -> Busbw:
    """Two torchrun commands, as typed by hand, running the hand-written loop."""
    script = work / "allreduce_loop.py"
    script.write_text(HAND_WRITTEN)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    common = [
        str(BIN / "torchrun"), "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.2:{port}", f"--rdzv-id={run}", "--max-restarts=0",
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            [
                *common,
                f"--rdzv-conf=is_host={int(i == 0)}",
                f"--local-addr=127.0.0.{i + 2}",
                str(script),
                json.dumps(sizes),
                str(warmup),
                str(iters),
            ],
            env=env,
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [proc.communicate()[0] for proc in procs]
    codes = [proc.returncode for proc in procs]
    lines = [line for line in outputs[0].splitlines() if "BUSBW " in line]
    if codes != [0, 0] or not lines:
        raise SystemExit(f"hand-written loop failed: exit codes {codes}\n{outputs[0][-3000:]}")
    found = json.loads(lines[-1].split("BUSBW ", 1)[1])
    return {int(size): busbw for size, busbw in found.items()}


def dtrun(spec: str, warmup: int, iters: int, port: int, run: str, work: Path) -> Busbw:
    command = [
        str(BIN / "dtrun"), "bench", "--workload", "allreduce", "--nodes", "2", "-p", "1",
        "--repeat", "1", "--sizes", spec, "--ar-warmup", str(warmup), "--ar-iters", str(iters),
        "--port", str(port), "--output", str(work), "--run-id", run, "--quiet",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    result_file = work / run / "n2" / "r0" / "result.json"
    if done.returncode != 0 or not result_file.is_file():
        raise SystemExit(f"dtrun failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(result_file.read_text())
    return {row["size"]: row["in_place"]["busbw"] for row in result["rows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="counted A/B pairs")
    parser.add_argument("--sizes", default="64K:16M")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--port", type=int, default=29720)
    args = parser.parse_args()
    sizes = message_sizes(args.sizes)

    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"2 embedded nodes x 1 process, gloo, float32, sizes {args.sizes}, "
        f"{args.warmup} warm-up + {args.iters} timed all-reduces per size"
    )
    a_runs: list[Busbw] = []
    b_runs: list[Busbw] = []
    with tempfile.TemporaryDirectory(prefix="dtrun-bench-") as tmp:
        for i in range(args.rounds + 1):
            a_dir, b_dir = Path(tmp) / f"a{i}", Path(tmp) / f"b{i}"
            a_dir.mkdir()
            b_dir.mkdir()
            a = dtrun(args.sizes, args.warmup, args.iters, args.port, f"a{i}", a_dir)
            b = bare(sizes, args.warmup, args.iters, args.port + 10, f"b{i}", b_dir)
            label = "warm-up" if i == 0 else f"round {i}"
            mean = math.exp(statistics.fmean(math.log(a[s] / b[s]) for s in sizes))
            print(f"{label:>8}: geometric-mean busbw ratio dtrun/hand-written {mean:.3f}")
            if i:
                a_runs.append(a)
                b_runs.append(b)
    print(f"{'size':>6}  {'dtrun GB/s':>10}  {'hand GB/s':>10}  ratio")
    ratios = []
    for size in sizes:
        a_med = statistics.median(run[size] for run in a_runs)
        b_med = statistics.median(run[size] for run in b_runs)
        ratios.append(a_med / b_med)
        print(f"{format_size(size):>6}  {a_med:10.3f}  {b_med:10.3f}  {a_med / b_med:.3f}")
    overall = math.exp(statistics.fmean(math.log(r) for r in ratios))
    large = [r for size, r in zip(sizes, ratios, strict=True) if size >= 1 << 20]
    print(
        f"busbw ratio dtrun/hand-written, geometric mean over sizes of per-size medians: "
        f"{overall:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); target >= 0.95"
    )
    if large and len(large) < len(ratios):
        print(
            "  over the sizes from 1M up only: "
            f"{math.exp(statistics.fmean(math.log(r) for r in large)):.3f}"
        )


if __name__ == "__main__":
    main()
