"""--probe after a user's program: all-reduces up to its gradient size on the same nodes and
processes, right after it (docs/your-training.md "The all-reduce probe")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from dtrun.errors import DtrunError, RunError
from dtrun.execute import Executor, LineSink
from dtrun.plan.sweep import SweepPlan
from dtrun.record.rundir import RunDir
from dtrun.record.writefail import unwritten, unwritten_here
from dtrun.spec.launchplan import LaunchPlan


def probe_program(
    sweep: SweepPlan,
    plan: LaunchPlan,
    workdir: Path,
    executor: Executor,
    run_dir: RunDir,
    on_line: LineSink,
) -> None:
    """The probe into ``workdir``/probe; result.json gets their rows as the built-in workload's
    probe, or why the probe failed (the program's own measurement stands)."""
    from dtrun.plan.launchfiles import What, plan_launch
    from dtrun.plan.workloads import WORKLOADS, allreduce_args
    from dtrun.report.resultfile import AllreduceResult, load_result
    from dtrun.spec.launchplan import PROBE_DIR, RESULT_FILE
    from dtrun.spec.request import Program, ProgramKind
    from dtrun.workloads.files import write_atomic
    from dtrun.workloads.sizes import probe_sizes

    resolved, inventory, spec = sweep.resolved, sweep.inventory, sweep.spec
    data = json.loads((workdir / RESULT_FILE).read_text())  # written a moment ago
    gradient = sum(int(b) for b in (data.get("gradient_bytes") or {}).values())
    if not gradient:
        return  # no step record said what the gradients weigh: nothing to probe up to
    sizes = ",".join(str(size) for size in probe_sizes(gradient, inventory.accelerator.value))
    probing = replace(spec.allreduce, dtype="float32")
    args = allreduce_args(probing, inventory, spec.timeout_s, sizes=sizes)
    module = WORKLOADS["allreduce"].modules[resolved.framework]
    what = What(Program(ProgramKind.MODULE, module, args), "allreduce", int(spec.timeout_s))
    probe = plan_launch(inventory, resolved.launch, plan.nnodes, what)
    probe_dir = workdir / PROBE_DIR
    run_dir.makedirs(probe_dir)
    try:
        executor.run(probe, probe_dir, timeout_s=spec.timeout_s, on_line=on_line)
        measured = load_result(probe_dir / RESULT_FILE)
    except DtrunError as exc:  # the program's own measurement stands; the probe is extra
        # said once the launch is done (runner/cli/display.py on_done), under --quiet too
        data["probe_error"] = _probe_error(exc, run_dir.path)
    else:
        rows = json.loads((probe_dir / RESULT_FILE).read_text())["rows"]  # read just now
        if isinstance(measured, AllreduceResult):
            data["busbw"] = {"gradient_bytes": gradient, "dtype": "float32", "rows": rows}
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    write_atomic(workdir / RESULT_FILE, text.encode())


def _probe_error(exc: DtrunError, root: Path) -> str:
    """Why the probe left no figures, for the program's result.json. A full disk that refused
    a node's probe result (runner/record/writefail.py) is said as the disk; the run
    directory's is raised, an OSError naming the file as a write of dtrun's: it stops the
    launch, as a full disk does elsewhere, with its nodes kept (runner/sweep/runlaunch.py)."""
    if isinstance(exc, RunError):
        here = unwritten_here(exc, root)
        if here is not None:
            raise here from None
        full = unwritten(exc, root)
        if full is not None:  # a node's own disk
            return f"the all-reduce probe's result could not be kept: {full.what}"
    return f"the all-reduce probe after the program failed: {exc.what}"
