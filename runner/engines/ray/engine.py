"""The Ray engine: --ray ADDRESS, whose nodes are the nodes (docs/ray.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks, Preview, wait_for_nodes
from dtrun.engines.ray.launcher import TorchTrainerLauncher
from dtrun.engines.ray.options import RayOptions
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.text import plural


class RayEngine(Engine):
    name = "ray"
    launchers = ("torchrun", "torchtrainer")  # each node's script in its bundle; Ray Train's
    own_launchers = (TorchTrainerLauncher(),)
    logs_in = False  # Ray's nodes, not hosts dtrun logs in to

    def selects(self, choice: ClusterChoice) -> bool:
        return choice.of(RayOptions).ray is not None

    @contextlib.contextmanager
    def open(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        from dtrun.engines.ray.executor import RayExecutor
        from dtrun.engines.ray.session import RaySession, parse_address, ray_inventory

        address = choice.of(RayOptions).ray
        assert address is not None
        parse_address(address)  # a bad address is refused before anything starts
        session = RaySession(address, choice.job_name)
        try:  # one Ray job for every launch of the command
            session.open()
            hooks.notice(f"joined the Ray cluster at {address} as job {session.job_id}")
            inventory = ray_inventory(address, session.alive())
            addresses = {node.name: node.address for node in inventory.nodes}
            cluster = Cluster(inventory, RayExecutor(session, addresses), choice, self)
            cluster.release = session.close_soon
            yield cluster
        finally:
            session.close()

    def preview(self, cluster: Cluster) -> Preview | None:
        return RayPreview(cluster)

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        """Ray places a launch's bundles on live nodes only; --check runs the health checks."""
        if cluster.choice.check:
            wait_for_nodes(cluster, plan)


class RayPreview:
    """What a dry run prints beside each plan: the cluster, and how a launch is placed."""

    def __init__(self, cluster: Cluster) -> None:
        self.allocation = (
            f"Ray cluster {cluster.inventory.source.removeprefix('ray:')}: "
            f"{plural(len(cluster.inventory.nodes), 'node')}, one Ray job for the sweep"
        )

    def launch(self, plan: LaunchPlan, workdir: str) -> str:
        nodes = ", ".join(f"{n.node.name} ({n.node.address})" for n in plan.launches)
        return (
            f"# ---- a placement group of {plural(len(plan.launches), 'STRICT_SPREAD bundle')} "
            f"(one CPU each, on {nodes}); in each, an actor runs that node's script ----"
        )
