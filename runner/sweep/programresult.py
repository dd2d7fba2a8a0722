"""`dtrun bench -- PROGRAM`: one launch's result.json, made on this machine from what the step
hook wrote on the nodes (runner/workloads/stephook/sitecustomize.py, docs/your-training.md).

Each rank's ``dtrun-steps/rank-<RANK>.json`` holds the end time of every optimizer step on that
rank's own clock. A step's time is the interval from the step before it to it, so the first
step has none and is always left out with the warm-up; the timed steps are the lowest rank's
(its ranks wait for each other every step, as the built-in workload's rank 0 does), and every
rank's are kept beside them. Without any step file (a program that uses no torch optimizer)
the launch's wall time stands for one step, said as "whole program, start-up included".

The proof: under data parallelism every rank ends with the same parameters, so their digests
agree; they are compared here, with no collective. Sharded parameters (FSDP, ZeRO >= 1) are
"not comparable".
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

from dtrun.errors import DamagedRunError, ResultError
from dtrun.plan.steppattern import (
    FASTEST_STEP_S,
    SLOWEST_STEP_S,
    Matched,
    has_time_group,
    intervals,
    pattern_steps,
)
from dtrun.record import readback as rb
from dtrun.report.results import PROGRAM_SCHEMA
from dtrun.report.stats import percentile
from dtrun.spec.launchplan import RESULT_FILE, STEP_DIR, LaunchPlan
from dtrun.spec.request import BenchSpec, ScalingMode
from dtrun.spec.text import noun, plural
from dtrun.workloads.files import write_atomic
from dtrun.workloads.noise import UNTIL_GRADIENTS, launch_noise

STEPS_SCHEMA = "dtrun.steps/1"
MAX_STEP_FILE = 64 * 1024 * 1024  # a rank's file: a float per step; more is not the hook's
_TEXT = rb.nullable(rb.TEXT)


def _rank(value: Any, where: str) -> str | None:
    """A rank as the hook writes it, the digits of RANK (text), or a whole number."""
    digits = value if isinstance(value, str) else str(value) if type(value) is int else ""
    fits = digits.isascii() and digits.isdigit() and len(digits) <= 9
    return None if fits else f"'{where}' is {rb.describe(value)}, not a rank (a whole number)"


# The hook's record, written in the program's processes: a field of another kind crashed dtrun
STEP_SHAPE = rb.obj(
    {"schema": rb.one_of(STEPS_SCHEMA), "rank": _rank, "step_ends_s": rb.list_of(rb.NUMBER)},
    {"node": rb.TEXT, "address": _TEXT, "params": rb.nullable(rb.AMOUNT), "sharded": _TEXT,
     "peak_memory_bytes": rb.nullable(rb.AMOUNT), "param_digest": _TEXT,
     "errors": rb.list_of(rb.TEXT), "gradient_bytes": rb.ANY_OBJECT,
     "grads_ready_s": rb.list_of(rb.nullable(rb.NUMBER)),
     "ended_at_s": rb.NUMBER, "raised": _TEXT, "raised_write": rb.FLAG},
)  # fmt: skip


def read_step_files(folder: Path) -> dict[int, dict[str, Any]]:
    """Each rank's step record, by rank; a file that is no record of the hook's is refused."""
    records: dict[int, dict[str, Any]] = {}
    if not folder.is_dir():
        return records
    for path in sorted(folder.glob("rank-*.json")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_STEP_FILE:
            raise ResultError(f"{path} is not a step record", why="not a regular file of its size")
        if not path.stem.removeprefix("rank-").isdigit():
            continue  # a process with no rank variable (a helper the program started)
        try:
            data = rb.read_record(path, STEP_SHAPE, root=folder)
        except DamagedRunError as exc:
            raise ResultError(f"{path} is not a step record", why=exc.why) from None
        ends = [float(end) for end in data["step_ends_s"]]
        if not all(map(float.__lt__, ends, ends[1:])):  # a step of 0 s divided by zero
            why = "its step_ends_s do not increase: each step ends after the one before"
            raise ResultError(f"{path} is not a step record", why=why)
        # none below 0 (--probe's sum: a busbw.gradient_bytes `dtrun report` calls damaged)
        if not all(type(n) is int and n >= 0 for n in data["gradient_bytes"].values()):
            why = "its gradient_bytes are not whole numbers of bytes"
            raise ResultError(f"{path} is not a step record", why=why)
        records[int(data["rank"])] = {**data, "step_ends_s": ends}
    return records


def _units(spec: BenchSpec, world_size: int) -> dict[str, Any]:
    """What a step processes: the user's --samples/--tokens-per-step, or, without them, one
    unit per process-step (weak) or per step (strong), so efficiency comes from step times."""
    if spec.units is not None:
        return {
            "kind": spec.units.kind.value,
            "per_step": spec.units.per_step(world_size),
            "given": True,
            "per_process": spec.units.per_process,
        }
    weak = spec.mode is ScalingMode.WEAK
    return {
        "kind": "process-steps" if weak else "steps",
        "per_step": world_size if weak else 1,
        "given": False,
        "per_process": weak,
    }


def _sharded(records: dict[int, dict[str, Any]]) -> str | None:
    """How the ranks' parameters are sharded, as the hook saw it (_dtrun_steprecord.py
    ``_sharding``: "FSDP (DTensor shards)", "FSDP (flat parameter shards)", "DeepSpeed ZeRO
    stage N"), or None: whole on every rank. The report's gradient sync reads it."""
    return next((str(r["sharded"]) for r in records.values() if r.get("sharded")), None)


