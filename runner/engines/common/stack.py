"""A Pulumi stack's cluster, as --stack or --outputs names it: the SSH engine runs on its nodes,
the Slurm engine on its own Slurm through its head. Spread into bench, run and exec through the
SSH engine's options (runner/engines/ssh/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from dtrun.engines.base import WHERE_PANEL


@dataclass(frozen=True)
class StackOptions:
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack",
            "-s",
            help="Run on the cluster of this Pulumi stack.",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = None
    outputs: Annotated[
        Path | None,
        typer.Option(
            "--outputs",
            help="Run on the cluster whose outputs this file holds (dtrun outputs --save).",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = None

    @property
    def stack_name(self) -> str | None:
        """--stack, or the stack whose outputs --outputs holds (the file's stem)."""
        if self.stack is not None:
            return self.stack
        return self.outputs.stem if self.outputs is not None else None
