"""The Spark launchers: TorchDistributor and horovod.spark start the ranks, one Spark task
(executor) per node; they run under the Spark engine only (`--spark MASTER`).

Each node's script runs the program with no launcher of its own: the ranks come from the Spark
launcher (TorchDistributor's torchrun: MASTER_ADDR, RANK, ...; horovod.spark's HOROVOD_* mapped
to the contract by runner/engines/spark/node.py). The driver that calls them is
runner/engines/spark/driver.py, configured by the launch file spark.json (docs/spark.md).
"""

from __future__ import annotations

import json

from dtrun.errors import PlanError
from dtrun.plan.launchers.base import PlanContext, Script, common_context, every_node, program_argv
from dtrun.spec.cluster import Starter
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import Framework

SPARK_CONFIG = "spark.json"


def _spark_only(ctx: PlanContext, name: str) -> None:
    if ctx.starter is not Starter.TASKS:
        raise PlanError(
            f"--launcher {name} runs under Spark",
            why="Spark starts its ranks: one Spark task on each executor",
            fix=f"pass --spark MASTER (local-cluster[2,1,1024], spark://HOST:7077, yarn) with "
            f"--launcher {name}, or another launcher",
        )


class _SparkLauncher:
    template = "launch/spark-node.sh.j2"
    name = ""
    ranks_from = ""

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        _spark_only(ctx, self.name)
        if ctx.procs_per_node != 1:
            raise PlanError(
                f"--launcher {self.name} runs one process per node on CPU executors",
                why=f"--procs-per-node is {ctx.procs_per_node}; one Spark task is one node, and "
                "dtrun asks Spark for no GPUs yet (docs/spark.md)",
                fix="leave out --procs-per-node (1)",
            )
        return every_node(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        config = {
            "launcher": self.name,
            "run_id": ctx.run_id,
            "nodes": [node.name for node in ctx.nodes],
            "procs_per_node": ctx.procs_per_node,
            "world_size": ctx.world_size,
            "master_port": ctx.master_port,
            "interface": ctx.interface,
            "start_timeout_s": ctx.join_timeout_s,
            "python": ctx.python,
            "code_dir": ctx.code_dir,
        }
        return (LaunchFile(SPARK_CONFIG, json.dumps(config, indent=2) + "\n"),)

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        context = common_context(ctx, node_rank)
        context.update(ranks_from=self.ranks_from, program=program_argv(ctx))
        return context


class TorchDistributorLauncher(_SparkLauncher):
    """pyspark.ml.torch.distributor.TorchDistributor: torchrun on every executor."""

    name = "torchdistributor"
    framework: Framework | None = Framework.TORCH
    ranks_from = "TorchDistributor's torchrun"


class HorovodSparkLauncher(_SparkLauncher):
    """horovod.spark.run: Horovod's Gloo ranks, one per Spark task."""

    name = "horovod-spark"
    framework: Framework | None = Framework.HOROVOD
    ranks_from = "horovod.spark (HOROVOD_* mapped by node_main)"
