"""torchrun with a c10d rendezvous hosted by the first node of the point."""

from __future__ import annotations

from runner.launchers.base import PlanContext, common_context


class Torchrun:
    name = "torchrun"
    template = "launch/torchrun.sh.j2"

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        context = common_context(ctx, node_rank)
        context.update(
            torchrun=f"{ctx.python_bin}/torchrun",
            rdzv_endpoint=f"{ctx.master_addr}:{ctx.rdzv_port}",
            rdzv_id=ctx.rdzv_id,
            # torch decides who hosts the c10d store by matching the endpoint against local
            # addresses, and every 127.x address matches on the embedded cluster: say it.
            rdzv_conf=f"is_host={1 if node_rank == 0 else 0},join_timeout={ctx.join_timeout_s}",
            local_addr=ctx.nodes[node_rank].address,
        )
        return context
