"""What `dtrun report` and `dtrun compare` read from a run directory, checked before any use.

Every file the report is made from (manifest.json, runs.json, health.json, each finished
launch's result.json) is checked here, whole, before anything is written: a damaged run
directory is refused with one message naming the file and what is wrong (exit 2), left as it
was. The shapes hold what the report reads, not everything the files hold.

Tolerated: unfinished launches (their result.json is never read), a sweep still `running`,
leftover ``*.partial`` files, and derived files (summary.json, report.md, ...), rebuilt.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from dtrun.errors import DamagedRunError, OutputDirError, ResultError
from dtrun.record.readback import (
    AMOUNT,
    ANY_OBJECT,
    CORES,
    COUNT,
    FLAG,
    GBS,
    MFU,
    NODE_COUNT,
    NUMBER,
    POSITIVE,
    PRICE,
    PROJECT_TOKENS,
    RESTORE,
    REVISION,
    RUN_ID,
    SHARE,
    STEP_SECONDS,
    TARGET,
    TEXT,
    WALL_SECONDS,
    WHOLE,
    check_record,
    damaged,
    list_of,
    nullable,
    obj,
    one_of,
    options,
    ranged,
    read_record,
)
from dtrun.record.rundir import HEALTH_FILE, HEALTH_SCHEMA, MANIFEST_SCHEMA, RunDir
from dtrun.record.runsfile import RUNS, RUNS_SCHEMA, ok_runs, sweep_launches
from dtrun.record.writer import no_launch_recorded
from dtrun.report.program import STAND_INS
from dtrun.report.resultfile import (
    ALLREDUCE_SCHEMA,
    AllreduceResult,
    Result,
    parse_result,
    point_problem,
)
from dtrun.report.results import PROGRAM_SCHEMA, TRAIN_SCHEMA, TrainResult
from dtrun.report.sequential import recorded_most
from dtrun.spec.outcome import GateStatus
from dtrun.spec.request import NOISY_LEFT_OUT, BenchSpec, ModelSpec, ScalingMode, UnitKind
from dtrun.workloads.sizes import MAX_SIZE

RESULT_TYPES: dict[str, type[TrainResult] | type[AllreduceResult]] = {  # each workload's result
    "train": TrainResult,
    "allreduce": AllreduceResult,
    "program": TrainResult,  # `dtrun bench -- PROGRAM`, read as training (dtrun.program/1)
}


def _values(choices: type[StrEnum]) -> list[str]:
    return [choice.value for choice in choices]


# manifest.json: what the report's header, "Reproducing this run" and `dtrun compare` read.
_BENCH = obj(
    {
        "workload": one_of(*RESULT_TYPES),
        "launcher": TEXT,
        "mode": one_of(*_values(ScalingMode)),
    },
    optional={
        "project_tokens": PROJECT_TOKENS,
        "target_efficiency": TARGET,
        "until_decided": FLAG,
        "max_launches": WHOLE,  # the most launches until decided (before: "repeat" held it)
        "noisy_launches": one_of(NOISY_LEFT_OUT),  # absent: an older sweep that kept them
        "launch": ANY_OBJECT,
        "strategy": nullable(ANY_OBJECT),
        "env": list_of(list_of(TEXT)),  # `dtrun compare` lists each pair
        "node_counts": list_of(NODE_COUNT, nonempty=True),  # the baseline asked for
    },
)
# a machine's noise, before the sweep (manifest.json) or over a launch's timed steps
_MACHINE_NOISE = {
    "loadavg_1m": nullable(CORES),
    "steal_share": nullable(SHARE),
    "other_cores": nullable(CORES),
    "other_share": nullable(SHARE),
}
_NODE = {"name": TEXT, "address": TEXT}  # and an embedded node's cores (taskset) and GPUs
_KEPT_TO = {"cores": nullable(list_of(WHOLE)), "gpus": nullable(list_of(TEXT))}
_MACHINE = {"hostname": TEXT, "cpu": TEXT, "cpu_count": nullable(WHOLE), "memory_bytes": AMOUNT}
_PAID_BEFORE = obj({"from": TEXT, "since": TEXT, "seconds": WALL_SECONDS, "nodes": WHOLE})
MANIFEST = obj(
    {
        "run_id": RUN_ID,
        "created_at": TEXT,
        "bench": _BENCH,
        "inventory": obj(
            {"source": TEXT, "nodes": list_of(obj(_NODE, _KEPT_TO))},
            # region: `dtrun predict RUN --size` looks its list price up by it
            optional={"size": nullable(TEXT), "region": nullable(TEXT)},
        ),
        "machine": obj(_MACHINE, {"usable_cpus": nullable(WHOLE)}),  # its affinity's cores
    },
    optional={
        "dtrun_version": nullable(TEXT),
        # the command line, secrets hidden ("Reproducing this run"); null or absent: none kept
        "command": nullable(TEXT),
        "image": nullable(obj({"urn": nullable(TEXT), "source": nullable(TEXT)})),
        "versions": nullable(ANY_OBJECT),
        # the report and `dtrun compare` show its first 12 hex digits
        "git": nullable(obj({"revision": REVISION, "dirty": FLAG})),
        "launch_environment": nullable(list_of(obj({"key": TEXT, "value": TEXT}))),
        # what a node cost an hour (the report's Cost section divides and multiplies by it)
        "price": nullable(obj({"usd_per_node_hour": PRICE, "source": TEXT})),
        # what the nodes billed before the sweep, and each --resume's cluster and its time
        # before (the Cost section's "paid before" rows and its per-run figures)
        "paid_before": nullable(_PAID_BEFORE),
        "resumed": list_of(
            obj(
                {"at": TEXT, "inventory": obj({"nodes": list_of(ANY_OBJECT)})},
                optional={"paid_before": nullable(_PAID_BEFORE)},
            )
        ),
        # this machine before the sweep (the embedded cluster): what the Noise section reads
        "noise": nullable(
            obj(
                # the Noise section's "before the sweep" line reads every one of these
                {"sample_s": POSITIVE, "cpus": COUNT},
                optional=_MACHINE_NOISE,
            )
        ),
    },
)
_MODEL = options(ModelSpec, "layers", "d_model", "heads", "seq_len", "vocab")  # as --resume
BENCH_BY_WORKLOAD = {
    "train": obj(
        {
            "bench": obj(
                {"model": obj(_MODEL, optional={"preset": nullable(TEXT)})}
                | options(BenchSpec, "procs_per_node", "steps", "warmup", "repeat", "batch")
            )
        }
    ),
    "allreduce": obj(
        {"bench": obj({"allreduce": obj({"dtype": TEXT, "warmup": WHOLE, "iters": WHOLE})})}
    ),
    "program": obj(
        {
            "bench": obj(
                {
                    "program": obj({"kind": TEXT, "target": TEXT, "args": list_of(TEXT)}),
                    "units": nullable(
                        obj(
                            {
                                "kind": one_of(*_values(UnitKind)),
                                "count": COUNT,
                                "per_process": FLAG,
                            }
                        )
                    ),
                }
                | options(BenchSpec, "procs_per_node", "warmup", "repeat")
            )
        }
    ),
}

_GATE_NODE = {"node": TEXT, "address": TEXT, "busbw": nullable(GBS), "passed": FLAG}
HEALTH = obj(
    {
        "status": one_of(*_values(GateStatus)),
        "note": TEXT,
        "threshold_gbs": nullable(GBS),
        "threshold_source": nullable(TEXT),
        "size": nullable(TEXT),
        "procs_per_node": nullable(WHOLE),
        "nodes": list_of(obj(_GATE_NODE | {"error": nullable(TEXT), "directory": TEXT})),
    }
)
HEALTH_JUDGED = obj({"threshold_gbs": NUMBER})  # a gate that ran has its pass mark

# result.json: what the report's arithmetic divides by or needs; parse_result names the rest.
# The all-reduce rows: 1e308 printed 300 digits, 10^29 bytes broke the plot (algbw: see why)
_FIGURE = ranged("a number", 0, 1e12, "a time in us, or an algbw (S / t: any size)", int, float)
_TIMING = obj({"time_us": _FIGURE, "algbw": _FIGURE, "busbw": GBS, "wrong": AMOUNT})
_SIZE = ranged("a whole number above 0", 1, MAX_SIZE, "a message size: up to --sizes' 256G", int)
_ROW = {"size": _SIZE, "count": AMOUNT, "type": TEXT, "out_of_place": _TIMING, "in_place": _TIMING}
_ROWS = list_of(obj(_ROW), nonempty=True)
_NOISY_NODE = {"node": TEXT, "nodes_on_machine": list_of(TEXT), "cpus": nullable(COUNT)}
_NOISE = obj(
    {
        "window_s": WALL_SECONDS,
        "nodes": list_of(obj(_NOISY_NODE | _MACHINE_NOISE)),
        "probe": obj(
            {"steps": WHOLE, "rank_s": nullable(list_of(STEP_SECONDS)), "why": nullable(TEXT)}
        ),
    }
)
_LAUNCH = {
    "world_size": COUNT,
    "nnodes": NODE_COUNT,
    "procs_per_node": COUNT,
    "backend": TEXT,
    "device": TEXT,
    "device_name": TEXT,
    "dtype": TEXT,
    "torch_version": TEXT,
    "ranks": list_of(obj({"node": TEXT}), nonempty=True),
}
_TIMED = {"timed_steps": COUNT, "peak_memory_bytes": AMOUNT}  # 1e308 B: 300 digits; inf: a crash
RESULTS = {
    TRAIN_SCHEMA: obj(
        _LAUNCH
        | _TIMED
        | {
            "model": obj({"params": AMOUNT, "seq_len": COUNT}),  # the header prints params
            "global_batch": COUNT,
            "tokens_per_s": POSITIVE,
            "samples_per_s": NUMBER,
            "step_time_s": obj({"p50": STEP_SECONDS, "p90": STEP_SECONDS}),
            "communication": obj({"allreduce_ok": FLAG, "params_in_sync": FLAG}),
        },
        optional={
            "peak_memory_max_bytes": nullable(AMOUNT),
            "busbw": nullable(obj({"gradient_bytes": COUNT, "rows": _ROWS})),
            # the statistic's input: each a step's seconds (runner/report/stats.py)
            "step_times_s": nullable(list_of(STEP_SECONDS)),
            "noise": nullable(_NOISE),
            "mfu": nullable(MFU),
        },
    ),
    ALLREDUCE_SCHEMA: obj(
        _LAUNCH | {"iters": NUMBER, "rows": _ROWS, "communication": obj({"wrong": NUMBER})}
    ),
    PROGRAM_SCHEMA: obj(
        _LAUNCH
        | _TIMED
        | {
            "timing": one_of("optimizer steps", "whole program", "step pattern"),
            "optimizer_steps": WHOLE,
            "step_time_s": obj({"p50": STEP_SECONDS, "p90": STEP_SECONDS}),
            "step_times_s": list_of(STEP_SECONDS, nonempty=True),
            # what the throughput counts: its name heads columns and labels the plots' axes
            "units": obj(
                {
                    "kind": one_of(*_values(UnitKind), *sorted(STAND_INS)),
                    "per_step": COUNT,
                    "given": FLAG,
                }
            ),
            "proof": obj({"answer": TEXT, "why": TEXT}),
            "peak_memory_max_bytes": AMOUNT,
        },
        optional={
            "busbw": nullable(obj({"gradient_bytes": COUNT, "rows": _ROWS})),
            # how the parameters are sharded: the gradient sync's factor (runner/report/losses.py)
            "sharded": nullable(TEXT),
        },
    ),
}


@dataclass(frozen=True)
class Recorded:
    """A run directory's recorded files, each checked."""

    manifest: dict[str, Any]
    runs: dict[str, Any]
    health: dict[str, Any] | None
    results: dict[int, list[Result]]  # every finished launch's, by node count, in launch order

    @property
    def workload(self) -> str:
        return str(self.manifest["bench"]["workload"])


