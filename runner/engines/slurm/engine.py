"""The Slurm engine: --slurm, on this shell's Slurm (an allocation found or asked for) or, with
--stack/--outputs, on a stack's own Slurm through its head."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from dtrun.engines.base import Cluster, ClusterChoice, Drain, Engine, Hooks, Preview, wait_for_nodes
from dtrun.engines.common.stack import StackOptions
from dtrun.engines.slurm.options import SlurmOptions
from dtrun.spec.launchplan import LaunchPlan


class SlurmEngine(Engine):
    name = "slurm"

    def selects(self, choice: ClusterChoice) -> bool:
        return choice.of(SlurmOptions).slurm

    @contextlib.contextmanager
    def open(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        # here, not at the top: every command imports the engine registry, few use Slurm
        from dtrun.engines.slurm.job import open_slurm, stack_head

        where = choice.of(StackOptions)  # --stack or --outputs: the stack's own Slurm
        if where.stack_name is None:
            with open_slurm(self, choice, hooks.notice) as cluster:
                yield cluster
            return
        from dtrun.engines.inputs import stack_outputs

        outputs = stack_outputs(where.stack, where.outputs)  # a stack's own Slurm, through its head
        hooks.on_outputs(outputs)
        with (
            stack_head(where.stack_name, outputs) as head,
            open_slurm(self, choice, hooks.notice, head) as cluster,
        ):
            yield cluster

    def preview(self, cluster: Cluster) -> Preview | None:
        from dtrun.engines.slurm.executor import SlurmExecutor
        from dtrun.engines.slurm.job import allocation_line
        from dtrun.engines.slurm.preview import SlurmPreview

        assert isinstance(cluster.executor, SlurmExecutor)
        return SlurmPreview(cluster.executor, allocation_line(cluster.choice))

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        if cluster.choice.check:  # without: Slurm gave the job these nodes, they are up
            wait_for_nodes(cluster, plan)

    def drain(self, cluster: Cluster, run_id: str) -> Drain | None:
        """With --drain-failing, the Slurm executor drains the nodes below the gate's mark."""
        from dtrun.engines.slurm.executor import SlurmExecutor
        from dtrun.engines.slurm.options import SlurmOptions

        if not cluster.choice.of(SlurmOptions).drain_failing:
            return None

        executor = cluster.executor
        assert isinstance(executor, SlurmExecutor)
        return lambda nodes: executor.drain(nodes, run_id)

    def after_check(self, cluster: Cluster, flagged: Mapping[str, str]) -> list[str]:
        """The next job's --exclude, and with --drain-failing the flagged nodes drained."""
        from dtrun.engines.slurm.executor import SlurmExecutor
        from dtrun.engines.slurm.options import SlurmOptions

        executor = cluster.executor
        assert isinstance(executor, SlurmExecutor)
        if not flagged:
            return []
        lines = [f"next Slurm job: --exclude {','.join(flagged)}"]
        drain = cluster.choice.of(SlurmOptions).drain_failing
        return [*lines, executor.drain_hosts(flagged)] if drain else lines
