"""horovodrun, from the head node: every rank on every node through launch-env.sh.

Horovod reaches every node that is not one of the head's own addresses over ssh, with Gloo
(`--gloo`, no MPI needed) or through mpirun (`--mpi`). The built-in workloads keep training
with torch.distributed, so a launcher comparison measures launching, not another all-reduce;
Horovod programs run with `dtrun run --launcher horovodrun` call hvd.init() as usual.
"""

from __future__ import annotations

from runner.plan.launchers.base import (
    LAUNCH_ENV,
    PlanContext,
    RankSource,
    Script,
    common_context,
    head_only,
    host_slots,
    launch_env,
    ssh_port_option,
)
from runner.spec.launch import LaunchFile
from runner.spec.request import Framework, HorovodController

# What Horovod sets in every rank it starts: its own variables with Gloo
# (horovod/runner/gloo_run.py), OpenMPI's when it runs mpirun.
RANKS: dict[HorovodController, RankSource] = {
    HorovodController.GLOO: RankSource(
        launcher="horovodrun",
        rank="HOROVOD_RANK",
        local_rank="HOROVOD_LOCAL_RANK",
        world_size="HOROVOD_SIZE",
        local_world_size="HOROVOD_LOCAL_SIZE",
        node_rank="HOROVOD_CROSS_RANK",
    ),
    HorovodController.MPI: RankSource(
        launcher="horovodrun --mpi",
        rank="OMPI_COMM_WORLD_RANK",
        local_rank="OMPI_COMM_WORLD_LOCAL_RANK",
        world_size="OMPI_COMM_WORLD_SIZE",
        local_world_size="OMPI_COMM_WORLD_LOCAL_SIZE",
        node_rank=None,  # Horovod maps by slot: node by node in -H order
    ),
}


class Horovodrun:
    name = "horovodrun"
    template = "launch/horovodrun.sh.j2"
    framework: Framework | None = Framework.TORCH

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        return head_only(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        return (launch_env(ctx, RANKS[ctx.options.horovod_controller]),)

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        ssh: tuple[str, ...] = ()
        if ctx.ssh is not None:
            ssh = ssh_port_option(ctx.ssh)
            if ctx.ssh.identity_file:
                ssh = (*ssh, "-i", ctx.ssh.identity_file)
        context = common_context(ctx, node_rank)
        context.update(
            horovodrun=f"{ctx.python_bin}/horovodrun",
            options=(
                ("-np", str(ctx.world_size)),
                ("-H", ",".join(host_slots(ctx))),
                (f"--{ctx.options.horovod_controller.value}",),
                *((ssh,) if ssh else ()),
                ("--network-interfaces", ctx.interface),
                ("--start-timeout", str(ctx.join_timeout_s)),
            ),
            controller=ctx.options.horovod_controller.value,
            launch_env=f"./{LAUNCH_ENV}",
        )
        return context