def read_recorded(run_dir: RunDir) -> Recorded:
    """Read and check every file the report is made from; raise DamagedRunError at the first
    file that is missing, unreadable or not as dtrun writes it."""
    root = run_dir.path
    manifest = read_record(run_dir.manifest, MANIFEST, root=root, schema=MANIFEST_SCHEMA)
    workload = str(manifest["bench"]["workload"])
    check_record(run_dir.manifest, manifest, BENCH_BY_WORKLOAD[workload])
    check_record(run_dir.manifest, manifest, recorded_most)  # --until-decided's maximum
    no_launch_recorded(root, run_dir.runs)  # what the writer's lock says, if anything
    runs = read_record(
        run_dir.runs,
        RUNS,
        missing="the sweep recorded no launch: it stopped before its first launch ended, "
        "or the file was removed",
        root=root,
        schema=RUNS_SCHEMA,
    )
    check_record(run_dir.runs, runs, sweep_launches(manifest["bench"]))  # each once, the sweep's
    health = None
    if (run_dir.path / HEALTH_FILE).is_symlink() or (run_dir.path / HEALTH_FILE).exists():
        health = read_record(run_dir.path / HEALTH_FILE, HEALTH, root=root, schema=HEALTH_SCHEMA)
        if health["status"] != GateStatus.SKIPPED:
            check_record(run_dir.path / HEALTH_FILE, health, HEALTH_JUDGED)
    results: dict[int, list[Result]] = defaultdict(list)
    for nodes, _, directory in ok_runs(runs):
        results[nodes].append(_result(run_dir, directory, manifest["bench"], nodes))
    return Recorded(manifest, runs, health, dict(results))


