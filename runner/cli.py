"""The `dtrun` command line. The only module that prints or exits."""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from runner import __version__, cli_stack
from runner import cli_options as opts
from runner.cli_common import (
    console,
    human_output_to_stderr,
    print_json,
    print_node_line,
    user_errors,
)
from runner.cli_display import (
    RegistryBar,
    SweepDisplay,
    print_comparison,
    print_exec_summary,
    print_plan,
    print_plans,
    print_summary,
    report_table,
    sweep_json,
)
from runner.errors import DtrunError, UsageError
from runner.spec import (
    AllreduceSpec,
    BenchSpec,
    HealthGate,
    RunSpec,
    ScalingMode,
    StrategySpec,
    TrainDtype,
)

if TYPE_CHECKING:
    from runner.clusters import Cluster, ClusterChoice
    from runner.outputs import StackOutputs
    from runner.pipeline import ProgramRun, Sweep
    from runner.record import RunDir
    from runner.spec import LaunchPlan

app = typer.Typer(
    name="dtrun",
    help="Measure whether distributed training really scales: plan, launch, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold secrets
)


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
        str,
        typer.Option(help="Built-in workload on every process: train (GPT), or allreduce."),
    ] = "train",
    launcher: opts.Launcher = "torchrun",
    batch: Annotated[
        int, typer.Option(help="Sequences per process per step (strong: at the fewest nodes).")
    ] = BenchSpec.batch,
    global_batch: Annotated[
        int | None, typer.Option(help="Strong scaling: the fixed global batch.")
    ] = None,
    preset: opts.Preset = "tiny",
    layers: opts.Layers = None,
    d_model: opts.DModel = None,
    heads: opts.Heads = None,
    seq_len: opts.SeqLen = None,
    vocab: opts.Vocab = None,
    strategy: opts.Strategy = None,
    schedule: opts.Schedule = None,
    micro_batches: opts.MicroBatches = None,
    pp_size: opts.PpSize = None,
    stages_per_rank: opts.StagesPerRank = None,
    dtype: opts.Dtype = TrainDtype.AUTO,
    env: opts.Env = None,
    timeout: Annotated[float, typer.Option(help="Seconds before one launch is stopped.")] = (
        BenchSpec.timeout_s
    ),
    port: opts.Port = BenchSpec.rdzv_port,
    output: opts.Output = Path("runs"),
    run_id: opts.RunId = None,
    results: opts.Results = None,
    local_nodes: Annotated[
        int | None,
        typer.Option(help="Size of the embedded cluster (default: the largest --nodes)."),
    ] = None,
    hosts: opts.Hosts = None,
    stack: opts.Stack = None,
    outputs: opts.OutputsFile = None,
    accept_new_host_keys: opts.AcceptNewHostKeys = False,
    check: opts.Check = False,
    ready_timeout: opts.ReadyTimeout = opts.DEFAULT_READY_TIMEOUT,
    teardown: opts.Teardown = False,
    nccl_debug: opts.NcclDebug = False,
    cluster_env: opts.ClusterEnv = False,
    rendezvous: opts.RendezvousOpt = opts.DEFAULT_RENDEZVOUS,
    zero_stage: opts.ZeroStage = opts.DEFAULT_ZERO_STAGE,
    horovod_controller: opts.HorovodControllerOpt = opts.DEFAULT_HOROVOD_CONTROLLER,
    tf_strategy: opts.TfStrategyOpt = opts.DEFAULT_TF_STRATEGY,
    tf_ps: opts.TfPs = opts.DEFAULT_TF_PS,
    sizes: opts.Sizes = None,
    ar_dtype: opts.ArDtype = opts.DEFAULT_AR_DTYPE,
    ar_iters: opts.ArIters = opts.DEFAULT_AR_ITERS,
    ar_warmup: opts.ArWarmup = opts.DEFAULT_AR_WARMUP,
    busbw: opts.Busbw = True,
    health_gate: opts.HealthGateOpt = True,
    strict: opts.Strict = False,
    health_threshold: opts.HealthThreshold = None,
    health_size: opts.HealthSize = None,
    project_tokens: opts.ProjectTokens = BenchSpec.project_tokens,
    json_out: opts.Json = False,
    dry_run: opts.DryRun = False,
    quiet: opts.Quiet = False,
) -> None:
    """Run a scaling sweep and write runs/<run-id>/ with logs, results and a report.

    On the machines of --hosts, --stack or --outputs over SSH; with none of them, on the
    embedded local cluster: simulated nodes on 127.0.0.2, 127.0.0.3, ... of this machine,
    each running its real launch script.
    """
    from runner.cli_store import check_results, upload_after
    from runner.options import check_run_id, new_run_id, parse_env, parse_node_counts
    from runner.plan import validate_bench
    from runner.presets import resolve_model

    watch = _StackWatch(stack, teardown and not dry_run)
    with human_output_to_stderr(json_out), _last_word_on_billing(watch), user_errors():
        if json_out and dry_run:
            raise UsageError(
                "--json prints a sweep's summary, and --dry-run runs no sweep",
                fix="leave out one of them",
            )
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
            model=resolve_model(
                preset, layers=layers, d_model=d_model, heads=heads, seq_len=seq_len, vocab=vocab
            ),
            env=parse_env(env or []),
            rdzv_port=port,
            timeout_s=timeout,
            launch=opts.launcher_options(
                rendezvous, zero_stage, horovod_controller, tf_strategy, tf_ps
            ),
            nccl_debug=nccl_debug,
            cluster_env=cluster_env,
            strategy=StrategySpec(strategy, schedule, micro_batches, pp_size, stages_per_rank),
            dtype=dtype,
            allreduce=AllreduceSpec(sizes, ar_dtype, ar_warmup, ar_iters),
            busbw=busbw,
            health=HealthGate(health_gate, strict, health_threshold, health_size),
            project_tokens=project_tokens,
        )
        validate_bench(spec)  # before any cluster is built or any directory made
        store = check_results(results, dry_run=dry_run)  # so is the store
        choice = _choice(
            hosts, stack, outputs,
            local_nodes if local_nodes is not None else max(counts),
            accept_new_host_keys, check,
            ready_timeout, teardown,
        )  # fmt: skip
        with (
            upload_after(store, output / spec.run_id, spec.secrets()),
            _cluster(choice, watch) as cluster,
        ):
            if dry_run:
                print_plans(cluster.inventory, spec)
                return
            if choice.hosts is None and choice.stack_name is None:
                _require_packages(spec)  # the embedded nodes run this very interpreter
            sweep = _run(cluster, spec, output, quiet, json_out)
        print_summary(sweep)
        if json_out:
            print_json(sweep_json(sweep.run_dir))


