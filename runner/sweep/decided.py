"""--until-decided in a sweep under way: whether a launch runs, on the results recorded so far
(the rule: runner/report/sequential.py ``runs_next``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dtrun.plan.sweep import Launch, SweepPlan
from dtrun.report.resultfile import load_result
from dtrun.report.results import TrainResult
from dtrun.report.sequential import runs_next
from dtrun.spec.launchplan import RESULT_FILE
from dtrun.spec.outcome import RunResult, RunStatus


def launches_next(
    plan: SweepPlan, launch: Launch, runs: Sequence[RunResult], run_path: Path, leave_out: bool
) -> bool:
    """Whether ``launch``'s node count launches again, on ``runs`` (those recorded so far in
    run directory ``run_path``). ``leave_out``: launches in noise left out (a resumed older
    sweep's: not)."""
    if launch.repeat < 2:
        return True
    results: dict[int, list[TrainResult]] = {point.nnodes: [] for point in plan.points}
    for run in sorted(runs, key=lambda run: run.repeat):
        if run.status is RunStatus.OK:
            result = load_result(run_path / run.run_dir / RESULT_FILE)
            if isinstance(result, TrainResult):
                results[run.nodes].append(result)
    spec = plan.spec
    args = (launch.plan.nnodes, launch.repeat, spec.max_launches, spec.target_efficiency)
    return runs_next(results, *args, leave_out)
