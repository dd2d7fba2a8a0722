"""The Ray engine's option: --ray ADDRESS. Spread into bench, run and exec through
``EngineOptions`` (runner/engines/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from dtrun.engines.base import WHERE_PANEL


@dataclass(frozen=True)
class RayOptions:
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run on a Ray cluster's nodes, one placement-group bundle per node, with "
            "--launcher torchrun or torchtrainer (Ray Train's TorchTrainer): its head's "
            "HOST:PORT, from a machine of the cluster (docs/ray.md).",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = None

    def check(self) -> None:
        """A --ray that is not HOST:PORT is refused before anything starts."""
        if self.ray is not None:
            from dtrun.engines.ray.session import parse_address

            parse_address(self.ray)
