"""runs.json: every launch of a sweep, how the sweep ended, and each run of dtrun's wall time
(docs/bench.md, "The run directory")."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from dtrun.record.readback import (
    NODE_COUNT,
    TEXT,
    WALL_SECONDS,
    WHOLE,
    Shape,
    list_of,
    nullable,
    obj,
    one_of,
)
from dtrun.record.rundir import RunDir, now_iso
from dtrun.record.writefail import with_cut_logs
from dtrun.redact import redact_text
from dtrun.spec.launchplan import point_dir
from dtrun.spec.outcome import RunResult, RunStatus, SweepStatus
from dtrun.spec.text import plural

RUNS_SCHEMA = "dtrun.runs/1"

# What the report and `dtrun compare` read of it (runner/report/recorded.py)
RUNS = obj(
    {
        "status": one_of(*(status.value for status in SweepStatus)),
        "error": nullable(TEXT),
        "runs": list_of(
            obj(
                {
                    "nodes": NODE_COUNT,
                    "repeat": WHOLE,
                    "status": one_of(*(status.value for status in RunStatus)),
                    "wall_s": WALL_SECONDS,
                    "run_dir": TEXT,
                }
            )
        ),
    },
    # the sweep's wall time, each run of dtrun's, and the launches a --resume ran again: what
    # the Cost section adds up
    optional={
        "wall_s": nullable(WALL_SECONDS),
        "segment_wall_s": list_of(nullable(WALL_SECONDS)),
        "replaced": list_of(obj({"nodes": NODE_COUNT, "wall_s": WALL_SECONDS})),
        # what a run of dtrun could not tidy up as it ended (a Slurm job whose cancel squeue
        # did not confirm): this run's, and the earlier runs' a --resume carries forward
        "cleanup": TEXT,
        "earlier_cleanup": list_of(TEXT),
    },
)


def write_runs(
    run_dir: RunDir,
    runs: Sequence[RunResult],
    status: SweepStatus,
    error: str | None,
    segment_wall_s: Sequence[float | None] = (),
    replaced: Sequence[RunResult] = (),
    earlier_cleanup: Sequence[str] = (),
) -> None:
    """runs.json. ``segment_wall_s``: the wall time of each run of dtrun on this sweep (the
    first, then each --resume), from its start to now; ``wall_s`` is their sum (None when one
    is not known). ``replaced``: launches that ended without a result and that a --resume ran
    again; they were paid for (the cost section's figures: docs/report.md "Cost").
    ``earlier_cleanup``: the `cleanup` of each earlier run of dtrun on this sweep that had one
    (runner/cli/session.py closed_recorded): what happened, kept by a --resume."""
    known = [wall for wall in segment_wall_s if wall is not None]
    wall_s = sum(known) if known and len(known) == len(segment_wall_s) else None
    run_dir.write_json(
        run_dir.runs,
        {
            "schema": RUNS_SCHEMA,
            "status": status,
            "error": redact_text(error) if error is not None else None,
            "updated_at": now_iso(),
            "wall_s": wall_s,
            "segment_wall_s": list(segment_wall_s),
            "runs": [_run(run) for run in runs],
            "replaced": [_run(run) for run in replaced],
            **({"earlier_cleanup": list(earlier_cleanup)} if earlier_cleanup else {}),
        },
    )


def record_stop_after_sweep(run_dir: RunDir, error: str) -> None:
    """runs.json of a sweep that ended, then had dtrun stopped (cleaning up, uploading): the
    stop is recorded, so the records say what dtrun's exit code says."""
    data = json.loads(run_dir.runs.read_text())  # written by this run of dtrun a moment ago
    data.update(status=SweepStatus.INTERRUPTED, error=redact_text(error), updated_at=now_iso())
    run_dir.write_json(run_dir.runs, data)


def cleanups(runs_data: Mapping[str, Any]) -> tuple[str, ...]:
    """Every `cleanup` runs.json holds, earlier runs of dtrun's first; a --resume carries them
    forward (write_runs ``earlier_cleanup``)."""
    earlier = runs_data.get("earlier_cleanup", [])
    return (*earlier, *([runs_data["cleanup"]] if runs_data.get("cleanup") else []))


def segment_walls(runs_data: Mapping[str, Any], parts: int) -> tuple[float | None, ...]:
    """runs.json's wall time of each run of dtrun on the sweep, one per part the manifest
    records (the first run, then each resume), None where it is not known: a resume stopped
    before it wrote runs.json, or a runs.json from before dtrun kept each one (its wall_s was
    the last run's)."""
    recorded = runs_data.get("segment_wall_s")
    if recorded is None:
        recorded = [None] * (parts - 1) + [runs_data.get("wall_s")]
    walls = [None if wall is None else float(wall) for wall in recorded][:parts]
    return (*walls, *[None] * (parts - len(walls)))


def _run(run: RunResult) -> dict[str, Any]:
    error = redact_text(run.error) if run.error else run.error
    return asdict(replace(run, error=error, node_results=with_cut_logs(run.node_results)))


def ok_runs(runs_data: Mapping[str, Any]) -> list[tuple[int, int, str]]:
    """(nodes, repeat, directory) of every launch that finished with a result."""
    return [
        (int(run["nodes"]), int(run["repeat"]), str(run["run_dir"]))
        for run in runs_data["runs"]
        if run["status"] == RunStatus.OK.value
    ]


def launches_problem(runs_data: Any, where: str) -> str | None:
    """A runs.json (of the shape RUNS checks) whose launches are not as a sweep
    records them: each launch once, in its own directory n<N>/r<k>, its round k from 0 up;
    None where they are. A hand-edited record would otherwise count one result twice, take a
    2-node result for the baseline, or send --resume to launch over a recorded one."""
    seen: set[tuple[int, int]] = set()
    for index, run in enumerate(runs_data["runs"]):
        nodes, repeat = run["nodes"], run["repeat"]
        name = f"'runs[{index}]"
        if repeat < 0:
            return f"{name}.repeat' is {repeat}: a sweep's launches count from 0"
        if run["run_dir"] != point_dir(nodes, repeat):
            return (
                f"{name}.run_dir' is {run['run_dir']!r}: a sweep runs launch {repeat} at "
                f"{plural(nodes, 'node')} in {point_dir(nodes, repeat)!r}"
            )
        if (nodes, repeat) in seen:
            return f"{name}' records launch {repeat} at {plural(nodes, 'node')} a second time"
        seen.add((nodes, repeat))
    return None


def most_launches(bench: Mapping[str, Any]) -> int | None:
    """The most launches a node count takes in the sweep manifest.json's ``bench`` records
    (BenchSpec.launches): --max-launches until decided (written before it had a field,
    "repeat" held it), else --repeat; None where the manifest does not say."""
    until = bench.get("until_decided") is True and "max_launches" in bench
    most = bench.get("max_launches" if until else "repeat")
    return most if type(most) is int else None


def sweep_launches(bench: Mapping[str, Any]) -> Shape:
    """launches_problem, and each launch one the sweep of ``bench`` runs: at a node count it
    asked for, a round below its most (runner/plan/sweep.py). A runs.json of another run, or
    hand-edited, had the report list launches no sweep made (200,000 took 85 s and 2 GB), and
    --resume take them as done."""
    counts = bench.get("node_counts")
    most = most_launches(bench)

    def check(runs_data: Any, where: str) -> str | None:
        problem = launches_problem(runs_data, where)
        for index, run in enumerate(runs_data["runs"] if problem is None else ()):
            nodes, repeat = run["nodes"], run["repeat"]
            if isinstance(counts, list) and nodes not in counts:
                asked = ", ".join(map(str, counts))
                return (
                    f"'runs[{index}].nodes' is {nodes}, but manifest.json's sweep ran {asked} "
                    "nodes: a launch of another run, or one edited"
                )
            if most is not None and repeat >= most:
                return (
                    f"'runs[{index}].repeat' is {repeat}, but manifest.json's sweep runs "
                    f"launches 0 to {most - 1} a node count: a launch of another run, or one "
                    "edited"
                )
        return problem

    return check
