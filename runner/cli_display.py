"""How a sweep looks while it runs and when it ends: progress, node lines, plans, the table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

from runner import __version__
from runner.cli_common import console, print_node_line

if TYPE_CHECKING:
    from rich.console import Console

    from runner.execute import Answer
    from runner.pipeline import Sweep, SweepEvents
    from runner.record import RunDir
    from runner.results import TrainResult
    from runner.spec import BenchSpec, Inventory, LaunchPlan, Node, RunResult


def print_plans(inventory: Inventory, spec: BenchSpec) -> None:
    """Every node's script for every node count, secret-looking --env values redacted."""
    from runner.pipeline import plan_sweep

    for plan in plan_sweep(inventory, spec.redacted()).values():
        print_plan(plan)


def print_plan(plan: LaunchPlan) -> None:
    """Each script and launch file of one plan, under a header naming it."""
    where = f"{plan.nnodes} node(s) via {plan.launcher}, world size {plan.world_size}"
    for launch in plan.launches:
        node = launch.node
        typer.echo(
            f"# ---- {plan.nnodes} node(s): {launch.script_name} on {node.name} ({node.address}) "
            f"via {plan.launcher}, world size {plan.world_size} ----"
        )
        typer.echo(launch.script)
    for file in plan.files:
        typer.echo(f"# ---- {where}: launch file {file.name} (every node) ----")
        typer.echo(file.content)


class SweepDisplay:
    """A rich progress bar over the sweep, with each node's output streamed above it."""

    def __init__(
        self, console: Console, spec: BenchSpec, inventory: Inventory, *, quiet: bool
    ) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = console
        self.spec = spec
        self.inventory = inventory
        self.quiet = quiet
        self.run_dir: RunDir | None = None
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            # Redrawing is for people watching a terminal; logs and pipes get the final state.
            auto_refresh=console.is_terminal,
        )
        total = len(spec.node_counts) * spec.repeat
        self.task = self.progress.add_task("planning", total=total)

    def events(self) -> SweepEvents:
        from runner.pipeline import SweepEvents

        return SweepEvents(
            on_begin=self.on_begin,
            on_line=self.on_line,
            on_start=self.on_start,
            on_done=self.on_done,
        )

    def on_begin(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        spec = self.spec
        self.console.print(
            f"dtrun {__version__}: run [bold]{spec.run_id}[/] on {self.inventory.description}, "
            f"nodes {','.join(map(str, spec.node_counts))}, {spec.mode.value} scaling "
            f"-> {run_dir.path}"
        )

    def on_line(self, node: str, line: str) -> None:
        if not self.quiet:
            print_node_line(self.console, node, line)

    def on_start(self, plan: LaunchPlan, repeat: int) -> None:
        self.progress.update(
            self.task,
            description=f"{plan.nnodes} node(s), {plan.world_size} processes, launch {repeat + 1}",
        )

    def on_done(self, run: RunResult, result: TrainResult | None) -> None:
        self.progress.advance(self.task)
        label = f"{run.nodes} node(s), launch {run.repeat + 1}"
        if result is None:
            self.console.print(f"[red]x[/] {label}: {run.status.value} after {run.wall_s:.1f} s")
            return
        self.console.print(
            f"[green]ok[/] {label}: {result.tokens_per_s:,.0f} tokens/s, "
            f"step p50 {result.step_time_p50 * 1000:.1f} ms, {result.proof}, {run.wall_s:.1f} s"
        )


def print_summary(sweep: Sweep) -> None:
    from rich.table import Table

    out = console()
    table = Table(title="scaling", title_justify="left")
    for column in ("nodes", "processes", "tokens/s", "speedup", "efficiency", "communication"):
        table.add_column(column, justify="left" if column == "communication" else "right")
    report = sweep.report
    for row in report.rows if report else ():
        table.add_row(
            str(row.nodes),
            str(row.world_size),
            f"{row.tokens_per_s:,.0f}",
            f"{row.speedup:.2f}x",
            f"{row.efficiency:.0%}",
            row.proof,
        )
    out.print(table)
    out.print(f"report: {sweep.run_dir.report}")


def print_exec_summary(nodes: Sequence[Node], answers: dict[str, Answer]) -> int:
    """A table of every node's exit code (or why it could not run); returns how many failed."""
    from rich.table import Table

    table = Table(title_justify="left")
    for column in ("node", "address", "exit", "error"):
        table.add_column(column)
    failed = 0
    for node in nodes:
        answer = answers[node.name]
        ok = answer.error is None and answer.exit_code == 0
        failed += not ok
        exit_code = "-" if answer.exit_code is None else str(answer.exit_code)
        style = "" if ok else "red"
        table.add_row(node.name, node.address, f"[{style}]{exit_code}[/]" if style else exit_code,
                      answer.error or "")  # fmt: skip
    console().print(table)
    if failed:
        console(stderr=True).print(f"dtrun: {failed} of {len(nodes)} node(s) failed")
    return failed
