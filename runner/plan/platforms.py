"""--platform-env: the variables (and files) managed platforms give every node, computed from
the launch, so programs written for Azure ML, Volcano Engine or SageMaker run unchanged. Pure.

Each platform is one function from the plan's context to its variables and files, in a registry
dict. Every variable is a NodeEnv, exported by each node's script and set again by launch-env.sh
on every rank of a head-only launcher (so per-node values stay per node, and JSON values never
pass through mpirun's -x or DeepSpeed's .deepspeed_env). What each variable means on the
platform, and where dtrun's value differs, is in docs/launchers.md ("Platform environments").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dtrun.plan.launchers.base import HOSTFILE, PlanContext, host_slots
from dtrun.spec.cluster import Accelerator
from dtrun.spec.launchplan import LaunchFile, NodeEnv
from dtrun.spec.request import PlatformEnv


@dataclass(frozen=True)
class PlatformLayout:
    """What --platform-env adds to a launch."""

    env: tuple[NodeEnv, ...] = ()
    files: tuple[LaunchFile, ...] = ()
    hostfile: bool = False  # the MPI-style hostfile must be among the launch files


def _same(ctx: PlanContext, key: str, value: object, why: str) -> NodeEnv:
    return NodeEnv(key, (str(value),) * ctx.nnodes, why)


def azureml(ctx: PlanContext, accelerator: Accelerator) -> PlatformLayout:
    """Azure ML's distributed-training variables beyond the contract (which already holds its
    MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK, RANK and LOCAL_RANK)."""
    why = "--platform-env azureml"
    return PlatformLayout(
        env=(
            _same(
                ctx,
                "AZ_BATCH_MASTER_NODE",
                f"{ctx.master_addr}:{ctx.master_port}",
                f"{why}: node 0 as MASTER_ADDR:MASTER_PORT",
            ),
            _same(ctx, "AZ_BATCHAI_MPI_MASTER_NODE", ctx.master_addr, f"{why}: node 0's address"),
        )
    )


def volcano(ctx: PlanContext, accelerator: Accelerator) -> PlatformLayout:
    """Volcano Engine ML Platform's MPI-job variables and the common ones a worker reads."""
    why = "--platform-env volcano"
    addresses = [node.address for node in ctx.nodes]
    hosts = ",".join(host_slots(ctx))
    per_host = tuple(
        _same(ctx, f"MLP_WORKER_{rank}_HOST", address, f"{why}: worker {rank}'s address")
        for rank, address in enumerate(addresses)
    )
    ranks = tuple(str(rank) for rank in range(ctx.nnodes))
    env = (
        _same(ctx, "MLP_ROLE", "WORKER", f"{why}: every node is a worker"),
        NodeEnv("MLP_ROLE_INDEX", ranks, f"{why}: this worker's number (the node rank)"),
        NodeEnv(
            "MLP_WORKER_RACK_RANK_INDEX",
            ranks,
            f"{why}: its place in switch order; one rack here, so the node rank",
        ),
        NodeEnv("MLP_HOST", tuple(addresses), f"{why}: this node's address"),
        _same(ctx, "MLP_WORKER_NUM", ctx.nnodes, f"{why}: workers (nodes)"),
        _same(ctx, "MLP_WORKER_GPU", ctx.procs_per_node, f"{why}: processes (GPUs) per worker"),
        _same(ctx, "MLP_WORKER_ALL_HOSTS", ",".join(addresses), f"{why}: every worker"),
        *per_host,
        _same(ctx, "MLP_WORKER_0_PORT", ctx.master_port, f"{why}: a free port on worker 0"),
        _same(ctx, "MLP_MPI_HOSTS", hosts, f"{why}: every worker as ADDRESS:SLOTS"),
        _same(ctx, "MLP_MPI_RACK_HOSTS", hosts, f"{why}: the same, in switch order (one rack)"),
        _same(
            ctx,
            "MLP_MPI_HOSTFILE",
            HOSTFILE,
            f"{why}: the MPI hostfile, relative to the launch directory",
        ),
        _same(ctx, "MLP_MPI_NP", ctx.world_size, f"{why}: processes in all"),
    )
    return PlatformLayout(env=env, hostfile=True)


def sagemaker_base_dir(node_rank: int) -> str:
    """Node ``node_rank``'s stand-in for /opt/ml, relative to the launch directory."""
    return f"sagemaker/node-{node_rank}"


def sagemaker(ctx: PlanContext, accelerator: Accelerator) -> PlatformLayout:
    """SageMaker training's SM_* variables and each node's resourceconfig.json, under a base
    directory of its own (SAGEMAKER_BASE_DIR, the training toolkit's stand-in for /opt/ml)."""
    why = "--platform-env sagemaker"
    hosts = [node.address for node in ctx.nodes]
    configs = [
        json.dumps(
            {"current_host": host, "hosts": hosts, "network_interface_name": ctx.interface},
            separators=(",", ":"),
        )
        for host in hosts
    ]
    gpus = [node.slots if accelerator is Accelerator.CUDA else 0 for node in ctx.nodes]
    env = (
        _same(
            ctx,
            "SM_HOSTS",
            json.dumps(hosts, separators=(",", ":")),
            f"{why}: every node, in node-rank order (JSON)",
        ),
        NodeEnv("SM_CURRENT_HOST", tuple(hosts), f"{why}: this node"),
        NodeEnv("SM_NUM_GPUS", tuple(str(n) for n in gpus), f"{why}: this node's GPUs"),
        NodeEnv(
            "SM_NUM_CPUS", tuple(str(node.cpus) for node in ctx.nodes), f"{why}: this node's cores"
        ),
        _same(ctx, "SM_NETWORK_INTERFACE_NAME", ctx.interface, f"{why}: the nodes' interface"),
        NodeEnv("SM_RESOURCE_CONFIG", tuple(configs), f"{why}: resourceconfig.json's content"),
        NodeEnv(
            "SAGEMAKER_BASE_DIR",
            tuple(sagemaker_base_dir(rank) for rank in range(ctx.nnodes)),
            f"{why}: this node's /opt/ml, relative to the launch directory",
        ),
    )
    files = tuple(
        LaunchFile(
            f"{sagemaker_base_dir(rank)}/input/config/resourceconfig.json",
            config + "\n",
            node_rank=rank,
        )
        for rank, config in enumerate(configs)
    )
    return PlatformLayout(env=env, files=files)


PLATFORMS: dict[PlatformEnv, Callable[[PlanContext, Accelerator], PlatformLayout]] = {
    PlatformEnv.AZUREML: azureml,
    PlatformEnv.VOLCANO: volcano,
    PlatformEnv.SAGEMAKER: sagemaker,
}


def platform_layout(
    ctx: PlanContext,
    accelerator: Accelerator,
    platforms: Iterable[PlatformEnv],
    user_keys: Iterable[str] = (),
) -> PlatformLayout:
    """Every asked platform's variables and files, in the order asked; a variable the user
    sets with --env is left to the user's value."""
    layouts = [PLATFORMS[platform](ctx, accelerator) for platform in dict.fromkeys(platforms)]
    skip = set(user_keys)
    return PlatformLayout(
        env=tuple(var for layout in layouts for var in layout.env if var.key not in skip),
        files=tuple(file for layout in layouts for file in layout.files),
        hostfile=any(layout.hostfile for layout in layouts),
    )
