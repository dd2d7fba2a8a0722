"""The `dtrun` command line. The only module that prints or exits."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from runner import __version__
from runner import cli_options as opts
from runner.errors import DtrunError
from runner.spec import BenchSpec, ModelSpec, RunSpec, ScalingMode

if TYPE_CHECKING:
    from rich.console import Console

    from runner.pipeline import ProgramRun, Sweep, SweepEvents
    from runner.record import RunDir
    from runner.results import TrainResult
    from runner.spec import Inventory, LaunchPlan, RunResult

app = typer.Typer(
    name="dtrun",
    help="Measure whether distributed training really scales: plan, launch, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold secrets
)


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Print dtrun's own errors as one message and exit with their code; bugs keep tracebacks."""
    try:
        yield
    except DtrunError as exc:
        from rich.markup import escape

        _console(stderr=True).print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dtrun {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Measure whether distributed training really scales: plan, launch, report."""


@app.command()
def bench(
    nodes: Annotated[
        str, typer.Option("--nodes", "-n", help="Node counts to sweep, comma-separated.")
    ] = "1,2",
    procs_per_node: opts.ProcsPerNode = 1,
    steps: Annotated[int, typer.Option(help="Training steps per launch, warm-up included.")] = (
        BenchSpec.steps
    ),
    warmup: Annotated[int, typer.Option(help="Untimed steps at the start of each launch.")] = (
        BenchSpec.warmup
    ),
    mode: Annotated[
        ScalingMode,
        typer.Option(help="weak: fixed batch per process; strong: fixed global batch."),
    ] = ScalingMode.WEAK,
    repeat: Annotated[int, typer.Option(help="Launches per node count (3+ trims outliers).")] = 1,
    workload: Annotated[
        str, typer.Option(help="Built-in workload run on every process.")
    ] = "train",
    launcher: opts.Launcher = "torchrun",
    batch: Annotated[
        int, typer.Option(help="Sequences per process per step (strong: at the fewest nodes).")
    ] = BenchSpec.batch,
    global_batch: Annotated[
        int | None, typer.Option(help="Strong scaling: the fixed global batch.")
    ] = None,
    layers: Annotated[int, typer.Option(help="Transformer layers.")] = ModelSpec.layers,
    d_model: Annotated[int, typer.Option(help="Model width.")] = ModelSpec.d_model,
    heads: Annotated[int, typer.Option(help="Attention heads (must divide --d-model).")] = (
        ModelSpec.heads
    ),
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence.")] = ModelSpec.seq_len,
    vocab: Annotated[int, typer.Option(help="Vocabulary size.")] = ModelSpec.vocab,
    env: opts.Env = None,
    timeout: Annotated[float, typer.Option(help="Seconds before one launch is stopped.")] = (
        BenchSpec.timeout_s
    ),
    port: opts.Port = BenchSpec.rdzv_port,
    output: opts.Output = Path("runs"),
    run_id: opts.RunId = None,
    local_nodes: Annotated[
        int | None,
        typer.Option(help="Size of the embedded cluster (default: the largest --nodes)."),
    ] = None,
    nccl_debug: opts.NcclDebug = False,
    cluster_env: opts.ClusterEnv = False,
    rendezvous: opts.RendezvousOpt = opts.DEFAULT_RENDEZVOUS,
    zero_stage: opts.ZeroStage = opts.DEFAULT_ZERO_STAGE,
    horovod_controller: opts.HorovodControllerOpt = opts.DEFAULT_HOROVOD_CONTROLLER,
    tf_strategy: opts.TfStrategyOpt = opts.DEFAULT_TF_STRATEGY,
    tf_ps: opts.TfPs = opts.DEFAULT_TF_PS,
    dry_run: opts.DryRun = False,
    quiet: opts.Quiet = False,
) -> None:
    """Run a scaling sweep and write runs/<run-id>/ with logs, results and a report.

    With no cluster given it runs on the embedded local cluster: simulated nodes on
    127.0.0.2, 127.0.0.3, ... of this machine, each running its real launch script.
    """
    from runner.inventory import embedded_inventory
    from runner.options import check_run_id, new_run_id, parse_env, parse_node_counts
    from runner.plan import validate_bench

    with user_errors():
        counts = parse_node_counts(nodes)
        spec = BenchSpec(
            run_id=check_run_id(run_id) if run_id is not None else new_run_id(),
            node_counts=counts,
            procs_per_node=procs_per_node,
            workload=workload,
            launcher=launcher,
            mode=mode,
            steps=steps,
            warmup=warmup,
            repeat=repeat,
            batch=batch,
            global_batch=global_batch,
            model=ModelSpec(layers, d_model, heads, seq_len, vocab),
            env=parse_env(env or []),
            rdzv_port=port,
            timeout_s=timeout,
            launch=opts.launcher_options(
                rendezvous, zero_stage, horovod_controller, tf_strategy, tf_ps
            ),
            nccl_debug=nccl_debug,
            cluster_env=cluster_env,
        )
        validate_bench(spec)  # before any cluster is built or any directory made
        inventory = embedded_inventory(local_nodes if local_nodes is not None else max(counts))
        if dry_run:
            _print_plans(inventory, spec)
            return
        sweep = _run(inventory, spec, output, quiet)
    _print_summary(sweep)


def _print_plans(inventory: Inventory, spec: BenchSpec) -> None:
    """Every node's script for every node count, secret-looking --env values redacted."""
    from runner.pipeline import plan_sweep

    for plan in plan_sweep(inventory, spec.redacted()).values():
        _print_plan(plan)


def _print_plan(plan: LaunchPlan) -> None:
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


def _run(inventory: Inventory, spec: BenchSpec, output: Path, quiet: bool) -> Sweep:
    from runner.execute.local import LocalExecutor
    from runner.pipeline import run_sweep

    console = _console()
    display = SweepDisplay(console, spec, inventory, quiet=quiet)
    try:
        with display.progress:
            return run_sweep(inventory, spec, output, LocalExecutor(), display.events())
    except DtrunError:
        if display.run_dir is not None:
            console.print(f"finished launches and the report are kept in {display.run_dir.path}")
        raise


NODE_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


def print_node_line(console: Console, node: str, line: str) -> None:
    """One line of a node's output, prefixed [node-i] in that node's colour."""
    from rich.text import Text

    index = int(node.rsplit("-", 1)[-1]) if node[-1:].isdigit() else 0
    style = NODE_STYLES[index % len(NODE_STYLES)]
    console.print(Text.assemble((f"[{node}] ", style), line), soft_wrap=True)


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


def _print_summary(sweep: Sweep) -> None:
    from rich.table import Table

    console = _console()
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
    console.print(table)
    console.print(f"report: {sweep.run_dir.report}")


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="Your program and its arguments, after --.", show_default=False),
    ] = None,
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="Nodes to run on.")] = 1,
    procs_per_node: opts.ProcsPerNode = 1,
    launcher: opts.Launcher = "torchrun",
    env: opts.Env = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds before the run is stopped (default: none).")
    ] = None,
    port: opts.Port = RunSpec.rdzv_port,
    output: opts.Output = Path("runs"),
    run_id: opts.RunId = None,
    local_nodes: Annotated[
        int | None, typer.Option(help="Size of the embedded cluster (default: --nodes).")
    ] = None,
    nccl_debug: opts.NcclDebug = False,
    cluster_env: opts.ClusterEnv = False,
    rendezvous: opts.RendezvousOpt = opts.DEFAULT_RENDEZVOUS,
    zero_stage: opts.ZeroStage = opts.DEFAULT_ZERO_STAGE,
    horovod_controller: opts.HorovodControllerOpt = opts.DEFAULT_HOROVOD_CONTROLLER,
    tf_strategy: opts.TfStrategyOpt = opts.DEFAULT_TF_STRATEGY,
    tf_ps: opts.TfPs = opts.DEFAULT_TF_PS,
    dry_run: opts.DryRun = False,
    quiet: opts.Quiet = False,
) -> None:
    """Run your own program on every node with the chosen launcher.

    dtrun run --launcher deepspeed --nodes 2 -- python my_train.py --my-args

    It writes runs/<run-id>/launch/ (scripts, launch files, node logs, and what the program
    writes to its working directory) and runs/<run-id>/run.json.
    """
    from runner.inventory import embedded_inventory
    from runner.options import check_run_id, new_run_id, parse_command, parse_env
    from runner.plan import validate_run

    with user_errors():
        spec = RunSpec(
            run_id=check_run_id(run_id) if run_id is not None else new_run_id(),
            program=parse_command(command or []),
            nodes=nodes,
            procs_per_node=procs_per_node,
            launcher=launcher,
            env=parse_env(env or []),
            rdzv_port=port,
            timeout_s=timeout,
            launch=opts.launcher_options(
                rendezvous, zero_stage, horovod_controller, tf_strategy, tf_ps
            ),
            nccl_debug=nccl_debug,
            cluster_env=cluster_env,
        )
        validate_run(spec)
        inventory = embedded_inventory(local_nodes if local_nodes is not None else nodes)
        if dry_run:
            from runner.plan import build_run_plan

            _print_plan(build_run_plan(inventory, spec.redacted()))
            return
        done = _run_program(inventory, spec, output, quiet)
    _console().print(
        f"[green]ok[/] {done.plan.nnodes} node(s), {done.plan.world_size} processes via "
        f"{done.plan.launcher}: every node exited 0 in {done.wall_s:.1f} s; "
        f"logs and outputs in {done.launch_dir}"
    )


