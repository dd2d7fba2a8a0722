"""What every launcher gets from the plan, the interface each one implements, shared pieces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dtrun import __version__
from dtrun.errors import PlanError
from dtrun.render import render
from dtrun.spec.cluster import Node, SshAccess, Starter
from dtrun.spec.launchplan import EnvVar, LaunchFile, NodeEnv
from dtrun.spec.request import Framework, LauncherOptions, Program, ProgramKind

HOSTFILE = "hostfile"  # MPI-style `HOST slots=N` lines, read by deepspeed and mpirun
LAUNCH_ENV = "launch-env.sh"  # the wrapper head-only launchers start on every node


@dataclass(frozen=True)
class PlanContext:
    """The values computed once per node count, shared by every node's launch."""

    run_id: str
    rdzv_id: str
    nodes: tuple[Node, ...]  # the nodes of this point, node rank = position
    procs_per_node: int
    master_addr: str
    master_port: int
    rdzv_port: int
    join_timeout_s: int
    python_bin: str
    code_dir: str
    env: tuple[EnvVar, ...]  # exported on every node, in order; user --env already merged last
    program: Program  # what every process runs
    options: LauncherOptions
    size: str | None = None  # catalog size of the nodes, when known
    ssh: SshAccess | None = None  # None: no sshd on the nodes, launchers use no-SSH modes
    interface: str = "eth0"
    starter: Starter | None = None  # SRUN: mpirun starts its daemons with srun
    # Exported by each node with its own value, after ``env`` (--platform-env); launch-env.sh
    # sets them again on every rank of a head-only launcher, by NODE_RANK.
    node_env: tuple[NodeEnv, ...] = ()
    # `dtrun bench -- PROGRAM`: the step hook's directory on the nodes, put first on PYTHONPATH
    # (runner/workloads/stephook/sitecustomize.py); None: no hook
    step_hook: str | None = None

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.procs_per_node

    @property
    def python(self) -> str:
        return f"{self.python_bin}/python"


@dataclass(frozen=True)
class Script:
    """One node's script in a launch: which node, and whether it only serves the others."""

    node_rank: int
    service: bool = False


class Launcher(Protocol):
    """Turns a plan context into every script and file of one launch."""

    name: str
    template: str  # path under templates/ of the per-node (or head) script
    # What the built-in workloads train with under it; None: it cannot run them.
    framework: Framework | None

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        """The nodes that run a script: all of them, or only the head."""
        ...

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        """Files written beside the scripts on every node."""
        ...

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        """The template context of that node's script."""
        ...


def ssh_port_option(ssh: SshAccess) -> tuple[str, ...]:
    """`-p PORT` when the inventory names the port; none when ~/.ssh/config (or 22) decides."""
    return ("-p", str(ssh.port)) if ssh.port is not None else ()


def node_ssh_options(ssh: SshAccess) -> tuple[str, ...]:
    """ssh options node 0 uses to reach the other nodes for a head-only launcher: the cluster's
    key and, when the inventory names one, its known_hosts file (both at the same path there)."""
    for what, path in (("key", ssh.identity_file), ("known_hosts file", ssh.known_hosts_file)):
        if path and any(char.isspace() for char in path):
            raise PlanError(
                f"the {what} path {path!r} has a space, and a head-only launcher cannot pass it",
                why="mpirun's plm_rsh_args and pdsh's PDSH_SSH_ARGS_APPEND split node 0's ssh "
                "options on spaces, so its ssh would be given a broken path",
                fix=f"move the {what} to a path without spaces (the same path on node 0), or "
                "use --launcher torchrun, which needs no ssh between nodes",
            )
    options: tuple[str, ...] = ()
    if ssh.identity_file:
        options = ("-i", ssh.identity_file)
    if ssh.known_hosts_file:
        options = (*options, "-o", f"UserKnownHostsFile={ssh.known_hosts_file}")
    return options


def every_node(ctx: PlanContext) -> tuple[Script, ...]:
    return tuple(Script(rank) for rank in range(ctx.nnodes))


def head_only(ctx: PlanContext) -> tuple[Script, ...]:
    return (Script(0),)


