"""The embedded engine: none of --hosts, --stack, --outputs, --slurm, --spark was given."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import replace

from dtrun.cluster.readiness import check_ports_free
from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks, wait_for_nodes
from dtrun.engines.embedded.extensions import stale_lock_warnings
from dtrun.engines.embedded.inventory import (
    embedded_inventory,
    gpu_warning,
    node_cores,
    oversubscription,
)
from dtrun.spec.cluster import usable_cpus
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import EMBEDDED_MAX_LAUNCHES

NO_TASKSET = "taskset (util-linux) is not on PATH"


def taskset_refused(core: int) -> str | None:
    """Why util-linux's taskset cannot keep a node to its cores here, or None when it can: not
    on PATH, or refused an affinity (a seccomp profile or a sandbox that denies
    sched_setaffinity fails every node's launch with EPERM), tried once on ``core``."""
    if shutil.which("taskset") is None:
        return NO_TASKSET
    try:
        tried = subprocess.run(
            ["taskset", "--cpu-list", str(core), "true"], capture_output=True, text=True,
            timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"taskset cannot run here ({error})"
    if tried.returncode == 0:
        return None
    said = (tried.stderr.strip().splitlines() or [f"exit {tried.returncode}"])[-1]
    return f"taskset cannot set a CPU affinity here ({said})"


class EmbeddedEngine(Engine):
    name = "embedded"
    runs_this_python = True
    # a launch costs seconds here; the ranks share the cores, so launches spread more
    max_launches = EMBEDDED_MAX_LAUNCHES

    def selects(self, choice: ClusterChoice) -> bool:
        return True  # last in ENGINES: what no other engine selects

    @contextlib.contextmanager
    def open(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        from dtrun.engines.embedded.executor import LocalExecutor

        inventory = embedded_inventory(choice.local_nodes)
        # util-linux's taskset keeps each node to its cores; without it, or where it may not
        # set an affinity, they share them all. Each node's cores are in its inventory entry,
        # so the manifest records them.
        usable = sorted(os.sched_getaffinity(0))
        cores = node_cores(inventory, usable) if taskset_refused(usable[0]) is None else {}
        nodes = tuple(replace(node, cores=cores.get(node.name)) for node in inventory.nodes)
        inventory = replace(inventory, nodes=nodes)
        gpus = {node.name: node.gpus for node in nodes if node.gpus}
        yield Cluster(inventory, LocalExecutor(cores=cores, gpus=gpus), choice, self)

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        # MASTER_PORT sits next to the rendezvous port (LaunchRequest.master_port)
        check_ports_free(plan.master_addr, (plan.master_port - 1, plan.master_port))
        if cluster.choice.check:  # without: processes on this machine, nothing to reach
            wait_for_nodes(cluster, plan)

    def warnings(
        self, cluster: Cluster, node_counts: Sequence[int], procs_per_node: int
    ) -> list[str]:
        """Processes that would share cores; nodes that float over every core (no taskset);
        torch extension build locks a killed process left (runner/engines/embedded/extensions)."""
        nodes = cluster.inventory.nodes
        said = []
        floating = bool(nodes) and all(node.cores is None for node in nodes)
        refused = taskset_refused(min(os.sched_getaffinity(0))) if floating else None
        if refused is not None:
            said.append(
                f"{refused}: the embedded nodes share every core, and their figures spread "
                "more from launch to launch; "
                + (
                    "install util-linux to keep each node to its own cores"
                    if refused == NO_TASKSET
                    else "run dtrun where it may set a CPU affinity (sched_setaffinity) to keep "
                    "each node to its own cores"
                )
            )
        kept = [node.cores for node in nodes]
        over = oversubscription(node_counts, procs_per_node, usable_cpus(), kept)
        gpus = gpu_warning(len(nodes)) if not any(node.gpus for node in nodes) else None
        said += [warning for warning in (over, gpus) if warning is not None]
        return said + stale_lock_warnings()
