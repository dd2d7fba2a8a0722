"""torchrun: a c10d rendezvous hosted by the first node of the point, or a static one."""

from __future__ import annotations

from dtrun.plan.launchers.base import PlanContext, Script, common_context, every_node
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import Framework, ProgramKind

# torchrun runs Python itself: a module with -m, a script as is, anything else with --no-python.
_PROGRAM_FLAGS: dict[ProgramKind, tuple[str, ...]] = {
    ProgramKind.MODULE: ("-m",),
    ProgramKind.SCRIPT: (),
    ProgramKind.EXECUTABLE: ("--no-python",),
}


# torchrun's own entry point (its console script calls the same ``main``), run by the node's
# python (docs/launchers.md "torchrun"). Once ``main`` returns, torchrun is done: its workers
# have exited, and its rendezvous store is closed (the agent holds no socket then, checked with
# `ss`). The exit handlers run (logging's flush, tempfile's clean-ups), then the process leaves
# without the interpreter's teardown of torch's modules, 0.6-0.8 s per agent here. A failure (an
# exception, a non-zero exit) leaves as torchrun's console script does. ``-c`` puts the working
# directory first on sys.path, where the console script has its own bin directory: it comes off,
# so no file of the user's code shadows a module torchrun imports.
QUICK_EXIT = (
    'import sys; sys.path[:] = [p for p in sys.path if p]; sys.argv[0] = "torchrun"; '
    "import atexit, os; from torch.distributed.run import main; main(); "
    "atexit._run_exitfuncs(); sys.stdout.flush(); sys.stderr.flush(); os._exit(0)"
)


class Torchrun:
    name = "torchrun"
    template = "launch/torchrun.sh.j2"
    framework: Framework | None = Framework.TORCH

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        return every_node(ctx)

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        return ()

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        program = ctx.program
        context = common_context(ctx, node_rank)
        context.update(
            python=ctx.python,
            quick_exit=QUICK_EXIT,
            rendezvous=ctx.options.rendezvous.value,
            rdzv_endpoint=f"{ctx.master_addr}:{ctx.rdzv_port}",
            rdzv_id=ctx.rdzv_id,
            # torch decides who hosts the c10d store by matching the endpoint against local
            # addresses, and every 127.x address matches on the embedded cluster: say it.
            rdzv_conf=f"is_host={1 if node_rank == 0 else 0},join_timeout={ctx.join_timeout_s}",
            local_addr=ctx.nodes[node_rank].address,
            program=(*_PROGRAM_FLAGS[program.kind], program.target, *program.args),
        )
        return context