def _run_program(inventory: Inventory, spec: RunSpec, output: Path, quiet: bool) -> ProgramRun:
    from runner.execute.local import LocalExecutor
    from runner.pipeline import run_program

    console = _console()

    def on_begin(run_dir: RunDir, plan: LaunchPlan) -> None:
        console.print(
            f"dtrun {__version__}: run [bold]{spec.run_id}[/] on {inventory.description}, "
            f"{plan.nnodes} node(s) x {plan.procs_per_node} via {plan.launcher} -> {run_dir.path}"
        )

    def on_line(node: str, line: str) -> None:
        if not quiet:
            print_node_line(console, node, line)

    return run_program(inventory, spec, output, LocalExecutor(), on_line, on_begin)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory, e.g. runs/<run-id>.")],
) -> None:
    """Rebuild summary.json, report.md and the plot of a run from its saved results."""
    from runner.record import RunDir
    from runner.report import build_report

    with user_errors():
        built = build_report(RunDir(run_dir))
    typer.echo(f"rebuilt {built.run_dir.report} ({len(built.rows)} node counts)")


StackName = Annotated[
    str, typer.Option("--stack", "-s", help="Pulumi stack; Pulumi.<stack>.yaml holds its settings.")
]


def _echo_raw(line: str) -> None:
    typer.echo(line.rstrip("\n"))


