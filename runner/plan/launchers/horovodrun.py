"""horovodrun, from the head node: every rank on every node through launch-env.sh.

Horovod reaches every node that is not one of the head's own addresses with the first `ssh` on
PATH, with Gloo (`--gloo`, no MPI needed) or through mpirun (`--mpi`). dtrun puts its own
horovod-ssh.sh there (docs/launchers.md "horovodrun"): on the embedded cluster it runs the
command on this machine, under Slurm it starts it with srun on that node, and with SSH it runs
OpenSSH with the cluster's port, key and known hosts, host keys checked (Horovod's own ssh
line accepts any host key). The built-in workloads train with Horovod itself under it
(``--strategy horovod``, runner/workloads/train_horovod.py).
"""

from __future__ import annotations

from dtrun import __version__
from dtrun.plan.launchers.base import (
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
from dtrun.render import render
from dtrun.spec.cluster import SshAccess, Starter
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import Framework, HorovodController

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
    framework: Framework | None = Framework.HOROVOD

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        return head_only(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        return (launch_env(ctx, RANKS[ctx.options.horovod_controller]), horovod_ssh(ctx))

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        context = common_context(ctx, node_rank)
        context.update(
            horovodrun=f"{ctx.python_bin}/horovodrun",
            options=(
                ("-np", str(ctx.world_size)),
                ("-H", ",".join(host_slots(ctx))),
                (f"--{ctx.options.horovod_controller.value}",),
                ("--network-interfaces", ctx.interface),
                ("--start-timeout", str(ctx.join_timeout_s)),
            ),
            controller=ctx.options.horovod_controller.value,
            launch_env=f"./{LAUNCH_ENV}",
            horovod_ssh=HOROVOD_SSH,
        )
        return context


HOROVOD_SSH = "horovod-ssh.sh"
MODES = {
    "local": (
        "on the embedded cluster, which has no sshd",
        "every simulated node is this machine, so COMMAND runs here.",
    ),
    "srun": (
        "under Slurm, through srun",
        "COMMAND runs as a one-task srun step on HOST, in this allocation.",
    ),
    "ssh": (
        "over OpenSSH with the cluster's settings",
        "OpenSSH runs with the cluster's port, key and known hosts, in batch mode, host keys "
        "checked.",
    ),
}


def ssh_option_groups(ssh: SshAccess) -> tuple[tuple[str, ...], ...]:
    """OpenSSH's options in horovod-ssh.sh over SSH (after -o BatchMode=yes), one group per
    line; Horovod's own (no password, any host key) are dropped, so the user's ~/.ssh/config
    and these decide."""
    groups: list[tuple[str, ...]] = [("-o", "StrictHostKeyChecking=yes")]
    if ssh.known_hosts_file:
        groups.append(("-o", f"UserKnownHostsFile={ssh.known_hosts_file}"))
    if ssh.identity_file:
        groups.append(("-i", ssh.identity_file, "-o", "IdentitiesOnly=yes"))
    if port := ssh_port_option(ssh):
        groups.append(port)
    return tuple(groups)


def horovod_ssh(ctx: PlanContext) -> LaunchFile:
    """horovod-ssh.sh, the `ssh` horovodrun finds first on node 0's PATH (module docstring)."""
    srun = ctx.starter is Starter.SRUN
    over_ssh = not srun and ctx.ssh is not None
    mode = "srun" if srun else "ssh" if over_ssh else "local"
    options = ssh_option_groups(ctx.ssh) if ctx.ssh is not None and over_ssh else ()
    how, what = MODES[mode]
    context = {
        "version": __version__,
        "run_id": ctx.run_id,
        "mode": mode,
        "how": how,
        "what": what,
        "ssh_options": options,
        "slurm_names": [(node.address, node.name) for node in ctx.nodes],
    }
    return LaunchFile(HOROVOD_SSH, render("launch/horovod-ssh.sh.j2", context), 0o755)
