"""`dtrun run` and `dtrun exec`: your own program once on every node with a launcher, and a command
on every node at once."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dtrun import __version__
from dtrun.cli import options as opts
from dtrun.cli.bench import launch_request, run_id_of
from dtrun.cli.common import (
    command_secrets,
    console,
    node_lines_shown,
    print_node_line,
    queue_node_line,
    typed_command,
    user_errors,
)
from dtrun.cli.display import (
    WaitLines,
    print_exec_summary,
    print_plan,
)
from dtrun.cli.groups import grouped
from dtrun.cli.inert import styled
from dtrun.cli.options import Launching, Where
from dtrun.cli.session import StackWatch, choose, opened, session
from dtrun.redact import remember_secrets, secret_args
from dtrun.spec.bounds import within
from dtrun.spec.request import RunSpec
from dtrun.spec.text import plural

if TYPE_CHECKING:
    from dtrun.engines.base import Cluster
    from dtrun.plan.resolve import ResolvedRun
    from dtrun.record.rundir import RunDir
    from dtrun.spec.launchplan import LaunchPlan
    from dtrun.sweep.program import ProgramRun


app = typer.Typer()


@app.command(context_settings={"allow_interspersed_args": False})
@grouped
def run(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="Your program and its arguments, after --.", show_default=False),
    ] = None,
    nodes: Annotated[
        int, typer.Option("--nodes", "-n", help=f"Nodes to run on{within(RunSpec, 'nodes')}.")
    ] = 1,
    timeout: Annotated[
        float | None,
        typer.Option(
            help=f"Seconds before the run is stopped (default: none){within(RunSpec, 'timeout_s')}."
        ),
    ] = None,
    *,
    launching: Launching,
    where: Where,
) -> None:
    """Run your own program on every node with the chosen launcher.

    dtrun run --launcher deepspeed --nodes 2 -- python my_train.py --my-args

    It writes runs/<run-id>/launch/ (scripts, launch files, node logs, and what the program
    writes to its working directory) and runs/<run-id>/run.json.
    """
    from dtrun.cli.parse import parse_command
    from dtrun.plan.resolve import resolve_run
    from dtrun.plan.sweep import plan_run
    from dtrun.record.rundir import record_stop_after_run

    with session(launching, where) as current:
        run_id = run_id_of(launching)
        program = parse_command(command or [], Path.cwd())
        spec = RunSpec(
            run_id,
            **launch_request(launching),
            program=program,
            nodes=nodes,
            timeout_s=timeout,
        )
        # never printed, recorded or uploaded, even in an error
        remember_secrets(command_secrets(spec))
        resolved = resolve_run(spec)
        try:
            with current.cluster(spec, nodes) as cluster:
                if launching.dry_run:
                    workdir = launching.output / run_id / "launch"
                    print_plan(
                        plan_run(resolved.redacted(), cluster.inventory),
                        cluster.preview,
                        str(workdir),
                    )
                    return
                done = _run_program(cluster, resolved, launching)
                current.ended("the program", partial(record_stop_after_run, done.run_dir))
            _say_ok(done)
        except KeyboardInterrupt:
            current.record_late_stop()
            raise


def _say_ok(done: ProgramRun) -> None:
    stopped = sum(node.stopped_after_worker0 for node in done.nodes)
    ended = f"node 0 exited 0, {plural(stopped, 'node')} stopped after it" if stopped else (
        "every node exited 0"
    )  # fmt: skip
    console().print(
        styled(
            ("ok", "green"),
            f" {plural(done.plan.nnodes, 'node')}, "
            f"{plural(done.plan.world_size, 'process')} via "
            f"{done.plan.launcher}: {ended} in {done.wall_s:.1f} s; "
            f"logs and outputs in {done.launch_dir}",
        )
    )


def _run_program(cluster: Cluster, resolved: ResolvedRun, launching: Launching) -> ProgramRun:
    from dtrun.sweep.program import run_program

    out = console()
    inventory = cluster.inventory
    cluster.on_wait = WaitLines(out)

    def on_begin(run_dir: RunDir, plan: LaunchPlan) -> None:
        out.print(
            styled(
                f"dtrun {__version__}: run ",
                (resolved.spec.run_id, "bold"),
                f" on {inventory.description}, {plural(plan.nnodes, 'node')} x "
                f"{plan.procs_per_node} via {plan.launcher} -> {run_dir.path}",
            )
        )

    def on_line(node: str, line: str) -> None:
        if not launching.quiet:
            queue_node_line(out, node, line)

    def program_there(plan: LaunchPlan) -> None:
        from dtrun.cluster.program import check_program

        if cluster.engine.runs_shell:  # not Spark's tasks
            nodes = plan.every_node
            cluster.contacted = time.monotonic()  # the readiness wait counts from here
            held = partial(cluster.executor.command, hold=True)  # the staging's session too
            cluster.answered = check_program(held, resolved.spec.program, nodes)

    try:
        return run_program(
            resolved, inventory, launching.output, cluster.executor, on_line, on_begin,
            cluster.ready, program_there, command=typed_command(),
        )  # fmt: skip
    finally:  # its lines before what dtrun says of it
        node_lines_shown()


@app.command("exec", context_settings={"allow_interspersed_args": False})
@grouped
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
    wide: opts.Wide = False,
    *,
    where: Where,
) -> None:
    """Run a command on every node at once; show each node's output and exit code.

    dtrun exec --hosts hosts.yaml -- nvidia-smi -L
    """
    from dtrun.cli.parse import parse_command_line, select_nodes

    with user_errors():
        line = parse_command_line(command or [])
        words = tuple(command or [])  # their secrets: a node may print them back (bash -x)
        remember_secrets(secret_args(words))
        with opened(
            choose(where, 2, nodes_by=("exec's default; --local-nodes sets it", "--local-nodes")),
            StackWatch(None, False),
        ) as cluster:
            chosen = select_nodes(cluster.inventory.nodes, nodes)
            out = console()
            answers = cluster.executor.command(
                {node.name: line for node in chosen},
                lambda node, text: print_node_line(out, node, text),
            )
    failed = print_exec_summary(chosen, answers, wide=wide)
    if failed:
        raise typer.Exit(1)