def _proof(records: dict[int, dict[str, Any]], world_size: int) -> dict[str, Any]:
    digests = {rank: record.get("param_digest") for rank, record in records.items()}
    sharded = _sharded(records)
    if strays := [rank for rank in sorted(records) if not 0 <= rank < world_size]:
        return {"answer": "not checked", "why": _strays_why(records, strays, world_size),
                "digests": {str(r): d for r, d in digests.items()}}  # fmt: skip
    if world_size == 1:
        answer, why = "not checked", "one process"
    elif sharded:
        answer, why = "not comparable", f"sharded: {sharded}"
    elif len(records) < world_size or any(d is None for d in digests.values()):
        answer, why = "not checked", f"{len(records)} of {world_size} ranks recorded parameters"
    elif len(set(digests.values())) == 1:
        answer, why = "in sync", f"{world_size} ranks end with the same parameters"
    else:
        lowest = min(digests)
        apart = [rank for rank, digest in sorted(digests.items()) if digest != digests[lowest]]
        answer = "diverged"
        ranks = f"{noun(len(apart), 'rank')} {', '.join(map(str, apart))}"
        verb = "ends" if len(apart) == 1 else "end"
        why = f"{ranks} {verb} with other parameters than rank {lowest}"
    return {"answer": answer, "why": why, "digests": {str(r): d for r, d in digests.items()}}


def _strays_why(records: dict[int, dict[str, Any]], strays: list[int], world_size: int) -> str:
    """Step records from ranks dtrun did not launch: the program started processes of its
    own (a `torchrun` inside it), so dtrun's world size, units and efficiency are not its."""
    named = ", ".join(map(str, sorted(records)))
    ranks = "rank 0" if world_size == 1 else f"ranks 0 to {world_size - 1}"
    return (
        f"the step records name {noun(len(records), 'rank')} {named}, where dtrun launched "
        f"{plural(world_size, 'process')} ({ranks}): the program started processes of its "
        "own (a launcher inside it?), so the world size, the units per step and the "
        "efficiency here count dtrun's processes, not the program's"
    )


# Why a program's launch has no per-rank timing (docs/your-training.md "Which rank is slow")
NO_TIMING = (
    "no rank's gradients were seen ready (no autograd gradient, or a step hook from before "
    "per-rank timing)"
)


def until_gradients(record: dict[str, Any], timed_from: int) -> list[float]:
    """Each timed step's local time on one rank: from the step's start (the previous optimizer
    step's end) to the rank's last gradient accumulated (``grads_ready_s``, the step hook's),
    the compute before the step's final gradient wait. Steps without a reading are left out."""
    ends, ready = record["step_ends_s"], record.get("grads_ready_s") or ()
    times = []
    for step in range(max(timed_from, 1), min(len(ends), len(ready))):
        at = ready[step]
        if isinstance(at, (int, float)) and math.isfinite(at) and at > ends[step - 1]:
            times.append(at - ends[step - 1])
    return times


def _rank_timing(
    records: dict[int, dict[str, Any]], timed_from: int
) -> tuple[list[float | None], str | None, int]:
    """Each rank's median local time (by rank), why there is none, and the steps it spans."""
    timed = {rank: until_gradients(records[rank], timed_from) for rank in sorted(records)}
    if any(not times for times in timed.values()):
        return [None] * len(records), NO_TIMING, 0
    medians: list[float | None] = [percentile(t, 50) for t in timed.values()]
    return medians, None, min(len(t) for t in timed.values())


