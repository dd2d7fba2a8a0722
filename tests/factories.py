"""Hand-made result files for testing the arithmetic and the report without launching."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.record import RunDir, write_manifest, write_runs
from runner.results import TRAIN_SCHEMA, TrainResult, parse_train_result
from runner.spec import BenchSpec, Inventory, RunResult, RunStatus


def result_data(*, world: int, tokens_per_s: float, in_sync: bool = True) -> dict[str, Any]:
    seq, batch = 64, 8
    samples = tokens_per_s / seq
    step = batch * world / samples
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
        "timed_steps": 10,
        "tokens_per_s": tokens_per_s,
        "samples_per_s": samples,
        "step_time_s": {"p50": step, "p90": step * 1.1},
        "mfu": None,
        "peak_memory_bytes": 1 << 20,
        "loss": {"first": 6.9, "last": 6.5},
        "communication": {
            "allreduce_ok": True,
            "initial_params_differed": world > 1 or None,
            "params_in_sync": in_sync,
        },
        "ranks": [{"node": f"node-{r}"} for r in range(world)],
    }


def train_result(*, world: int, tokens_per_s: float) -> TrainResult:
    return parse_train_result(result_data(world=world, tokens_per_s=tokens_per_s), "factory")


def fake_run_dir(
    path: Path,
    bench: BenchSpec,
    inventory: Inventory,
    throughput: dict[int, list[float]],
    status: str = "complete",
) -> RunDir:
    """A run directory as a sweep would leave it, with the given tokens/s per launch."""
    run_dir = RunDir(path)
    path.mkdir(parents=True)
    write_manifest(run_dir, bench, inventory)
    runs = []
    for nodes, values in throughput.items():
        for repeat, tokens in enumerate(values):
            point = run_dir.point(nodes, repeat)
            point.mkdir(parents=True)
            data = result_data(world=nodes * bench.procs_per_node, tokens_per_s=tokens)
            (point / "result.json").write_text(json.dumps(data))
            rel = str(point.relative_to(path))
            runs.append(RunResult(nodes, repeat, RunStatus.OK, 1.0, rel))
    write_runs(run_dir, runs, status, None)
    return run_dir