def _require_packages(spec: BenchSpec) -> None:
    import importlib.util

    from runner.plan import builtin, node_packages

    strategy = builtin(spec).strategy
    for package in node_packages(spec):
        if importlib.util.find_spec(package) is None:
            needs = (
                f"--strategy {strategy.name}"
                if strategy is not None and strategy.engine == "deepspeed"
                else f"--launcher {spec.launcher}"
            )
            raise UsageError(
                f"{needs} needs {package}, and this Python has none",
                why=f"the embedded cluster's nodes run {sys.executable}",
                fix=f"install it ({sys.executable} -m pip install {package}, or ./dev setup), "
                "or pass another --strategy",
            )


def _choice(
    hosts: Path | None,
    stack: str | None,
    outputs: Path | None,
    local_nodes: int,
    accept_new: bool,
    check: bool,
    ready_timeout: float,
    teardown: bool,
) -> ClusterChoice:
    from runner.clusters import ClusterChoice

    if teardown and stack is None:
        raise UsageError(
            "--teardown destroys a Pulumi stack, and no --stack was given",
            fix="pass --stack NAME with --teardown, or leave --teardown out",
        )
    return ClusterChoice(hosts, stack, outputs, local_nodes, accept_new, check, ready_timeout)


@dataclass
class _StackWatch:
    """What a command learned about its --stack, for the last word on billing."""

    name: str | None
    teardown: bool
    outputs: StackOutputs | None = None  # read: the stack exists and bills


