"""How often the report's 95% efficiency interval covers a known true efficiency, and how often
its verdict is wrong: issue #29's measure ("verdicts that are right at few launches").

Simulates weak-scaling sweeps whose true efficiency is set exactly and runs each through the
report's own code (dtrun.report.metrics.scaling_rows, the function every report, summary.json
and `dtrun compare` take their rows from), not a reimplementation of it.

Each simulated sweep has the node counts of --nodes (default 1,2: a default bench here). A
launch at N nodes has a level drawn once per launch, lognormal with sigma LAUNCH_SIGMA (the
launch-to-launch noise of shared clouds and machines: 0, 0.02, 0.05, 0.10), and --steps step
times (default 50), each the point's true median step time x the level x a lognormal with a
step sigma drawn per sweep, uniform in 0.05-0.20; 2% of the steps are spikes, 2-6 times as
slow. Weak scaling: the true median step at N nodes is the baseline's over the true efficiency.
Three truths per setting: exactly on the target (0.9, the default), 10% above it (0.99) and 10%
below it (0.81).

Printed per launch-to-launch sigma and launch count (1, 2, 3, 5): the share of sweeps whose
interval at the largest node count covers the true efficiency (among those with an interval;
"-" when none has one), the share with no interval; with the truth on the target, the share
of "scales" and of "loses" (each should be at most about 2.5%); with the truth 10% above or
below, the wrong verdict's share and the right one's (how decisive it is).

    PYTHONPATH=. .venv/bin/python benchmarks/interval_coverage.py [--sweeps 200] [--seed 29]

With --until-decided: the rate of wrong verdicts of the fixed default (--repeat 5, one 95% look
after every launch) against `dtrun bench --until-decided` (--max-launches 6: looks after 2 to 6
launches, 99.67% to 98.33%; runner/report/sequential.py's own replay), with a known true
efficiency. Here each launch's step times are drawn from the step times a default `--nodes 1,2`
bench recorded on the embedded cluster (tests/data/step_times.json, each point's times over its
median): a smoothed bootstrap, one recorded time with replacement x a lognormal of Silverman's
bandwidth on the log scale (30 recorded times alone would make a launch's median take a handful
of values, and two launches' medians tie), scaled to the point's true median step and the
launch's level. Truths:
on the target, 5% and 10% above and below it. Printed per launch sigma and truth: wrong
verdicts (on the target: either), verdicts reached, node-launches (launches x nodes, the
node-seconds of launches of equal length) per sweep and per conclusive verdict.

    PYTHONPATH=. .venv/bin/python benchmarks/interval_coverage.py --until-decided --sweeps 2000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dtrun.report.metrics import ScalingRow, scaling_rows
from dtrun.report.results import TRAIN_SCHEMA, TrainResult, parse_train_result
from dtrun.report.sequential import sequential_rows
from dtrun.report.stats import Verdict
from dtrun.spec.request import DEFAULT_MAX_LAUNCHES, BenchSpec

TARGET = 0.9
TRUTHS = {"on": TARGET, "above": TARGET * 1.1, "below": TARGET * 0.9}
LAUNCH_SIGMAS = (0.0, 0.02, 0.05, 0.10)
LAUNCH_COUNTS = (1, 2, 3, 5)
BASE_STEP_S = 0.05  # the baseline's true median step time
SEQ, BATCH = 64, 8  # tokens per sample, samples per process


def template(world: int) -> TrainResult:
    """A parsed result of ``world`` processes: the simulated launches replace its step times."""
    step = [BASE_STEP_S] * 10
    data = {
        "schema": TRAIN_SCHEMA,
        "workload": "train",
        "world_size": world,
        "nnodes": world,
        "procs_per_node": 1,
        "backend": "gloo",
        "device": "cpu",
        "device_name": "x86_64",
        "dtype": "float32",
        "torch_version": "2.13.0+cpu",
        "model": {"params": 1000, "seq_len": SEQ},
        "global_batch": BATCH * world,
        "timed_steps": len(step),
        "tokens_per_s": BATCH * world * SEQ / BASE_STEP_S,
        "samples_per_s": BATCH * world / BASE_STEP_S,
        "step_time_s": {"p50": BASE_STEP_S, "p90": BASE_STEP_S},
        "step_times_s": step,
        "mfu": None,
        "peak_memory_bytes": 1 << 20,
        "loss": {"first": 6.9, "last": 6.5},
        "communication": {
            "allreduce_ok": True,
            "initial_params_differed": world > 1 or None,
            "params_in_sync": True,
        },
        "ranks": [{"node": f"node-{r}"} for r in range(world)],
        "busbw": None,
        "noise": None,
    }
    return parse_train_result(data, "simulated")


def launch(
    base: TrainResult,
    median_s: float,
    launch_sigma: float,
    step_sigma: float,
    steps: int,
    rng: random.Random,
) -> TrainResult:
    """One simulated launch: ``steps`` step times around ``median_s`` (docstring above)."""
    level = math.exp(rng.gauss(0.0, launch_sigma)) if launch_sigma else 1.0
    times = []
    for _ in range(steps):
        t = median_s * level * math.exp(rng.gauss(0.0, step_sigma))
        if rng.random() < 0.02:
            t *= rng.uniform(2.0, 6.0)
        times.append(t)
    ordered = sorted(times)
    return replace(
        base,
        step_times=tuple(times),
        timed_steps=steps,
        step_time_p50=ordered[len(ordered) // 2],
        step_time_p90=ordered[int(len(ordered) * 0.9)],
        tokens_per_s=base.global_batch * SEQ * steps / sum(times),
    )


def sweep(
    nodes: Sequence[int],
    efficiency: float,
    launches: int,
    launch_sigma: float,
    steps: int,
    templates: dict[int, TrainResult],
    rng: random.Random,
) -> ScalingRow:
    """One simulated sweep's row at its largest node count."""
    step_sigma = rng.uniform(0.05, 0.20)
    results = {}
    for n in nodes:
        median_s = BASE_STEP_S if n == nodes[0] else BASE_STEP_S / efficiency
        results[n] = [
            launch(templates[n], median_s, launch_sigma, step_sigma, steps, rng)
            for _ in range(launches)
        ]
    return scaling_rows(results, TARGET)[-1]


