"""How a sweep looks while it runs and when it ends: progress, node lines, plans, the table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun import __version__
from dtrun.cli.common import (
    console,
    echo,
    new_progress_clocks,
    node_lines_shown,
    queue_node_line,
)
from dtrun.cli.inert import styled
from dtrun.cli.tables import Column, Grid, print_grid
from dtrun.spec.launchplan import point_dir
from dtrun.spec.text import one_line, plural
from dtrun.workloads.sizes import format_size

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from dtrun.cluster.readiness import Waiting
    from dtrun.engines.base import Preview
    from dtrun.execute import Answer
    from dtrun.plan.sweep import SweepPlan
    from dtrun.record.rundir import RunDir
    from dtrun.report.resultfile import Result
    from dtrun.spec.cluster import Node
    from dtrun.spec.launchplan import LaunchPlan
    from dtrun.spec.outcome import Health, RunResult
    from dtrun.sweep.run import SweepEvents


def print_sweep_plan(
    sweep: SweepPlan, preview: Preview | None = None, run_dir: Path | None = None
) -> None:
    """The whole sweep as it would run: the health gate's launches, then every point with its
    repeats, then the environment the manifest records (secrets already redacted). An engine's
    ``preview`` adds its allocation request and how each launch starts (Slurm's srun lines)."""
    if preview is not None:
        echo(f"# ==== allocation\n{preview.allocation}")
    gate = sweep.gate
    if isinstance(gate, str):
        echo(f"# ==== health gate: skipped: {gate}")
    else:
        echo(
            f"# ==== health gate: {plural(len(gate.checks), 'launch')}, each node alone with "
            f"{plural(gate.procs_per_node, 'process')} at {gate.size}, pass mark "
            f"{gate.threshold_gbs:g} GB/s ({gate.threshold_source})"
        )
        for check in gate.checks:
            echo(f"# ==== health gate launch -> {check.workdir}")
            print_plan(check.plan, preview, str((run_dir or Path()) / check.workdir))
    # Each point once, however many times it repeats: the repeats run the same scripts, and a
    # plan printed per repeat grows with --repeat (docs/bench.md, Bounds).
    repeat = sweep.spec.launches
    for plan in sweep.points:
        first, last = point_dir(plan.nnodes, 0), point_dir(plan.nnodes, repeat - 1)
        dirs = first if repeat == 1 else f"{first} to {last}, the same scripts in each"
        launches = plural(repeat, "launch")
        if sweep.spec.until_decided:  # runner/report/sequential.py
            launches = f"2 to {launches} (until decided), round by round; up to {launches}"
        echo(f"# ==== point: {plural(plan.nnodes, 'node')}, {launches} -> {dirs}")
        print_plan(plan, preview, str((run_dir or Path()) / first))
    echo("# ==== environment recorded in manifest.json (the largest point's)")
    for var in sweep.environment:
        echo(one_line(f"{var.key}={var.value}"))  # a value's line break as \\n: one line


def print_plan(plan: LaunchPlan, preview: Preview | None = None, workdir: str = "") -> None:
    """Each script and launch file of one plan, under a header naming it; with an engine's
    ``preview``, how it starts the launch in ``workdir`` first."""
    if preview is not None:
        echo(preview.launch(plan, workdir))
    where = f"{plural(plan.nnodes, 'node')} via {plan.launcher}, world size {plan.world_size}"
    for launch in plan.launches:
        node = launch.node
        echo(
            one_line(
                f"# ---- {plural(plan.nnodes, 'node')}: {launch.script_name} on {node.name} "
                f"({node.address}) via {plan.launcher}, world size {plan.world_size} ----"
            )
        )
        echo(launch.script)
    for file in plan.files:
        echo(one_line(f"# ---- {where}: launch file {file.name} (every node) ----"))
        echo(file.content)


# How far back the sweep's time left looks for its pace: every launch of any sweep.
SWEEP_PACE_S = 7 * 24 * 3600.0


class SweepDisplay:
    """A rich progress bar over the sweep, with each node's output streamed above it."""

    def __init__(self, console: Console, plan: SweepPlan, *, quiet: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.spec = plan.spec
        self.inventory = plan.inventory
        self.quiet = quiet
        self.run_dir: RunDir | None = None
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("elapsed,"),
            # from the mean time between finished launches (from the second one on)
            TimeRemainingColumn(),
            TextColumn("left"),
            console=console,
            # Redrawing is for people watching a terminal; logs and pipes get the final state.
            auto_refresh=console.is_terminal,
            # the whole sweep's pace: rich's default (the last 30 s) holds no two launches of
            # a minute each, and would never estimate
            speed_estimate_period=SWEEP_PACE_S,
        )
        total = len(plan.launches)
        self.task = self.progress.add_task("planning", total=total)
        self.wait_lines = WaitLines(console)

    def on_waiting(self, waiting: Waiting) -> None:
        """Nodes not all answering before a launch: the bar says so live (with the seconds
        waited), and a line is printed when who answered changes."""
        self.progress.update(self.task, description=waiting.describe())
        self.wait_lines(waiting)

    def events(self) -> SweepEvents:
        from dtrun.sweep.run import SweepEvents

        return SweepEvents(
            on_begin=self.on_begin,
            on_line=self.on_line,
            on_start=self.on_start,
            on_done=self.on_done,
            on_gate_node=self.on_gate_node,
            on_health=self.on_health,
        )

    def on_begin(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        spec = self.spec
        self.console.print(
            styled(
                f"dtrun {__version__}: run ",
                (spec.run_id, "bold"),
                f" on {self.inventory.description}, nodes {','.join(map(str, spec.node_counts))}"
                f", {spec.mode.value} scaling -> {run_dir.path}",
            )
        )

    def on_line(self, node: str, line: str) -> None:
        if not self.quiet:
            queue_node_line(self.console, node, line)

    def on_start(self, plan: LaunchPlan, repeat: int) -> None:
        new_progress_clocks()
        self.progress.update(
            self.task,
            description=f"{plural(plan.nnodes, 'node')}, {plural(plan.world_size, 'process')}, "
            f"launch {repeat + 1}",
        )

    def on_done(self, run: RunResult, result: Result | None) -> None:
        from dtrun.report.results import TrainResult

        node_lines_shown()  # the launch's lines before what dtrun says of it
        self.progress.advance(self.task)
        label = f"{plural(run.nodes, 'node')}, launch {run.repeat + 1}"
        if result is None:
            self.console.print(
                styled(("x", "red"), f" {label}: {run.status.value} after {run.wall_s:.1f} s")
            )
            return
        if isinstance(result, TrainResult):
            from dtrun.report.stats import launch_tokens_per_s, median_step

            busbw = (
                f", busbw {result.busbw.at_gradient.in_place.busbw:.2f} GB/s"
                if result.busbw
                else ""
            )
            unit = result.program.unit if result.program is not None else "tokens"
            what = (
                f"{launch_tokens_per_s(result):,.0f} {unit}/s at the median step "
                f"({median_step(result) * 1000:.1f} ms, n = {result.timed_steps}){busbw}"
            )
            from dtrun.report.launchnoise import disturbed

            if disturbed(result.noise):  # runner/report/launchnoise.py: kept_launches
                what += "; timed in steal or other load: left out where 2 others are quiet"
            if result.program is not None and result.program.timing == "whole program":
                # no rank's step record: no torch optimizer stepped where the hook ran
                what += (
                    " (whole-program time, start-up included: no process recorded a torch "
                    "optimizer step)"
                )
        else:
            what = (
                f"busbw {result.largest.in_place.busbw:.2f} GB/s at "
                f"{format_size(result.largest.size)}, peak {result.peak_busbw:.2f} GB/s"
            )
        self.console.print(
            styled(("ok", "green"), f" {label}: {what}, {result.proof}, {run.wall_s:.1f} s")
        )
        if isinstance(result, TrainResult) and result.program and result.program.probe_error:
            # a failure, not progress: said under --quiet too, as the report says it
            console(stderr=True).print(
                one_line(f"dtrun: warning: {label}: {result.program.probe_error}"),
                highlight=False,
                soft_wrap=True,
            )

    def on_gate_node(self, node: Node, index: int, total: int) -> None:
        self.progress.update(
            self.task, description=f"health gate: {node.name} ({index + 1} of {total})"
        )

    def on_health(self, health: Health) -> None:
        style = {"passed": "green", "warned": "yellow", "failed": "red"}.get(health.status, "dim")
        self.console.print(styled((health.describe(), style)))


class WaitLines:
    """Prints a look at the nodes when who answered changes (and at the first look), so a
    log shows the wait without a line every poll."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.last: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def __call__(self, waiting: Waiting) -> None:
        state = (waiting.answered, tuple(label for label, _ in waiting.missing))
        if state != self.last:
            self.console.print(one_line(f"dtrun: {waiting.describe()}"), highlight=False)
            self.last = state


class RegistryBar:
    """A progress bar while a stack's nodes boot and register: ready nodes of those wanted.

    Use as a context manager around the cluster's opening; the bar stops once every node is
    ready (before the sweep's own bar starts) or when the block ends, whichever comes first.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> RegistryBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def __call__(self, registered: int, ready: int, wanted: int, waited: float) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        if self.task is None:
            if ready >= wanted:
                return  # every node was ready at the first look: nothing to watch
            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                auto_refresh=self.console.is_terminal,
            )
            self.progress.start()
            self.task = self.progress.add_task("nodes ready", total=wanted)
        if self.progress is None:
            return
        self.progress.update(
            self.task,
            completed=ready,
            description=f"nodes ready ({registered} of {wanted} registered)",
        )
        if ready >= wanted:
            self.stop()


def print_exec_summary(
    nodes: Sequence[Node], answers: dict[str, Answer], *, wide: bool = False
) -> int:
    """A table of every node's exit code (or why it could not run); returns how many failed.
    The error wraps, breaking a word too long for it (an algorithm list, a path), and stays;
    the address goes first when the terminal is narrow."""
    from rich.text import Text

    columns = (Column("node", 10, "left", wrap=True), Column("address", 5, "left", wrap=True),
               Column("exit", 9), Column("error", 8, "left", wrap=True, fold=True))  # fmt: skip
    rows = []
    failed = 0
    for node in nodes:
        answer = answers[node.name]
        ok = answer.error is None and answer.exit_code == 0
        failed += not ok
        exit_code = "-" if answer.exit_code is None else str(answer.exit_code)
        rows.append((node.name, node.address, Text(exit_code, style="" if ok else "red"),
                     answer.error or ""))  # fmt: skip
    print_grid(console(), Grid(columns, rows, hint="--wide shows every column"), wide=wide)
    if failed:
        console(stderr=True).print(f"dtrun: {failed} of {plural(len(nodes), 'node')} failed")
    return failed
