"""What every launcher gets from the plan, and the interface each one implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runner import __version__
from runner.spec import EnvVar, Node


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
    workload_module: str
    workload_args: tuple[str, ...]

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.procs_per_node


class Launcher(Protocol):
    """Turns a plan context into the template context of one node's launch script."""

    name: str
    template: str  # path under templates/

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]: ...


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
        "workload_module": ctx.workload_module,
        "workload_args": ctx.workload_args,
    }
