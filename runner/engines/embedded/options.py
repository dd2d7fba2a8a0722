"""The embedded engine's option: how many nodes on 127.0.0.x (also the size of the allocation
--slurm asks for outside one, and how many executors a remote Spark master is asked for).
Spread into bench, run and exec through ``EngineOptions`` (runner/engines/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from dtrun.engines.base import WHERE_PANEL
from dtrun.spec.bounds import nodes_range

LOCAL_NODES = nodes_range("--local-nodes")


@dataclass(frozen=True)
class EmbeddedOptions:
    local_nodes: Annotated[
        int | None,
        LOCAL_NODES,
        typer.Option(
            help="Size of the embedded cluster, of the allocation --slurm asks for outside one, "
            "or the executors --spark asks a spark://, yarn or k8s master for "
            "(default: the nodes the command needs; exec: 2; check: 4)"
            f"{LOCAL_NODES.within}.",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = None

    def check(self) -> None:
        from dtrun.plan.checks import check_bound

        if self.local_nodes is not None:
            check_bound(LOCAL_NODES, self.local_nodes)
