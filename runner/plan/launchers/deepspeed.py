"""DeepSpeed's launcher: from the head node over pdsh/ssh, or on every node with --no_ssh.

With SSH between the nodes (a real cluster), only node 0 runs a script: `deepspeed --hostfile`
starts deepspeed.launcher.launch on every node over pdsh, with the environment of
.deepspeed_env (pdsh forwards nothing else, docs/facts.md §8), and each rank runs
launch-env.sh, which maps DeepSpeed's CROSS_RANK and LOCAL_SIZE onto the contract. Without SSH
(the embedded cluster), every node runs `deepspeed --no_ssh --node_rank=i` with the same hostfile.
"""

from __future__ import annotations

from dataclasses import replace

from dtrun import __version__
from dtrun.errors import PlanError
from dtrun.plan.launchers.base import (
    HOSTFILE,
    LAUNCH_ENV,
    PlanContext,
    RankSource,
    Script,
    common_context,
    every_node,
    head_only,
    hostfile,
    launch_env,
    node_ssh_options,
)
from dtrun.plan.launchers.quickexit import quick_exit
from dtrun.render import render
from dtrun.spec.launchplan import EnvVar, LaunchFile
from dtrun.spec.request import Framework, ProgramKind

# DeepSpeed's own entry point, leaving once it returns (runner/plan/launchers/quickexit.py)
QUICK_EXIT = quick_exit("deepspeed.launcher.runner", "deepspeed")

DEEPSPEED_ENV = ".deepspeed_env"
PDSH_SSH = "pdsh-ssh.sh"  # the `ssh` pdsh finds first on node 0's PATH (templates/launch)

# What deepspeed.launcher.launch sets in every rank it starts (deepspeed/launcher/launch.py).
RANKS = RankSource(
    launcher="deepspeed",
    rank="RANK",
    local_rank="LOCAL_RANK",
    world_size="WORLD_SIZE",
    local_world_size="LOCAL_SIZE",
    node_rank="CROSS_RANK",
)

# DeepSpeed runs Python itself: a module with --module, a script as is, the rest with --no_python.
_PROGRAM_FLAGS: dict[ProgramKind, tuple[str, ...]] = {
    ProgramKind.MODULE: ("--module",),
    ProgramKind.SCRIPT: (),
    ProgramKind.EXECUTABLE: ("--no_python",),
}

# DeepSpeed writes each .deepspeed_env value into pdsh's remote command, stripped and, when it
# holds more than plain characters, inside double quotes, where these would be interpreted by
# the remote shell (deepspeed/launcher/multinode_runner.py, add_export).
_UNSAFE_IN_DOUBLE_QUOTES = frozenset('"$`\\\n\r')


class DeepSpeedLauncher:
    name = "deepspeed"
    template = "launch/deepspeed.sh.j2"
    framework: Framework | None = Framework.DEEPSPEED

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        return every_node(ctx) if ctx.ssh is None else head_only(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        if ctx.ssh is None:
            return (hostfile(ctx),)
        return (
            hostfile(ctx),
            deepspeed_env(ctx.env, ctx.step_hook),
            launch_env(ctx, RANKS),
            pdsh_ssh(ctx),
        )

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        context = common_context(ctx, node_rank)
        program = ctx.program
        common = (
            f"--hostfile={HOSTFILE}",
            f"--master_addr={ctx.master_addr}",
            f"--master_port={ctx.master_port}",
        )
        if ctx.ssh is None:
            options: tuple[str, ...] = (*common, "--no_ssh", f"--node_rank={node_rank}")
            argv = (*_PROGRAM_FLAGS[program.kind], program.target, *program.args)
        else:
            options = (
                *common,
                "--launcher=pdsh",
                *((f"--ssh_port={ctx.ssh.port}",) if ctx.ssh.port is not None else ()),
                # DeepSpeed's own ssh check ignores identity files (docs/facts.md §8); pdsh
                # uses them.
                "--no_ssh_check",
                # With one node DeepSpeed would skip pdsh and .deepspeed_env and start it
                # locally; forced, the 1-node point of a sweep launches as the others do.
                *(("--force_multi",) if ctx.nnodes == 1 else ()),
            )
            argv = ("--no_python", f"./{LAUNCH_ENV}")
        context.update(
            python=ctx.python,
            quick_exit=QUICK_EXIT,
            over_ssh=ctx.ssh is not None,
            ssh_append=" ".join(node_ssh_options(ctx.ssh)) if ctx.ssh else "",
            pdsh_ssh=PDSH_SSH,
            options=options,
            program=argv,
        )
        return context


def pdsh_ssh(ctx: PlanContext) -> LaunchFile:
    """pdsh-ssh.sh: carries DeepSpeed's command past the node's login shell, which may be csh,
    where DeepSpeed's `export KEY=VALUE;` fails (templates/launch/pdsh-ssh.sh.j2)."""
    context = {"version": __version__, "run_id": ctx.run_id}
    return LaunchFile(PDSH_SSH, render("launch/pdsh-ssh.sh.j2", context), 0o755)


def deepspeed_env(env: tuple[EnvVar, ...], step_hook: str | None = None) -> LaunchFile:
    """`.deepspeed_env`: KEY=VALUE lines DeepSpeed exports on every node (no comments allowed).

    DeepSpeed exports these after the head's own PYTHON* variables, so a --env PYTHONPATH
    here would replace the step hook's directory the head's script put first: it goes with
    the hook's directory before it, as the node scripts compose it (base.sh.j2)."""
    if step_hook is not None:
        env = tuple(
            replace(var, value=f"{step_hook}:{var.value}") if var.key == "PYTHONPATH" else var
            for var in env
        )
    for var in env:
        if var.value != var.value.strip() or _UNSAFE_IN_DOUBLE_QUOTES & set(var.value):
            raise PlanError(
                f"{var.key}'s value cannot reach the other nodes through DeepSpeed's "
                f"{DEEPSPEED_ENV}",
                why="DeepSpeed strips each value and puts it in pdsh's remote command inside "
                'double quotes, where $, `, \\, " and line breaks would be interpreted',
                fix="pass a value without those characters or outer spaces, or another launcher",
            )
    lines = "".join(f"{var.key}={var.value}\n" for var in env)
    return LaunchFile(DEEPSPEED_ENV, lines, 0o600)  # may hold --env secrets