def _result(run_dir: RunDir, directory: str, bench: dict[str, Any], nodes: int) -> Result:
    """A finished launch's result.json: runs.json says it ended ok, so rank 0 wrote one, of
    the ``nodes`` of its point, of the sweep manifest.json's ``bench`` records."""
    inside = Path(directory)
    if inside.is_absolute() or ".." in inside.parts:
        raise damaged(
            run_dir.runs,
            f"a launch's 'run_dir' is {directory!r}, outside the run directory; dtrun records "
            "each launch as n<N>/r<k> inside it",
        )
    path = run_dir.path / directory / "result.json"
    data = read_record(
        path,
        ANY_OBJECT,
        missing=f"{run_dir.runs.name} records the launch in {directory} as finished (ok), "
        "and a finished launch leaves rank 0's result there",
        root=run_dir.path,
    )
    shape = RESULTS.get(str(data.get("schema")))
    if shape is not None:
        check_record(path, data, shape)
    try:
        result = parse_result(data, str(path))
    except ResultError as exc:  # a schema this dtrun does not read, a field its parser refused
        raise DamagedRunError(exc.what, why=exc.why, fix=exc.fix or RESTORE) from None
    if not isinstance(result, RESULT_TYPES[bench["workload"]]):
        raise damaged(
            path,
            f"it holds a {data['schema']} result, but the sweep's workload is {bench['workload']} "
            f"({run_dir.manifest.name})",
        )
    recorded = f"{run_dir.runs.name} records the launch in {directory}"
    problem = point_problem(result, nodes, recorded, sweep=(data, bench))
    if problem is not None:  # a result of another point or run, copied or moved here, or edited
        raise damaged(path, problem)
    return result


