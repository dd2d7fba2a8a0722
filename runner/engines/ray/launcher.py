"""Ray Train's TorchTrainer as a launcher (--ray only), the way TorchDistributor is one for
Spark: TorchTrainer starts one worker per node, STRICT_SPREAD, each pinned to its node, and
each worker runs that node's script with Ray Train's ranks (runner/engines/ray/trainer.py).

The script runs the program with no launcher of its own: RANK, WORLD_SIZE, LOCAL_RANK,
NODE_RANK, LOCAL_WORLD_SIZE and MASTER_ADDR come from Ray Train; MASTER_PORT is the plan's (Ray
Train's own process group holds the port it picked).
"""

from __future__ import annotations

from dtrun.errors import PlanError
from dtrun.plan.launchers.base import PlanContext, Script, common_context, every_node, program_argv
from dtrun.spec.cluster import Starter
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import Framework

NAME = "torchtrainer"


class TorchTrainerLauncher:
    name = NAME
    template = "ray/torchtrainer-node.sh.j2"
    framework: Framework | None = Framework.TORCH
    ranks_from = "Ray Train's TorchTrainer"

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        if ctx.starter is not Starter.TASKS:  # under --spark, Spark's engine refuses it
            raise PlanError(
                f"--launcher {NAME} runs under Ray",
                why="Ray Train starts its ranks: one TorchTrainer worker on each Ray node",
                fix=f"pass --ray ADDRESS with --launcher {NAME}, or another launcher",
            )
        if ctx.procs_per_node != 1:
            raise PlanError(
                f"--launcher {NAME} runs one process per node",
                why=f"--procs-per-node is {ctx.procs_per_node}; one TorchTrainer worker is one "
                "node, and dtrun asks Ray for no GPUs yet (docs/ray.md)",
                fix="leave out --procs-per-node (1)",
            )
        return every_node(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        return ()

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        context = common_context(ctx, node_rank)
        context.update(ranks_from=self.ranks_from, program=program_argv(ctx))
        return context
