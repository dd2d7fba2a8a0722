"""OpenMPI's mpirun, from the head node: every rank on every node through launch-env.sh.

launch-env.sh maps OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE and _LOCAL_SIZE to RANK, LOCAL_RANK,
WORLD_SIZE and LOCAL_WORLD_SIZE, so PyTorch programs need no change. On a real cluster mpirun
starts its daemons over ssh; the embedded cluster has no sshd, so mpirun's remote-shell agent is
local-rsh.sh, which starts each simulated node's daemon on this machine.
"""

from __future__ import annotations

from dtrun import __version__
from dtrun.azure.sizefacts import mpi_args_for
from dtrun.plan.launchers.base import (
    HOSTFILE,
    PlanContext,
    RankSource,
    Script,
    common_context,
    forwarded_names,
    head_only,
    hostfile,
    launch_env,
    node_ssh_options,
    ssh_port_option,
)
from dtrun.render import render
from dtrun.spec.cluster import Starter
from dtrun.spec.launchplan import CliArg, LaunchFile
from dtrun.spec.request import Framework
from dtrun.spec.text import plural

LOCAL_RSH = "local-rsh.sh"
FISH_RSH = "fish-rsh.sh"  # the agent where the login shell is fish (templates/launch)

# What OpenMPI sets in every rank it starts.
RANKS = RankSource(
    launcher="mpirun",
    rank="OMPI_COMM_WORLD_RANK",
    local_rank="OMPI_COMM_WORLD_LOCAL_RANK",
    world_size="OMPI_COMM_WORLD_SIZE",
    local_world_size="OMPI_COMM_WORLD_LOCAL_SIZE",
    node_rank=None,  # OMPI_COMM_WORLD_NODE_RANK is a rank within the node, not the node
)


class Mpirun:
    name = "mpirun"
    template = "launch/mpirun.sh.j2"
    framework: Framework | None = Framework.TORCH

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        return head_only(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        files: tuple[LaunchFile, ...] = (hostfile(ctx), launch_env(ctx, RANKS))
        if ctx.ssh is None and ctx.starter is None:
            agent = render("launch/local-rsh.sh.j2", {"version": __version__, "run_id": ctx.run_id})
            files = (*files, LaunchFile(LOCAL_RSH, agent, 0o755))
        elif ctx.ssh is not None and ctx.starter is None:
            files = (*files, fish_rsh(ctx))
        return files

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        context = common_context(ctx, node_rank)
        context.update(
            mpi_args=mpi_args(ctx),
            local_agent=ctx.ssh is None and ctx.starter is None,
            fish_rsh=FISH_RSH if ctx.ssh is not None and ctx.starter is None else "",
        )
        return context


def fish_rsh(ctx: PlanContext) -> LaunchFile:
    """fish-rsh.sh: mpirun's agent where the login shell is fish, which OpenMPI takes for sh
    (templates/launch/fish-rsh.sh.j2). It skips the plm_rsh_args words mpirun passes first."""
    assert ctx.ssh is not None
    skipped = len((*ssh_port_option(ctx.ssh), *node_ssh_options(ctx.ssh)))
    context = {"version": __version__, "run_id": ctx.run_id, "skipped": skipped}
    return LaunchFile(FISH_RSH, render("launch/fish-rsh.sh.j2", context), 0o755)


def mpi_args(ctx: PlanContext) -> tuple[CliArg, ...]:
    """mpirun's arguments, grouped, each group with the reason it is there."""
    per_node = ctx.procs_per_node
    iface = ctx.interface
    names = forwarded_names(ctx)
    return (
        CliArg(("--hostfile", HOSTFILE, "-np", str(ctx.world_size)), "every rank of every node"),
        CliArg(
            ("--map-by", f"ppr:{per_node}:node"),
            f"{plural(per_node, 'rank')} per node, node by node: launch-env.sh derives NODE_RANK "
            "from it",
        ),
        *mpi_args_for(ctx.size),
        CliArg(
            ("--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface),
            f"MPI's TCP traffic and its daemons' control channel on {iface}",
        ),
        *remote_shell(ctx),
        # -x NAME forwards the head's value, so each value is quoted once, where it is exported.
        CliArg(("-x", names[0]), "the environment contract and dtrun's settings, to every rank"),
        *(CliArg(("-x", name), "") for name in names[1:]),
    )


def remote_shell(ctx: PlanContext) -> tuple[CliArg, ...]:
    if ctx.starter is Starter.SRUN:
        return (
            CliArg(
                ("--mca", "ras", "^slurm"),
                "inside the Slurm job, mpirun starts its daemons with srun; the hostfile, not the "
                "job's task layout, says each node's ranks",
            ),
        )
    if ctx.ssh is None:
        return (
            CliArg(
                ("--mca", "plm_rsh_agent", f"./{LOCAL_RSH}", "--mca", "plm_rsh_no_tree_spawn", "1"),
                "no sshd on these nodes: local-rsh.sh starts each node's daemon on this machine, "
                "all from mpirun",
            ),
        )
    ssh = (*ssh_port_option(ctx.ssh), *node_ssh_options(ctx.ssh))
    return (
        CliArg(
            ("--mca", "plm_rsh_args", " ".join(ssh)),
            "mpirun starts its daemon on every node over ssh, with the cluster's port and key",
        ),
    )
