"""Wall time of one embedded 2-node bench point per launcher, against torchrun as the baseline.

Each launcher runs the same point through `dtrun bench --nodes 2 --launcher X` (the built-in
training workload, 20 steps with 5 warm-up by default): torchrun (c10d rendezvous, the baseline),
deepspeed (ZeRO 2, --no_ssh on each node), mpirun (OpenMPI with the local remote-shell agent),
horovodrun (training with Horovod's DistributedOptimizer) where Horovod is importable, and, where
pyspark is, the Spark launchers on `--spark 'local-cluster[2,1,1024]'` (two executor JVMs started
per launch): torchdistributor (TorchDistributor, DDP) and horovod-spark (horovod.spark.run,
Horovod). Every launch runs with --no-health-gate. After one warm-up round, the launchers run in
turn, round after round (torchrun, deepspeed, mpirun, torchrun, ...), and each round's wall times
and tokens/s are divided by that round's torchrun figures; the medians of those ratios are
printed. `--launchers a,b` runs a subset (torchrun is always the baseline). `--repeat N` makes
each point N launches (a default sweep runs 5 at each node count): the Spark launchers start one
Spark application per sweep (issue 29), so its start is paid once for the N launches.

DeepSpeed compiles a shared-memory op with g++ on its first launch on a machine (cached in
~/.cache/torch_extensions). That cost is measured apart: one launch with an empty
TORCH_EXTENSIONS_DIR, minus the median of the cached launches.

    .venv/bin/python benchmarks/launchers_vs_torchrun.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
BASELINE = "torchrun"


SPARK = ("--spark", "local-cluster[2,1,1024]")
EXTRA = {"torchdistributor": SPARK, "horovod-spark": SPARK}


def launchers(only: str | None) -> list[str]:
    names = [BASELINE, "deepspeed", "mpirun"]
    if importlib.util.find_spec("horovod") is not None:
        names.append("horovodrun")
    if importlib.util.find_spec("pyspark") is not None:
        names.append("torchdistributor")
        if "horovodrun" in names:
            names.append("horovod-spark")
    if only:
        names = [BASELINE, *(n for n in names if n in only.split(",") and n != BASELINE)]
    return names


def point(
    launcher: str, args: argparse.Namespace, port: int, workdir: Path, env: dict[str, str]
) -> tuple[float, float]:
    """(wall seconds of `dtrun bench` for one 2-node point, tokens/s it measured)."""
    run_id = f"{launcher}-{time.monotonic_ns()}"
    command = [
        str(BIN / "dtrun"), "bench", "--nodes", "2", "--launcher", launcher,
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--port", str(port),
        "--output", str(workdir), "--run-id", run_id, "--repeat", str(args.repeat), "--quiet",
        "--no-health-gate", *EXTRA.get(launcher, ()),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{launcher} failed ({done.returncode}): {done.stderr.decode()[-3000:]}")
    result = json.loads((workdir / run_id / "n2" / "r0" / "result.json").read_text())
    return elapsed, float(result["tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="counted rounds")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29720)
    parser.add_argument("--launchers", default=None, help="a subset, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="launches per point")
    args = parser.parse_args()

    names = launchers(args.launchers)
    ports = {name: args.port + 10 * i for i, name in enumerate(names)}
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"one point: 2 embedded nodes x 1 process, {args.repeat} launch(es) of {args.steps} steps "
        f"({args.warmup} warm-up); "
        f"launchers: {', '.join(names)}"
    )
    walls: dict[str, list[float]] = {name: [] for name in names}
    tokens: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    rate_ratios: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="dtrun-launchers-") as tmp:
        workdir = Path(tmp)
        env = dict(os.environ)
        for round_ in range(args.rounds + 1):
            times, rates = {}, {}
            for name in names:
                times[name], rates[name] = point(name, args, ports[name], workdir, env)
                if round_:
                    walls[name].append(times[name])
                    tokens[name].append(rates[name])
                    ratios[name].append(times[name] / times[BASELINE])
                    rate_ratios[name].append(rates[name] / rates[BASELINE])
            label = "warm-up" if round_ == 0 else f"round {round_}"
            print(f"{label:>8}: " + "   ".join(f"{n} {times[n]:6.2f} s" for n in names))

        cold = None
        if "deepspeed" in names:
            cold_env = dict(env, TORCH_EXTENSIONS_DIR=str(workdir / "empty-torch-extensions"))
            cold, _ = point("deepspeed", args, ports["deepspeed"], workdir, cold_env)

    print()
    print(f"{'launcher':<16} {'median wall':>11} {'wall / torchrun':>16} {'min-max':>13} "
          f"{'tokens/s':>9} {'tokens/s / torchrun':>20} {'min-max':>13}")  # fmt: skip
    for name in names:
        r, t = ratios[name], rate_ratios[name]
        print(
            f"{name:<16} {statistics.median(walls[name]):9.2f} s {statistics.median(r):16.3f} "
            f"{min(r):6.3f}-{max(r):.3f} {statistics.median(tokens[name]):9,.0f} "
            f"{statistics.median(t):20.3f} {min(t):6.3f}-{max(t):.3f}"
        )
    if cold is not None:
        warm = statistics.median(walls["deepspeed"])
        print(
            f"deepspeed first launch with an empty torch_extensions cache: {cold:.2f} s, "
            f"so its one-off op compile costs about {cold - warm:.1f} s"
        )


if __name__ == "__main__":
    main()
