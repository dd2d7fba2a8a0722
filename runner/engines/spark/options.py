"""The Spark engine's option: --spark MASTER. Spread into bench, run and exec through
``EngineOptions`` (runner/engines/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from dtrun.engines.base import WHERE_PANEL


@dataclass(frozen=True)
class SparkOptions:
    spark: Annotated[
        str | None,
        typer.Option(
            "--spark",
            metavar="MASTER",
            help="Run on a Spark master's executors, one per node, with --launcher "
            "torchdistributor or horovod-spark: local-cluster[N,1,1024] (N executors here), "
            "spark://HOST:7077, yarn (docs/spark.md).",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = None

    def check(self) -> None:
        """Nothing to check before the master is asked (runner/engines/spark/inventory.py)."""