def share(count: int, total: int) -> str:
    return "-" if total == 0 else f"{count / total:.1%}"


def rate(rows: Sequence[ScalingRow], verdict: Verdict) -> str:
    """The share of ``rows`` with ``verdict``."""
    return share(sum(row.verdict is verdict for row in rows), len(rows))


RECORDED = Path(__file__).resolve().parent.parent / "tests" / "data" / "step_times.json"
SEQUENTIAL_TRUTHS = {
    "on the target": TARGET,
    "5% above": TARGET * 1.05,
    "5% below": TARGET * 0.95,
    "10% above": TARGET * 1.1,
    "10% below": TARGET * 0.9,
}


def bandwidth(shape: Sequence[float]) -> float:
    """Silverman's rule of thumb on the log scale: 1.06 sd n^(-1/5)."""
    logs = [math.log(x) for x in shape]
    spread: float = statistics.stdev(logs)
    return 1.06 * spread / math.pow(len(logs), 0.2)


def recorded_shape() -> list[float]:
    """Every recorded step time over its point's median: the shape of a step's noise here."""
    data = json.loads(RECORDED.read_text())
    shape = []
    for key in ("1-node", "2-node"):
        times = data[key]["step_times_s"]
        middle = sorted(times)[len(times) // 2]
        shape += [t / middle for t in times]
    return shape


def recorded_launch(
    base: TrainResult,
    median_s: float,
    launch_sigma: float,
    shape: Sequence[float],
    steps: int,
    rng: random.Random,
) -> TrainResult:
    """One launch: ``steps`` recorded relative step times, drawn with replacement and
    smoothed (module docstring), at ``median_s`` x a lognormal level of sigma
    ``launch_sigma``."""
    level = math.exp(rng.gauss(0.0, launch_sigma)) if launch_sigma else 1.0
    h = bandwidth(shape)
    times = [
        median_s * level * rng.choice(shape) * math.exp(rng.gauss(0.0, h)) for _ in range(steps)
    ]
    ordered = sorted(times)
    return replace(
        base,
        step_times=tuple(times),
        timed_steps=steps,
        step_time_p50=ordered[len(ordered) // 2],
        step_time_p90=ordered[int(len(ordered) * 0.9)],
        tokens_per_s=base.global_batch * SEQ * steps / sum(times),
    )


def wrong(verdict: Verdict, truth: float) -> bool:
    """A verdict the truth contradicts (on the target exactly, any verdict)."""
    if verdict is Verdict.SCALES:
        return truth <= TARGET
    if verdict is Verdict.LOSES:
        return truth >= TARGET
    return False


def compare_sequential(args: argparse.Namespace, nodes: list[int]) -> None:
    """The --until-decided table (module docstring)."""
    templates = {n: template(n) for n in nodes}
    shape = recorded_shape()
    fixed_k, most = BenchSpec.repeat, args.max_launches
    print(
        f"# {args.sweeps} sweeps a setting, nodes {nodes}, {args.steps} steps a launch drawn "
        f"from {len(shape)} recorded step times, target {TARGET:.0%}, seed {args.seed}; fixed "
        f"{fixed_k} launches against --until-decided up to {most}; {platform.node()} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()})"
    )
    print(
        "| launch sigma | truth | wrong: fixed / until-decided | decided: fixed / until-decided "
        "| launches a point (until-decided: mean, min-max) | node-launches per conclusive "
        "verdict: fixed / until-decided |"
    )
    print("|---|---|---|---|---|---|")
    started = time.monotonic()
    for launch_sigma in LAUNCH_SIGMAS:
        for name, truth in SEQUENTIAL_TRUTHS.items():
            rng = random.Random(f"{args.seed}-sequential-{launch_sigma}-{name}")
            fixed_wrong = fixed_decided = until_wrong = until_decided = 0
            fixed_cost = until_cost = 0
            taken = []
            for _ in range(args.sweeps):
                results = {
                    n: [
                        recorded_launch(
                            templates[n],
                            BASE_STEP_S if n == nodes[0] else BASE_STEP_S / truth,
                            launch_sigma,
                            shape,
                            args.steps,
                            rng,
                        )
                        for _ in range(max(fixed_k, most))
                    ]
                    for n in nodes
                }
                row = scaling_rows({n: rs[:fixed_k] for n, rs in results.items()}, TARGET)[-1]
                fixed_wrong += wrong(row.verdict, truth)
                fixed_decided += row.verdict is not Verdict.INCONCLUSIVE
                fixed_cost += fixed_k * sum(nodes)
                row = sequential_rows({n: rs[:most] for n, rs in results.items()}, most, TARGET)[-1]
                until_wrong += wrong(row.verdict, truth)
                until_decided += row.verdict is not Verdict.INCONCLUSIVE
                until_cost += row.launches_n * sum(nodes)  # round by round: every count alike
                taken.append(row.launches_n)
            n = args.sweeps
            print(
                f"| {launch_sigma:.2f} | {name} ({truth:.1%}) | {share(fixed_wrong, n)} / "
                f"{share(until_wrong, n)} | {share(fixed_decided, n)} / {share(until_decided, n)} "
                f"| {statistics.fmean(taken):.2f} ({min(taken)}-{max(taken)}) "
                f"| {per(fixed_cost, fixed_decided)} / {per(until_cost, until_decided)} |",
                flush=True,
            )
    print(f"# {time.monotonic() - started:.0f} s")


def per(cost: int, decided: int) -> str:
    return "-" if decided == 0 else f"{cost / decided:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=200, help="sweeps per setting")
    parser.add_argument("--steps", type=int, default=50, help="timed steps a launch")
    parser.add_argument("--nodes", default="1,2", help="node counts of each sweep")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument(
        "--until-decided",
        action="store_true",
        help="wrong verdicts of the fixed default against --until-decided (docstring)",
    )
    parser.add_argument(
        "--max-launches", type=int, default=DEFAULT_MAX_LAUNCHES, help="with --until-decided"
    )
    args = parser.parse_args()
    nodes = sorted(int(n) for n in args.nodes.split(","))
    if args.until_decided:
        compare_sequential(args, nodes)
        return
    templates = {n: template(n) for n in nodes}
    print(
        f"# {args.sweeps} sweeps a setting, nodes {nodes}, {args.steps} steps a launch, "
        f"target {TARGET:.0%}, seed {args.seed}; {platform.node()} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()})"
    )
    print(
        "| launch sigma | launches | coverage | no interval "
        "| on target: scales / loses | 10% above: loses / scales "
        "| 10% below: scales / loses |"
    )
    print("|---|---|---|---|---|---|---|")
    started = time.monotonic()
    for launch_sigma in LAUNCH_SIGMAS:
        for launches in LAUNCH_COUNTS:
            # one generator per setting: any setting can be rerun alone with the same draws
            rng = random.Random(f"{args.seed}-{launch_sigma}-{launches}")
            cells: dict[str, list[ScalingRow]] = {}
            for name, truth in TRUTHS.items():
                cells[name] = [
                    sweep(nodes, truth, launches, launch_sigma, args.steps, templates, rng)
                    for _ in range(args.sweeps)
                ]
            covered = judged = 0
            for name, truth in TRUTHS.items():
                for row in cells[name]:
                    if row.efficiency_low is None or row.efficiency_high is None:
                        continue
                    judged += 1
                    covered += row.efficiency_low <= truth <= row.efficiency_high
            total = args.sweeps * len(TRUTHS)
            on, above, below = cells["on"], cells["above"], cells["below"]

            print(
                f"| {launch_sigma:.2f} | {launches} | {share(covered, judged)} "
                f"| {share(total - judged, total)} "
                f"| {rate(on, Verdict.SCALES)} / {rate(on, Verdict.LOSES)} "
                f"| {rate(above, Verdict.LOSES)} / {rate(above, Verdict.SCALES)} "
                f"| {rate(below, Verdict.SCALES)} / {rate(below, Verdict.LOSES)} |",
                flush=True,
            )
    print(f"# {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