def _noise(
    records: dict[int, dict[str, Any]], world_size: int, timed_from: int
) -> dict[str, Any] | None:
    """The launch's ``noise``, as dtrun's own workload records it (runner/workloads/noise.py),
    from every rank's window; the probe is each rank's time until its last gradient
    (UNTIL_GRADIENTS). None unless every rank recorded a window."""
    windows = [records[rank].get("noise_window") for rank in sorted(records)]
    if len(windows) != world_size or any(not isinstance(w, dict) for w in windows):
        return None
    medians, why, steps = _rank_timing(records, timed_from)
    gathered = [
        {**w, "alone_s": median, "alone_why": why}
        for w, median in zip(windows, medians, strict=True)
        if isinstance(w, dict)
    ]
    nodes = [str(records[rank].get("node", "")) for rank in sorted(records)]
    try:
        measured = launch_noise(gathered, nodes, steps)
        json.dumps(measured, allow_nan=False)  # a window's NaN: result.json cannot hold it
    except (KeyError, TypeError, ValueError):
        return None  # a window of another shape: no figures, as before the hook had them
    measured["probe"]["what"] = UNTIL_GRADIENTS
    return measured


def program_result(
    spec: BenchSpec,
    plan: LaunchPlan,
    records: dict[int, dict[str, Any]],
    wall_s: float,
    matched: Matched | None = None,
) -> dict[str, Any]:
    """The launch's result (schema dtrun.program/1) from the ranks' step records, or from
    --step-pattern's matches where it was given."""
    world = plan.world_size
    timed_from = max(spec.warmup, 1)  # the first step has no interval: always warm-up
    first_rank = min(records) if records else None
    base = records.get(first_rank, {}) if first_rank is not None else {}
    steps_seen = len(base.get("step_ends_s", ()))
    if matched is not None:
        timed, steps_seen = pattern_steps(spec, matched)
        timing = "step pattern"
        if has_time_group(matched):  # each match is a step's time: only --warmup left out
            timed_from = spec.warmup
        if not timed:
            raise ResultError(
                f"--step-pattern matched {plural(steps_seen, 'step')}, and --warmup {spec.warmup} "
                "leaves none to time",
                fix="let the program run more steps, or pass a smaller --warmup",
            )
    elif records:
        ends = base["step_ends_s"]
        if not ends:
            _check_hooks(records)
        if len(ends) <= timed_from:
            raise ResultError(
                f"the program made {plural(len(ends), 'optimizer step')} on rank {first_rank}, and "
                f"{timed_from} are left out as warm-up: no step was timed",
                why="--warmup steps (at least the first, which has no start the hook can see) "
                "are not timed",
                fix="let the program run more steps, or pass a smaller --warmup",
            )
        timed = intervals(ends)[timed_from - 1 :]
        timing = "optimizer steps"
    else:
        timed = [wall_s]
        timing = "whole program"
    bad = [t for t in timed if not FASTEST_STEP_S <= t <= SLOWEST_STEP_S]
    if bad and timing != "whole program":  # a wall time is dtrun's own
        _out_of_range(bad[0], matched is not None, first_rank)
    ranks = [
        {"rank": rank, "node": str(r.get("node", "")), "address": _opt_str(r, "address"), "os": ""}
        for rank, r in sorted(records.items())
    ] or [{"rank": 0, "node": plan.launches[0].node.name, "os": ""}]
    units = _units(spec, world)
    median = percentile(timed, 50)
    peaks = [int(r.get("peak_memory_bytes") or 0) for r in records.values()] or [0]
    params = [int(r.get("params") or 0) for r in records.values()]  # each rank: the model
    return {
        "schema": PROGRAM_SCHEMA,
        "workload": "program",
        "timing": timing,
        "world_size": world,
        "nnodes": plan.nnodes,
        "procs_per_node": plan.procs_per_node,
        "backend": base.get("backend") or "n/a",
        "device": base.get("device") or "n/a",
        "device_name": base.get("device_name") or platform.machine(),
        "dtype": base.get("dtype") or "n/a",
        "torch_version": base.get("torch_version") or "n/a",
        "python_version": base.get("python_version"),
        "ranks": ranks,
        "warmup": timed_from if records or matched is not None else 0,
        "optimizer_steps": steps_seen,
        "timed_steps": len(timed),
        "step_time_s": {
            "p50": median,
            "p90": percentile(timed, 90),
            "mean": sum(timed) / len(timed),
            "min": min(timed),
            "max": max(timed),
        },
        "step_times_s": [round(t, 7) for t in timed],
        "rank_step_times_s": {
            str(rank): [round(t, 7) for t in intervals(r["step_ends_s"])[timed_from - 1 :]]
            for rank, r in sorted(records.items())
        },
        "units": units,
        "units_per_s": units["per_step"] / median,
        "params": max(params) if params else None,
        "gradient_bytes": base.get("gradient_bytes") or {},
        "peak_memory_bytes": int(base.get("peak_memory_bytes") or 0),
        "peak_memory_max_bytes": max(peaks),
        "proof": _proof(records, world),
        "noise": _noise(records, world, timed_from),
        "sharded": _sharded(records),
        "hook_errors": sorted({e for r in records.values() for e in r.get("errors", ())}),
        "wall_s": wall_s,
    }


