"""The Spark engine: --spark MASTER, whose executors are the nodes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dtrun.engines.base import Cluster, ClusterChoice, Hooks, Preview
from dtrun.engines.spark.options import SparkOptions
from dtrun.extras import need
from dtrun.spec.launchplan import LaunchPlan


class SparkEngine:
    name = "spark"

    def selects(self, choice: ClusterChoice) -> bool:
        return choice.of(SparkOptions).spark is not None

    @contextlib.contextmanager
    def open(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        need("pyspark", "spark")  # the driver runs here: exit 2 naming dtrun[spark] without it
        from dtrun.engines.spark.executor import SparkExecutor
        from dtrun.engines.spark.inventory import spark_inventory

        master = choice.of(SparkOptions).spark
        assert master is not None
        inventory = spark_inventory(master, choice.local_nodes)
        # bench, run and check name their job dtrun-RUN_ID; exec (refused: Spark runs tasks,
        # not commands) and a dry run start no application
        launches = not choice.dry_run and choice.job_name.startswith("dtrun-")
        run_id = choice.job_name.removeprefix("dtrun-") if launches else ""
        executor = SparkExecutor(
            master, f"{inventory.python_bin}/python", inventory.code_dir, run_id=run_id
        )
        try:  # one Spark application for every launch of the command (runner/engines/spark/app.py)
            if launches:
                executor.start()
            yield Cluster(inventory, executor, choice, self)
        finally:
            executor.close()

    def preview(self, cluster: Cluster) -> Preview | None:
        from dtrun.engines.spark.executor import SparkExecutor, SparkPreview

        assert isinstance(cluster.executor, SparkExecutor)
        return SparkPreview(cluster.executor, len(cluster.inventory.nodes))

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        """Spark's barrier job waits for its executors, or is refused at once."""
