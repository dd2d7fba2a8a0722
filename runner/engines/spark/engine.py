"""The Spark engine: --spark MASTER, whose executors are the nodes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks, Preview
from dtrun.engines.spark.options import SparkOptions
from dtrun.errors import UsageError
from dtrun.extras import need
from dtrun.spec.launchplan import LaunchPlan


class SparkEngine(Engine):
    name = "spark"
    # Spark starts one task per node and the launcher runs inside it (runner/plan/launchers/)
    launchers = ("torchdistributor", "horovod-spark")
    runs_shell = False  # Spark runs tasks, not shell scripts, on its executors
    logs_in = False  # a master's executors, not hosts dtrun logs in to
    unit = "Spark task"  # until the check learns its host (docs/check.md)

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

    def refuse_launcher(self, launcher: str) -> None:
        """--spark runs its own launchers only (the others start ranks Spark does not know of)."""
        if launcher not in self.launchers:
            raise UsageError(
                f"--launcher {launcher} cannot start ranks on Spark's executors",
                why="under --spark, Spark starts one task per node and the launcher runs inside it",
                fix="pass --launcher torchdistributor (TorchDistributor) or horovod-spark",
            )

    def refuse_check(self, choice: ClusterChoice) -> None:
        """A local-cluster's executors all run on this machine: one host, and a check compares
        hosts (the tasks of one host are that host, docs/check.md)."""
        from dtrun.engines.spark.inventory import LOCAL_CLUSTER

        master = choice.of(SparkOptions).spark
        if master is not None and LOCAL_CLUSTER.fullmatch(master) is not None:
            raise UsageError(
                f"--spark {master} runs every executor on this machine: one host, and dtrun "
                "check compares hosts",
                fix="run dtrun check --local-nodes N (the embedded cluster: N nodes of their own "
                "on this machine), or --spark spark://HOST:PORT for a cluster's hosts",
            )