def check_writable(run_dir: RunDir, names: Iterable[str]) -> None:
    """Before `dtrun report` writes: each file it (re)writes can be, so none is half-written,
    and none is a link (a write there would go where the link leads, or replace it)."""
    for name in names:
        path = run_dir.path / name
        if path.is_symlink():
            raise DamagedRunError(
                f"{path} is a symbolic link",
                why=f"`dtrun report` writes its {name} there, and writes through no link "
                "(it could point anywhere)",
                fix=f"remove the link from {run_dir.path} and run `dtrun report` again; "
                "nothing was written",
            )
        if path.exists() and not path.is_file():
            raise DamagedRunError(
                f"{path} is in the way",
                why=f"it is not a plain file, and `dtrun report` writes its {name} there",
                fix=f"move it out of {run_dir.path} and run `dtrun report` again; "
                "nothing was written",
            )
    if os.statvfs(run_dir.path).f_flag & os.ST_RDONLY:
        raise OutputDirError(
            f"{run_dir.path} cannot be written",
            why="it is on a read-only file system",
            fix=f"copy {run_dir.path} to a writable disk and run `dtrun report` on the copy, "
            "or remount it read-write; nothing was written",
        )
    for name in names:
        path = run_dir.path / name
        if not os.access(path if path.exists() else run_dir.path, os.W_OK):
            raise OutputDirError(
                f"{path} cannot be written",
                why="permission denied",
                fix=f"run `dtrun report` as a user who may write {run_dir.path}; "
                "nothing was written",
            )
