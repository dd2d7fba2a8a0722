"""The embedded engine: none of --hosts, --stack, --outputs, --slurm, --spark was given."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace

from dtrun.cluster.readiness import check_ports_free
from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks, wait_for_nodes
from dtrun.engines.embedded.inventory import embedded_inventory, node_cores, oversubscription
from dtrun.spec.cluster import usable_cpus
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
        # util-linux's taskset keeps each node to its cores; without it they share them all.
        # Each node's cores are in its inventory entry, so the manifest records them.
        found = shutil.which("taskset") is not None
        cores = node_cores(inventory, sorted(os.sched_getaffinity(0))) if found else {}
        nodes = tuple(replace(node, cores=cores.get(node.name)) for node in inventory.nodes)
        inventory = replace(inventory, nodes=nodes)
        yield Cluster(inventory, LocalExecutor(cores=cores), choice, self)

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        # MASTER_PORT sits next to the rendezvous port (LaunchRequest.master_port)
        check_ports_free(plan.master_addr, (plan.master_port - 1, plan.master_port))
        if cluster.choice.check:  # without: processes on this machine, nothing to reach
            wait_for_nodes(cluster, plan)

    def warnings(
        self, cluster: Cluster, node_counts: Sequence[int], procs_per_node: int
    ) -> list[str]:
        """Processes that would share cores; nodes that float over every core (no taskset)."""
        nodes = cluster.inventory.nodes
        said = []
        if nodes and all(node.cores is None for node in nodes):
            said.append(
                "taskset (util-linux) is not on PATH: the embedded nodes share every core, and "
                "their figures spread more from launch to launch; install util-linux to keep "
                "each node to its own cores"
            )
        kept = [node.cores for node in nodes]
        over = oversubscription(node_counts, procs_per_node, usable_cpus(), kept)
        return said + ([over] if over is not None else [])
