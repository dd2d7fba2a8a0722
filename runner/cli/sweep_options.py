"""What `dtrun bench` sweeps and how long each launch trains: node counts, steps, repeats,
batches, the target, the price, and --resume or --rerun."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from dtrun.cli import options as opts
from dtrun.cli.cost import MaxCost, PricePerNodeHour
from dtrun.plan.checks import launches
from dtrun.spec.bounds import within
from dtrun.spec.request import (
    DEFAULT_MAX_LAUNCHES,
    EMBEDDED_MAX_LAUNCHES,
    BenchSpec,
    ScalingMode,
)


@dataclass(frozen=True)
class SweepOptions:
    """What `dtrun bench` sweeps and how long each launch trains."""

    nodes: Annotated[
        str,
        typer.Option(
            "--nodes",
            "-n",
            help=f"Node counts to sweep, comma-separated{within(BenchSpec, 'node_counts')}.",
            rich_help_panel=opts.WHAT_PANEL,
        ),
    ] = "1,2"
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            metavar="RUN_DIR",
            help="Run what the sweep recorded in RUN_DIR still lacks (launches without a result), "
            "on this or another cluster, into RUN_DIR, and rebuild its one report.",
            show_default=False,
            rich_help_panel=opts.WHAT_PANEL,
        ),
    ] = None
    rerun: Annotated[
        Path | None,
        typer.Option(
            "--rerun",
            metavar="RUN_DIR",
            help="Run the sweep RUN_DIR records again, whole, as a new run beside it (a new run "
            "id; "
            "--output elsewhere), on this or another cluster: to repeat a measurement.",
            show_default=False,
            rich_help_panel=opts.WHAT_PANEL,
        ),
    ] = None
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="With --resume or --rerun: run the program and --env values RUN_DIR records "
            "without asking (a run directory is data: docs/security.md).",
            rich_help_panel=opts.WHAT_PANEL,
        ),
    ] = False
    steps: Annotated[
        int,
        typer.Option(
            help=f"Training steps per launch, warm-up included{within(BenchSpec, 'steps')}.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = BenchSpec.steps
    warmup: Annotated[
        int,
        typer.Option(
            help="Untimed steps at the start of each launch, fewer than --steps"
            f"{within(BenchSpec, 'warmup')}.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = BenchSpec.warmup
    mode: Annotated[
        ScalingMode,
        typer.Option(
            help="weak: fixed batch per process; strong: fixed global batch.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = ScalingMode.WEAK
    repeat: Annotated[
        int | None,
        typer.Option(
            help=f"Fixed launches per node count (3+ trims outliers){within(BenchSpec, 'repeat')}. "
            "Without it a training sweep of 2+ node counts launches until decided "
            f"(--until-decided), any other {BenchSpec.repeat} times.",
            show_default=False,
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = None
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="At each node count launch until its efficiency interval decides against the "
            "target (scales or loses), at least 2 launches, at most --max-launches; each look "
            "spends part of the 5% error (docs/report.md, Stopping when decided). The default "
            "for a training sweep of 2+ node counts without --repeat.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = False
    max_launches: Annotated[
        int | None,
        typer.Option(
            "--max-launches",
            help="Launching until decided: the most launches a node count takes (default "
            f"{DEFAULT_MAX_LAUNCHES}; {EMBEDDED_MAX_LAUNCHES} on the embedded cluster, where a "
            f"launch costs seconds){within(BenchSpec, 'max_launches')}.",
            show_default=False,
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = None
    workload: Annotated[
        str,
        typer.Option(
            help="Built-in workload on every process: train (GPT), or allreduce.",
            rich_help_panel=opts.WHAT_PANEL,
        ),
    ] = "train"
    batch: Annotated[
        int,
        typer.Option(
            help="Sequences per process per step (strong: at the fewest nodes)"
            f"{within(BenchSpec, 'batch')}.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = BenchSpec.batch
    global_batch: Annotated[
        int | None,
        typer.Option(
            help=f"Strong scaling: the fixed global batch{within(BenchSpec, 'global_batch')}.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = None
    timeout: Annotated[
        float,
        typer.Option(
            help=f"Seconds before one launch is stopped{within(BenchSpec, 'timeout_s')}.",
            rich_help_panel=opts.HOW_PANEL,
        ),
    ] = BenchSpec.timeout_s
    project_tokens: Annotated[
        int,
        typer.Option(
            help="Tokens for the report's time-to-train projection"
            f"{within(BenchSpec, 'project_tokens')}.",
            rich_help_panel=opts.OUT_PANEL,
        ),
    ] = BenchSpec.project_tokens
    target_efficiency: opts.TargetEfficiency = BenchSpec.target_efficiency
    price_per_node_hour: PricePerNodeHour = None
    max_cost: MaxCost = None


def launches_of(
    sweep: SweepOptions, node_counts: tuple[int, ...], most: int
) -> dict[str, int | bool]:
    """The spec's ``until_decided``, ``repeat`` and ``max_launches`` (runner/plan/checks.py
    launches): both counts always, as the options of their names give None when not given;
    ``most``: the engine's --max-launches (Engine.max_launches)."""
    return launches(
        until_decided=sweep.until_decided,
        repeat=sweep.repeat,
        max_launches=sweep.max_launches,
        workload=sweep.workload,
        node_counts=node_counts,
        most=most,
    )