def common_context(ctx: PlanContext, node_rank: int) -> dict[str, object]:
    """The variables templates/launch/base.sh.j2 places; launchers add their own."""
    node = ctx.nodes[node_rank]
    return {
        "version": __version__,
        "run_id": ctx.run_id,
        "node": node,
        "node_rank": node_rank,
        "nnodes": ctx.nnodes,
        "procs_per_node": ctx.procs_per_node,
        "world_size": ctx.world_size,
        "master_addr": ctx.master_addr,
        "master_port": ctx.master_port,
        "code_dir": ctx.code_dir,
        "python_bin": ctx.python_bin,
        "env": ctx.env,
        "node_env": [EnvVar(var.key, var.values[node_rank], var.why) for var in ctx.node_env],
        "step_hook": ctx.step_hook,
    }


def program_argv(ctx: PlanContext) -> tuple[str, ...]:
    """The program as one command line, with the nodes' Python where it runs Python."""
    program = ctx.program
    head: dict[ProgramKind, tuple[str, ...]] = {
        ProgramKind.MODULE: (ctx.python, "-m", program.target),
        ProgramKind.SCRIPT: (ctx.python, program.target),
        ProgramKind.EXECUTABLE: (program.target,),
    }
    return (*head[program.kind], *program.args)


def program_split(ctx: PlanContext) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the command up to its script or module, the program's own arguments)."""
    argv = program_argv(ctx)
    cut = len(argv) - len(ctx.program.args)
    return argv[:cut], argv[cut:]


def host_slots(ctx: PlanContext) -> tuple[str, ...]:
    """`ADDRESS:SLOTS` per node, the -H form of horovodrun and the cluster variables."""
    return tuple(f"{node.address}:{ctx.procs_per_node}" for node in ctx.nodes)


def hostfile(ctx: PlanContext) -> LaunchFile:
    """MPI-style hostfile, one `ADDRESS slots=N` line per node, in node-rank order. Under Slurm
    the nodes go by their Slurm names, which mpirun hands to srun to start its daemons."""
    by_name = ctx.starter is Starter.SRUN
    lines = "".join(
        f"{node.name if by_name else node.address} slots={ctx.procs_per_node}\n"
        for node in ctx.nodes
    )
    return LaunchFile(HOSTFILE, lines)


@dataclass(frozen=True)
class RankSource:
    """The variables a head-only launcher sets per process, mapped onto the contract."""

    launcher: str  # named in the message when a variable is missing
    rank: str
    local_rank: str
    world_size: str
    local_world_size: str
    node_rank: str | None  # None: ranks are placed node by node, so RANK / LOCAL_WORLD_SIZE


def launch_env(ctx: PlanContext, source: RankSource) -> LaunchFile:
    """launch-env.sh: maps the launcher's rank variables to the contract, then runs the program.

    Whatever arguments the launcher passes to it go right after the program's script or module
    (DeepSpeed's --local_rank=N), before the program's own arguments.
    """
    mapping = {
        "RANK": source.rank,
        "LOCAL_RANK": source.local_rank,
        "WORLD_SIZE": source.world_size,
        "LOCAL_WORLD_SIZE": source.local_world_size,
    }
    if source.node_rank is not None:
        mapping["NODE_RANK"] = source.node_rank
    missing = f"is not set: start this file with {source.launcher}"
    command, args = program_split(ctx)
    context = {
        "version": __version__,
        "run_id": ctx.run_id,
        "launcher": source.launcher,
        # "${OMPI_COMM_WORLD_RANK:?...}": the launcher's value, or a clear stop without it.
        "ranks": [(name, f'"${{{var}:?{missing}}}"') for name, var in mapping.items()],
        "node_rank_set": source.node_rank is not None,
        "names": [node.name for node in ctx.nodes],
        "node_env": ctx.node_env,
        "addresses": [node.address for node in ctx.nodes],
        "command": command,
        "args": args,
    }
    return LaunchFile(LAUNCH_ENV, render("launch/launch-env.sh.j2", context), 0o755)


def forwarded_names(ctx: PlanContext) -> tuple[str, ...]:
    """Variables a head-only launcher must carry from the head to every process.

    The ranks, NODE_RANK and the node's name are not among them: launch-env.sh sets those on
    each node from the launcher's own variables.
    """
    return ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH", *(var.key for var in ctx.env))
