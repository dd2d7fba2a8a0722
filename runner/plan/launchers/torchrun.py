"""torchrun: a c10d rendezvous hosted by the first node of the point, or a static one."""

from __future__ import annotations

from dtrun.plan.launchers.base import PlanContext, Script, common_context, every_node
from dtrun.plan.launchers.quickexit import quick_exit
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import Framework, ProgramKind

# torchrun runs Python itself: a module with -m, a script as is, anything else with --no-python.
_PROGRAM_FLAGS: dict[ProgramKind, tuple[str, ...]] = {
    ProgramKind.MODULE: ("-m",),
    ProgramKind.SCRIPT: (),
    ProgramKind.EXECUTABLE: ("--no-python",),
}


# torchrun's own entry point, run by the node's python (runner/plan/launchers/quickexit.py):
# its rendezvous store is closed by the time ``main`` returns (the agent holds no socket then,
# checked with `ss`), so no node leaves another without its store sooner than before.
QUICK_EXIT = quick_exit("torch.distributed.run", "torchrun")


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