@app.command()
def up(stack: StackName) -> None:
    """Create or update a stack's Azure cluster (pulumi up) and print its outputs."""
    from runner.stack import check_stack_name
    from runner.stack import up as stack_up

    with user_errors():
        name = check_stack_name(stack)
        result = stack_up(name, _echo_raw)
    _print_outputs(result.shown())
    typer.echo(
        f"the cluster bills while it runs: `dtrun down --stack {name}` removes all of it; "
        f"`dtrun outputs --stack {name} --save cluster.json` keeps its outputs"
    )


@app.command()
def down(stack: StackName) -> None:
    """Destroy every resource of a stack (pulumi destroy); safe to run again."""
    from runner.stack import check_stack_name
    from runner.stack import down as stack_down

    with user_errors():
        name = check_stack_name(stack)
        destroyed = stack_down(name, _echo_raw)
    if not destroyed:
        typer.echo(f"nothing to destroy: stack {name} holds no resources")
        return
    typer.echo(f"destroyed {len(destroyed)} resources of stack {name}; nothing of it bills now:")
    for line in destroyed:
        typer.echo(f"  {line}")


@app.command()
def outputs(
    stack: StackName,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (secrets masked).")] = False,
    save: Annotated[
        Path | None,
        typer.Option(help="Write the outputs, secrets included, to this file (mode 0600)."),
    ] = None,
) -> None:
    """Print a stack's outputs (the versioned contract dtrun reads); secrets are masked."""
    import json

    from runner.stack import check_stack_name
    from runner.stack import outputs as stack_outputs

    with user_errors():
        result = stack_outputs(check_stack_name(stack))
        if save is not None:
            _save_private(save, json.dumps(result.values, indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(result.shown(), indent=2))
    else:
        _print_outputs(result.shown())
    if save is not None:
        typer.echo(f"saved to {save} (mode 0600: it holds the cluster's private key)")


def _save_private(path: Path, text: str) -> None:
    import os

    from runner.errors import OutputDirError

    try:
        path.unlink(missing_ok=True)  # created afresh, so it is never readable by others
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
    except OSError as exc:
        raise OutputDirError(
            f"cannot write {path}",
            why=exc.strerror or str(exc),
            fix="pass --save with a writable path",
        ) from None


def _print_outputs(values: dict[str, object]) -> None:
    width = max((len(key) for key in values), default=0)
    for key, value in values.items():
        typer.echo(f"{key:<{width}}  {value}")


@app.command()
def sizes() -> None:
    """List the InfiniBand VM sizes dtrun knows: GPUs, InfiniBand, image, expected busbw."""
    from rich.table import Table

    from runner.catalog import SIZES, known_sizes, retirement_warning

    table = Table(title="InfiniBand sizes (shared/FACTS.md)", title_justify="left")
    for column in ("size", "GPUs", "InfiniBand", "image", "busbw 1 VM", "note"):
        table.add_column(column)
    usable = set(known_sizes())
    for size in SIZES.values():
        gpus = f"{size.gpu_count}x {size.gpu.model}" if size.gpu else "-"
        ib = f"{size.ib_ports}x {size.ib_name} {size.ib_gbps} Gb/s"
        busbw = f"{size.busbw_single_node_gbs:g} GB/s" if size.busbw_single_node_gbs else "-"
        note = (
            retirement_warning(size) or ""
            if size.name in usable
            else f"not usable: retired {size.retired_on}"
        )
        table.add_row(size.name, gpus, ib, size.image.sku, busbw, note)
    _console().print(table)


def main() -> None:
    try:
        app()
    finally:
        # Nothing is collected after this point: move every object out of the collector's
        # reach, so interpreter shutdown does not walk matplotlib's and torch's object graphs
        # (a tenth of a second, every run).
        gc.freeze()


if __name__ == "__main__":
    main()