@contextmanager
def _cluster(choice: ClusterChoice, watch: _StackWatch) -> Iterator[Cluster]:
    from runner.clusters import open_cluster

    out = console()

    def seen(outputs: StackOutputs) -> None:
        watch.outputs = outputs

    with (
        RegistryBar(out) as registry_bar,
        open_cluster(
            choice, lambda message: out.print(f"dtrun: {message}"), seen, registry_bar
        ) as cluster,
    ):
        yield cluster


@contextmanager
def _last_word_on_billing(watch: _StackWatch) -> Iterator[None]:
    """Around a command (outside its error printing, so this comes last): with --teardown,
    destroy the stack, also after a failure or Ctrl-C; without, say that it still bills."""
    try:
        yield
    finally:
        if watch.name is not None and watch.teardown and watch.outputs is not None:
            with contextlib.suppress(typer.Exit), user_errors():
                cli_stack.destroy_and_say(watch.name)
        elif watch.name is not None and watch.outputs is not None:
            outputs = watch.outputs
            console(stderr=True).print(
                f"dtrun: stack {watch.name} is still running and billing: {outputs.node_count} x "
                f"{outputs.vm_size} and the head VM; `dtrun down --stack {watch.name}` removes it"
            )


def _run(cluster: Cluster, spec: BenchSpec, output: Path, quiet: bool, json_out: bool) -> Sweep:
    from runner.pipeline import run_sweep

    out = console()
    display = SweepDisplay(out, spec, cluster.inventory, quiet=quiet)
    try:
        with display.progress:
            return run_sweep(
                cluster.inventory, spec, output, cluster.executor, display.events(), cluster.ready
            )
    except DtrunError:
        if display.run_dir is not None:
            out.print(f"finished launches and the report are kept in {display.run_dir.path}")
            if json_out and display.run_dir.summary.exists():
                print_json(sweep_json(display.run_dir))  # scripts get the partial summary too
        raise


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
    results: opts.Results = None,
    local_nodes: Annotated[
        int | None, typer.Option(help="Size of the embedded cluster (default: --nodes).")
    ] = None,
    hosts: opts.Hosts = None,
    stack: opts.Stack = None,
    outputs: opts.OutputsFile = None,
    accept_new_host_keys: opts.AcceptNewHostKeys = False,
    check: opts.Check = False,
    ready_timeout: opts.ReadyTimeout = opts.DEFAULT_READY_TIMEOUT,
    teardown: opts.Teardown = False,
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
    from runner.cli_store import check_results, upload_after
    from runner.options import check_run_id, new_run_id, parse_command, parse_env
    from runner.plan import validate_run

    watch = _StackWatch(stack, teardown and not dry_run)
    with _last_word_on_billing(watch), user_errors():
        spec = RunSpec(
            run_id=check_run_id(run_id) if run_id is not None else new_run_id(),
            program=parse_command(command or [], Path.cwd()),
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
        store = check_results(results, dry_run=dry_run)  # before any cluster or directory
        choice = _choice(
            hosts, stack, outputs,
            local_nodes if local_nodes is not None else nodes,
            accept_new_host_keys, check,
            ready_timeout, teardown,
        )  # fmt: skip
        with (
            upload_after(store, output / spec.run_id, spec.secrets()),
            _cluster(choice, watch) as cluster,
        ):
            if dry_run:
                from runner.plan import build_run_plan

                print_plan(build_run_plan(cluster.inventory, spec.redacted()))
                return
            done = _run_program(cluster, spec, output, quiet)
        console().print(
            f"[green]ok[/] {done.plan.nnodes} node(s), {done.plan.world_size} processes via "
            f"{done.plan.launcher}: every node exited 0 in {done.wall_s:.1f} s; "
            f"logs and outputs in {done.launch_dir}"
        )


def _run_program(cluster: Cluster, spec: RunSpec, output: Path, quiet: bool) -> ProgramRun:
    from runner.pipeline import run_program

    out = console()
    inventory = cluster.inventory

    def on_begin(run_dir: RunDir, plan: LaunchPlan) -> None:
        out.print(
            f"dtrun {__version__}: run [bold]{spec.run_id}[/] on {inventory.description}, "
            f"{plan.nnodes} node(s) x {plan.procs_per_node} via {plan.launcher} -> {run_dir.path}"
        )

    def on_line(node: str, line: str) -> None:
        if not quiet:
            print_node_line(out, node, line)

    return run_program(
        inventory, spec, output, cluster.executor, on_line, on_begin, ready=cluster.ready
    )


@app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_command(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command, after --; one argument is a shell line.", show_default=False
        ),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option("--nodes", "-n", help="Only these nodes: indices or names, comma-separated."),
    ] = None,
    hosts: opts.Hosts = None,
    stack: opts.Stack = None,
    outputs: opts.OutputsFile = None,
    local_nodes: Annotated[int, typer.Option(help="Size of the embedded cluster.")] = 2,
    accept_new_host_keys: opts.AcceptNewHostKeys = False,
    ready_timeout: opts.ReadyTimeout = opts.DEFAULT_READY_TIMEOUT,
) -> None:
    """Run a command on every node at once; show each node's output and exit code.

    dtrun exec --hosts hosts.yaml -- nvidia-smi -L
    """
    from runner.options import parse_command_line, select_nodes

    with user_errors():
        line = parse_command_line(command or [])
        choice = _choice(
            hosts, stack, outputs, local_nodes, accept_new_host_keys, False, ready_timeout, False
        )
        with _cluster(choice, _StackWatch(None, False)) as cluster:
            chosen = select_nodes(cluster.inventory.nodes, nodes)
            out = console()
            answers = cluster.executor.command(
                {node.name: line for node in chosen},
                lambda node, text: print_node_line(out, node, text),
            )
    failed = print_exec_summary(chosen, answers)
    if failed:
        raise typer.Exit(1)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory, e.g. runs/<run-id>.")],
    json_out: opts.Json = False,
) -> None:
    """Rebuild summary.json, report.md, report.html and the plots from a run's saved results."""
    from runner.record import RunDir
    from runner.report import build_report

    with human_output_to_stderr(json_out), user_errors():
        built = build_report(_run_dir(run_dir))
        console().print(report_table(built))
        console().print(f"rebuilt {built.run_dir.report} and {built.run_dir.html.name}")
        if json_out:
            print_json(sweep_json(RunDir(run_dir)))


def _run_dir(path: Path) -> RunDir:
    from runner.record import RunDir

    if not (path / "manifest.json").is_file():
        if not path.is_dir():
            hint = "no such directory"
        elif (path / "run.json").is_file():
            hint = (
                "it is a `dtrun run` directory: its record is run.json and its outputs are in "
                "launch/"
            )
        else:
            hint = "it holds no manifest.json"
        raise UsageError(
            f"{path} is not a `dtrun bench` run directory",
            why=hint,
            fix="pass a directory that `dtrun bench` printed, e.g. runs/<run-id>",
        )
    return RunDir(path)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the baseline).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory.")],
    json_out: opts.Json = False,
) -> None:
    """Show two runs side by side, by node count, and what differs between their set-ups."""
    from runner.compare import compare as compare_runs
    from runner.report import analyse

    with human_output_to_stderr(json_out), user_errors():
        result = compare_runs(analyse(_run_dir(run_a)), analyse(_run_dir(run_b)))
        print_comparison(result)
        if json_out:
            print_json(result.to_json())


app.command()(cli_stack.up)
app.command()(cli_stack.down)
app.command()(cli_stack.outputs)
app.command()(cli_stack.sizes)


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
