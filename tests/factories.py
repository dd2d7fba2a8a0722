"""Hand-made result files for testing the arithmetic and the report without launching."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dtrun.azure.prices import Price
from dtrun.plan.env import launch_env
from dtrun.record.rundir import RunDir, write_manifest
from dtrun.record.runsfile import write_runs
from dtrun.report.resultfile import ALLREDUCE_SCHEMA
from dtrun.report.results import TRAIN_SCHEMA, TrainResult, parse_train_result
from dtrun.report.stats import percentile
from dtrun.spec.cluster import Inventory
from dtrun.spec.outcome import RunResult, RunStatus, SweepStatus
from dtrun.spec.request import BenchSpec


def size_row(size: int, busbw: float, world: int, wrong: int = 0) -> dict[str, Any]:
    """One all-reduce row as the workload writes it, consistent with nccl-tests' formulas."""
    factor = 2 * (world - 1) / world if world > 1 else 0.0
    algbw = busbw / factor if factor else 0.0
    time_us = size / (algbw * 1e9) * 1e6 if algbw else 0.0
    mode = {"time_us": time_us, "algbw": algbw, "busbw": busbw, "wrong": wrong}
    return {"size": size, "count": size // 4, "type": "float32", "redop": "sum",
            "out_of_place": dict(mode), "in_place": dict(mode)}  # fmt: skip


def allreduce_data(*, world: int, busbw: dict[int, float], wrong: int = 0) -> dict[str, Any]:
    """An all-reduce result with the given in-place busbw per message size."""
    return {
        "schema": ALLREDUCE_SCHEMA,
        "workload": "allreduce",
        "world_size": world,
        "nnodes": world,
        "procs_per_node": 1,
        "backend": "gloo",
        "device": "cpu",
        "device_name": "x86_64",
        "dtype": "float32",
        "torch_version": "2.13.0+cpu",
        "iters": 20,
        "rows": [size_row(size, value, world) for size, value in sorted(busbw.items())],
        "communication": {"backend": "gloo", "wrong": wrong, "allreduce_ok": wrong == 0},
        "ranks": [{"node": f"node-{r}", "address": f"127.0.0.{r + 2}"} for r in range(world)],
    }


def noise_data(
    nodes: list[str],
    *,
    steal: float = 0.0,
    other_cores: float = 0.0,
    probe_s: list[float] | None = None,
    shared: bool = False,
    cpus: int = 2,
    window_s: float = 1.0,
) -> dict[str, Any]:
    """A result's ``noise`` with the given figures on every node: one machine per node, or
    one machine for all of them (``shared``, the embedded cluster)."""
    return {
        "window_s": window_s,
        "nodes": [
            {
                "node": node,
                "machine": "m" if shared else f"m-{node}",
                "nodes_on_machine": list(nodes) if shared else [node],
                "cpus": cpus,
                "loadavg_1m": 0.5,
                "steal_share": steal,
                "busy_share": 0.9,
                "other_cores": other_cores,
                "other_share": other_cores / cpus,
            }
            for node in nodes
        ],
        "probe": {
            "steps": 3 if probe_s else 0,
            "rank_s": probe_s,
            "why": None if probe_s else "one rank: nothing to compare",
        },
    }


