"""The embedded engine: none of --hosts, --stack, --outputs, --slurm, --spark was given."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from dtrun.cluster.readiness import check_ports_free
from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks, wait_for_nodes
from dtrun.engines.embedded.inventory import embedded_inventory, node_cores, oversubscription
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import EMBEDDED_MAX_LAUNCHES


class EmbeddedEngine(Engine):
    name = "embedded"
    runs_this_python = True
    # a launch costs seconds here; the ranks share the cores, so launches spread more
    max_launches = EMBEDDED_MAX_LAUNCHES

    def selects(self, choice: ClusterChoice) -> bool:
        return True  # last in ENGINES: what no other engine selects

    @contextlib.contextmanager
    def open(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        import os
        import shutil

        from dtrun.engines.embedded.executor import LocalExecutor

        inventory = embedded_inventory(choice.local_nodes)
        # util-linux's taskset keeps each node to its cores; without it they share them all
        found = shutil.which("taskset") is not None
        cores = node_cores(inventory, sorted(os.sched_getaffinity(0))) if found else {}
        yield Cluster(inventory, LocalExecutor(cores=cores), choice, self)

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        # MASTER_PORT sits next to the rendezvous port (LaunchRequest.master_port)
        check_ports_free(plan.master_addr, (plan.master_port - 1, plan.master_port))
        if cluster.choice.check:  # without: processes on this machine, nothing to reach
            wait_for_nodes(cluster, plan)

    def warning(self, node_counts: Sequence[int], procs_per_node: int) -> str | None:
        """Nodes x processes per node beyond this machine's cores."""
        import os

        return oversubscription(node_counts, procs_per_node, os.cpu_count() or 1)
