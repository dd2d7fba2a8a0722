"""The environment every launch script exports: dtrun's settings, each with the reason it is
there, and the user's --env last. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from dtrun.azure.sizefacts import size_env
from dtrun.plan.launchers.base import HOSTFILE
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import EnvVar
from dtrun.spec.request import LaunchRequest


def base_env(threads_per_proc: int) -> tuple[EnvVar, ...]:
    return (
        EnvVar(
            "OMP_NUM_THREADS",
            str(threads_per_proc),
            "One share of the node's cores per process, so processes do not oversubscribe.",
        ),
        EnvVar(
            "PYTHONUNBUFFERED", "1", "Unbuffered output, so dtrun streams each line as written."
        ),
    )


def debug_env(nccl_debug: bool) -> tuple[EnvVar, ...]:
    if not nccl_debug:
        return ()
    return (
        EnvVar("NCCL_DEBUG", "INFO", "--nccl-debug: NCCL logs its version, network and rings."),
    )


def cluster_env(inventory: Inventory, nodes: int, procs_per_node: int) -> tuple[EnvVar, ...]:
    """The MPI-style cluster variables of --cluster-env (docs/launchers.md)."""
    selected = inventory.nodes[:nodes]
    slots = ",".join(f"{node.address}:{procs_per_node}" for node in selected)
    return (
        EnvVar("CLUSTER_NUM_WORKERS", str(nodes), "--cluster-env: nodes (workers) in this launch"),
        EnvVar("CLUSTER_GPUS_PER_WORKER", str(procs_per_node), "--cluster-env: processes per node"),
        EnvVar("CLUSTER_HOST_SLOTS", slots, "--cluster-env: every node as ADDRESS:SLOTS"),
        EnvVar(
            "CLUSTER_HOSTFILE",
            HOSTFILE,
            "--cluster-env: the MPI-style hostfile, relative to the launch directory",
        ),
        EnvVar("CLUSTER_NUM_PROCS", str(nodes * procs_per_node), "--cluster-env: processes in all"),
    )


def launch_env(inventory: Inventory, request: LaunchRequest, nodes: int) -> tuple[EnvVar, ...]:
    """Every variable dtrun exports on ``nodes`` nodes, the user's --env last."""
    selected = inventory.nodes[:nodes]
    threads = max(1, min(node.cpus for node in selected) // request.procs_per_node)
    dtrun_env = (
        *base_env(threads),
        *size_env(inventory.size),
        *debug_env(request.nccl_debug),
        *(cluster_env(inventory, nodes, request.procs_per_node) if request.cluster_env else ()),
    )
    return merge_env(dtrun_env, request.env)


def merge_env(base: Iterable[EnvVar], user: Iterable[tuple[str, str]]) -> tuple[EnvVar, ...]:
    """dtrun's settings first, the user's --env last; a user value replaces dtrun's."""
    merged: dict[str, EnvVar] = {var.key: var for var in base}
    for key, value in user:
        merged.pop(key, None)
        merged[key] = EnvVar(key, value, "")
    return tuple(merged.values())