def result_data(
    *,
    world: int,
    tokens_per_s: float | None = None,
    in_sync: bool = True,
    busbw: float | None = None,
    step_times: Sequence[float] | None = None,
    noise: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A training result at ``tokens_per_s`` (every step alike, no per-step times: as an older
    dtrun wrote it), or with ``step_times`` (seconds, as recorded) and figures computed from
    them as the workload computes them: tokens/s at the mean step, p50 and p90."""
    seq, batch = 64, 8
    if step_times is None:
        assert tokens_per_s is not None
        samples = tokens_per_s / seq
        step = batch * world / samples
        timed, steps = 10, {"p50": step, "p90": step * 1.1}
    else:
        timed = len(step_times)
        tokens_per_s = batch * world * seq * timed / sum(step_times)
        samples = tokens_per_s / seq
        steps = {"p50": percentile(list(step_times), 50), "p90": percentile(list(step_times), 90)}
    return {
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
        "model": {"params": 1000, "seq_len": seq},
        "global_batch": batch * world,
        "timed_steps": timed,
        "tokens_per_s": tokens_per_s,
        "samples_per_s": samples,
        "step_time_s": steps,
        **({} if step_times is None else {"step_times_s": list(step_times)}),
        "mfu": None,
        "peak_memory_bytes": 1 << 20,
        "loss": {"first": 6.9, "last": 6.5},
        "communication": {
            "allreduce_ok": True,
            "initial_params_differed": world > 1 or None,
            "params_in_sync": in_sync,
        },
        "ranks": [{"node": f"node-{r}", "address": f"127.0.0.{r + 2}"} for r in range(world)],
        # The probe: busbw at 4 KiB (half) and at the gradients' 64 KiB.
        "busbw": None
        if busbw is None or world == 1
        else {
            "gradient_bytes": GRADIENT_BYTES,
            "rows": [size_row(4096, busbw / 2, world), size_row(GRADIENT_BYTES, busbw, world)],
        },
        "noise": noise,
    }


GRADIENT_BYTES = 65536


def train_result(
    *, world: int, tokens_per_s: float | None = None, step_times: Sequence[float] | None = None
) -> TrainResult:
    data = result_data(world=world, tokens_per_s=tokens_per_s, step_times=step_times)
    return parse_train_result(data, "factory")


def fake_run_dir(
    path: Path,
    bench: BenchSpec,
    inventory: Inventory,
    throughput: dict[int, list[float]],
    status: SweepStatus = SweepStatus.COMPLETE,
    busbw: dict[int, float] | None = None,
    step_times: Mapping[int, Sequence[Sequence[float]]] | None = None,
    noise: dict[int, list[dict[str, Any]]] | None = None,
    *,
    price: Price | None = None,
    launch_wall_s: Mapping[int, float] | None = None,
    sweep_wall_s: float | None = None,
    paid_before: dict[str, Any] | None = None,
) -> RunDir:
    """A run directory as a sweep would leave it, with the given tokens/s per launch (or, for
    the allreduce workload, busbw at 1 MiB per launch) and probe busbw per node count; or,
    per node count in ``step_times``, each launch's recorded step times; and each launch's
    noise (noise_data) per node count. The cost inputs: the price recorded, each node count's
    launch wall time (default 1 s), the sweep's wall time and the time paid before it."""
    run_dir = RunDir(path)
    path.mkdir(parents=True)
    largest = min(max(bench.node_counts), len(inventory.nodes))
    write_manifest(
        run_dir, bench, inventory, launch_env(inventory, bench.redacted(), largest), price,
        paid_before,
    )  # fmt: skip
    runs = []
    launches: dict[int, list[tuple[float | None, Sequence[float] | None]]] = {
        nodes: [(tokens, None) for tokens in values] for nodes, values in throughput.items()
    }
    for nodes, series in (step_times or {}).items():
        launches[nodes] = [(None, times) for times in series]
    for nodes, values in sorted(launches.items()):
        for repeat, (tokens, times) in enumerate(values):
            point = run_dir.point(nodes, repeat)
            point.mkdir(parents=True)
            world = nodes * bench.procs_per_node
            if bench.workload == "allreduce":
                assert tokens is not None
                data = allreduce_data(world=world, busbw={4096: tokens / 4, 1 << 20: tokens})
            else:
                probe = (busbw or {}).get(nodes)
                launch_noise = (noise or {}).get(nodes, [None] * len(values))[repeat]
                data = result_data(
                    world=world, tokens_per_s=tokens, busbw=probe, step_times=times,
                    noise=launch_noise,
                )  # fmt: skip
            data["nnodes"] = nodes  # as a sweep writes it: the point's nodes, not its ranks
            data["procs_per_node"] = bench.procs_per_node
            (point / "result.json").write_text(json.dumps(data))
            rel = str(point.relative_to(path))
            wall = (launch_wall_s or {}).get(nodes, 1.0)
            runs.append(RunResult(nodes, repeat, RunStatus.OK, wall, rel))
    write_runs(run_dir, runs, status, None, () if sweep_wall_s is None else (sweep_wall_s,))
    return run_dir


def program_run_dir(
    path: Path,
    bench: BenchSpec,
    inventory: Inventory,
    step_times: Mapping[int, Sequence[Sequence[float]]],
    *,
    sharded: str | None = None,
    busbw: Mapping[int, float] | None = None,
    records: bool = True,
) -> RunDir:
    """A `dtrun bench -- PROGRAM` run directory as a sweep leaves it: per node count, each
    launch's timed step times (seconds), made into the ranks' step records (the warm-up steps
    before them) and then into result.json by dtrun's own writer (runner/sweep/programresult.py);
    ``sharded`` as every rank's hook saw its parameters; ``busbw`` per node count: --probe's
    busbw at the gradient size; without ``records``, each launch timed as a whole program; with
    the spec's --step-pattern, each step's time is a match's `seconds`."""
    from dtrun.plan.resolve import resolve_bench
    from dtrun.plan.sweep import plan_sweep
    from dtrun.sweep.programresult import program_result

    resolved = resolve_bench(bench)
    spec = resolved.spec
    points = {plan.nnodes: plan for plan in plan_sweep(resolved, inventory).points}
    run_dir = RunDir(path)
    path.mkdir(parents=True)
    write_manifest(run_dir, spec, inventory)
    runs = []
    for nodes, series in sorted(step_times.items()):
        plan = points[nodes]
        for repeat, times in enumerate(series):
            intervals = [times[0]] * (max(spec.warmup, 1) - 1) + list(times)
            ends = [1.0 + sum(intervals[:i]) for i in range(len(intervals) + 1)]
            ranks = {
                rank: {
                    "schema": "dtrun.steps/1",
                    "rank": rank,
                    "node": f"node-{rank}",
                    "step_ends_s": ends,
                    "params": GRADIENT_BYTES // 4,
                    "gradient_bytes": {"float32": GRADIENT_BYTES},
                    "param_digest": f"d{rank}" if sharded else "d",
                    "sharded": sharded,
                    "errors": [],
                }
                for rank in range(plan.world_size)
            }
            matched: list[tuple[float, dict[str, str | None]]] | None = None
            if spec.step_pattern is not None:  # each match's `seconds`, the warm-up's first
                matched = [(0.0, {"seconds": str(t)}) for t in [times[0]] * spec.warmup + [*times]]
            wall = sum(times) + 1.0
            data = program_result(spec, plan, ranks if records else {}, wall, matched)
            probe = (busbw or {}).get(nodes)
            if probe is not None and plan.world_size > 1:
                world = plan.world_size
                rows = [size_row(4096, probe / 2, world), size_row(GRADIENT_BYTES, probe, world)]
                data["busbw"] = {"gradient_bytes": GRADIENT_BYTES, "dtype": "float32", "rows": rows}
            point = run_dir.point(nodes, repeat)
            point.mkdir(parents=True)
            (point / "result.json").write_text(json.dumps(data))
            runs.append(RunResult(nodes, repeat, RunStatus.OK, 1.0, str(point.relative_to(path))))
    write_runs(run_dir, runs, SweepStatus.COMPLETE, None, ())
    return run_dir


def html_markdown(run_dir: RunDir) -> str:
    """The Markdown report.html is made from: report.md's text plus what report.md leaves to
    the HTML's collapsed <details> sections (the method text, figures summary.json holds)."""
    from dtrun.report.build import analyse, report_markdown

    return report_markdown(analyse(run_dir), {}, html=True)
