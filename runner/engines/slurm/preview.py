"""What `--dry-run --slurm` prints of a launch: the srun line and the script each task runs."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from dtrun.engines.slurm.executor import WRAPPER, SlurmExecutor, step_command, wrapper
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.text import plural


@dataclass(frozen=True)
class SlurmPreview:
    """What a dry run prints beside each plan: the allocation request, every srun line."""

    executor: SlurmExecutor
    allocation: str = ""

    def launch(self, plan: LaunchPlan, workdir: str) -> str:
        path = Path(workdir)
        command = step_command(
            plan, self.executor.job_id, str(path.resolve()), "TAG",
            self.executor.gpus_per_node,
        )  # fmt: skip
        return (
            f"# ---- {plural(plan.nnodes, 'node')}: the srun line (one job step, a task per node) "
            "----\n"
            f"{shlex.join(command)}\n"
            f"# ---- {plural(plan.nnodes, 'node')}: {WRAPPER}, run by each task ----\n"
            f"{wrapper(plan, path.parent.parent.name)}"
        )