def _out_of_range(step_s: float, pattern: bool, rank: int | None) -> None:
    """A timed step result.json cannot hold (``dtrun report`` called the run damaged; 1e-320 s
    made an infinite throughput, a traceback): the launch fails naming where it came from."""
    where = "--step-pattern read" if pattern else f"rank {rank}'s step record has"
    raise ResultError(
        f"{where} a step of {step_s:g} s, outside {FASTEST_STEP_S:g} to {SLOWEST_STEP_S:g} s",
        why="no step's time: a step takes a microsecond to about 11 days",
        fix="make the pattern's (?P<seconds>...) or (?P<ms>...) group match the step's time in "
        "its unit"
        if pattern
        else "let only dtrun's step hook write its dtrun-steps/ files",
    )


def _opt_str(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    return str(value) if value else None


# The hook's error when torch has no global step hooks (_dtrun_stephook.py, _Loader.exec_module)
HOOK_ERROR = "hooks: "
# Its error when the hook itself did not load (runner/workloads/stephook/sitecustomize.py)
LOAD_ERROR = "load: "


def _first_error(record: dict[str, Any], prefix: str) -> str | None:
    return next((str(e) for e in record.get("errors", ()) if str(e).startswith(prefix)), None)


def _check_hooks(records: dict[int, dict[str, Any]]) -> None:
    """No step because the hook did not load, or could not register torch's global step
    hooks: say so, not "0 optimizer steps". torch.optim.optimizer.register_optimizer_step_pre_hook
    and ..._post_hook came with pytorch/pytorch#89176 (Nov 2022, after torch 1.13): torch 2.0."""
    for rank, record in sorted(records.items()):
        if (error := _first_error(record, LOAD_ERROR)) is not None:
            raise ResultError(
                f"dtrun's step hook did not load on rank {rank}: {error.removeprefix(LOAD_ERROR)}",
                why="the hook times each optimizer step from inside the program's processes; "
                "where it did not load, no step was seen",
                fix="check dtrun's code directory on the nodes (runner/workloads/stephook/ "
                "beside runner/workloads/files.py and noise.py), or pass --step-pattern REGEX "
                "matching a line your program prints each step",
            )
        error = _first_error(record, HOOK_ERROR)
        if error is not None:
            raise ResultError(
                f"dtrun's step hook could not register torch's optimizer step hooks on rank "
                f"{rank}: {error.removeprefix(HOOK_ERROR)}",
                why="the hook times steps with torch.optim.optimizer."
                "register_optimizer_step_pre_hook and register_optimizer_step_post_hook, which "
                "torch has from 2.0 on; without them it saw no step",
                fix="upgrade torch on the nodes to 2.0 or later, or pass --step-pattern REGEX "
                "matching a line your program prints each step",
            )


def write_program_result(
    spec: BenchSpec, plan: LaunchPlan, workdir: Path, wall_s: float, matched: Matched | None
) -> None:
    """result.json in ``workdir`` from its dtrun-steps/ (collected there from every node) and
    --step-pattern's matches."""
    if os.path.lexists(workdir / RESULT_FILE):  # dtrun removed its own before the launch
        raise ResultError(
            f"the program wrote {RESULT_FILE} in its launch directory {workdir}, where dtrun "
            "writes the launch's result",
            why="the program's file is kept as it left it, and this launch has no result",
            fix=f"have the program write its {RESULT_FILE} under another name or in another "
            "directory (an absolute path: it runs in the launch directory)",
        )
    records = read_step_files(workdir / STEP_DIR)
    result = program_result(spec, plan, records, wall_s, matched)
    data = (json.dumps(result, indent=2, allow_nan=False) + "\n").encode()
    write_atomic(workdir / RESULT_FILE, data)
