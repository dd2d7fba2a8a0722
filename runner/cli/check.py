"""`dtrun check`: which node, which link holds a cluster back (docs/check.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dtrun.cli import options as opts
from dtrun.cli.check_output import print_report, refuse_hosts_target, write_hosts_file
from dtrun.cli.common import (
    console,
    human_output_to_stderr,
    print_json,
    print_node_line,
    user_errors,
)
from dtrun.cli.groups import grouped
from dtrun.cli.options import Where
from dtrun.cli.session import (
    StackWatch,
    choose,
    last_word_on_billing,
    opened,
    warn_oversubscribed,
)
from dtrun.spec.bounds import within
from dtrun.spec.request import RunSpec
from dtrun.spec.text import one_line, plural

if TYPE_CHECKING:
    from dtrun.engines.base import Cluster
    from dtrun.plan.resolve import ResolvedRun
    from dtrun.record.rundir import RunDir
    from dtrun.spec.launchplan import LaunchPlan
    from dtrun.sweep.check import CheckRun

app = typer.Typer()

CHECK_TIMEOUT_S = 600.0  # the workload's collectives and the launch: 4 CPU nodes take ~1 min


@app.command()
@grouped
def check(  # noqa: PLR0913 - the command's own options, beside the engines' group
    json_out: opts.Json = False,
    write_hosts: Annotated[
        Path | None,
        typer.Option(
            "--write-hosts",
            metavar="FILE",
            help="Write the hosts without the flagged ones to FILE (a new hosts file).",
            rich_help_panel=opts.OUT_PANEL,
        ),
    ] = None,
    procs_per_node: Annotated[
        int | None,
        typer.Option(
            "--procs-per-node",
            "-p",
            help="Processes per node (default: every GPU; 1 on CPUs)"
            f"{within(RunSpec, 'procs_per_node')}.",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(help=f"Seconds before the check is stopped{within(RunSpec, 'timeout_s')}."),
    ] = CHECK_TIMEOUT_S,
    port: Annotated[
        int,
        typer.Option(
            help="Rendezvous port on the first node (MASTER_PORT is port+1)"
            f"{within(RunSpec, 'rdzv_port')}."
        ),
    ] = 29400,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Directory that receives <run-id>/.")
    ] = Path("runs"),
    run_id: Annotated[
        str | None, typer.Option(help="Name of this check (default: time-stamped).")
    ] = None,
    stream: Annotated[
        bool, typer.Option("--stream", help="Stream the nodes' output (it is in their logs).")
    ] = False,
    wide: opts.Wide = False,
    *,
    where: Where,
) -> None:
    """Check every node's compute, memory and GPUs and the network between them; name the
    slow ones.

    dtrun check --hosts hosts.yaml --write-hosts good.yaml

    One launch over every node: a timed matrix multiply and copy per node, all-reduce inside
    each node, between pairs of nodes round by round and over halves of the fleet, judged by
    the median and MAD across the fleet and the size's expected figures; the slow half
    followed down the levels. Exit 0 when every node and link is ok, 5 when one is flagged
    or a group is slow at two levels running (docs/check.md).
    """
    from dtrun.cli.parse import check_run_id, new_run_id
    from dtrun.engines.base import ClusterChoice
    from dtrun.engines.registry import chosen
    from dtrun.errors import UsageError
    from dtrun.plan.checks import check_fields
    from dtrun.plan.resolve import resolve_run
    from dtrun.spec.request import Program, ProgramKind

    watch = StackWatch(where.stack, False)
    with human_output_to_stderr(json_out), last_word_on_billing(watch), user_errors():
        engine = chosen(where)
        if write_hosts is not None and not engine.logs_in:
            raise UsageError(
                f"--write-hosts writes a hosts file, and the {engine.name} engine's nodes are "
                "not hosts dtrun logs in to",
                fix="leave out --write-hosts; take the hosts the check flags out of that "
                "cluster by hand",
            )
        if write_hosts is not None:
            refuse_hosts_target(write_hosts)  # not after the check ran: refused there too
        engine.refuse_check(ClusterChoice(where))
        spec = RunSpec(
            check_run_id(run_id) if run_id is not None else new_run_id(),
            launcher=engine.launchers[0] if engine.launchers else "torchrun",
            procs_per_node=1 if procs_per_node is None else procs_per_node,
            rdzv_port=port,
            program=Program(ProgramKind.MODULE, "dtrun.workloads.check"),
            timeout_s=timeout,
        )
        check_fields(spec)  # --timeout, --port, --procs-per-node, before a cluster is asked
        choice = choose(
            where,
            4,
            job_name=f"dtrun-{spec.run_id}",
            drains=True,
            nodes_by=("check's default; --local-nodes sets it", "--local-nodes"),
        )
        with opened(choice, watch) as cluster:
            resolved = resolve_run(_per_node(spec, cluster, procs_per_node))
            # embedded nodes sharing cores: their gaps are the shared CPU's, not a node's
            warn_oversubscribed(cluster, resolved.spec, len(cluster.inventory.nodes))
            done = _check_on(cluster, resolved, output, stream)
            print_report(done, wide=wide)
            _next_steps(cluster, done, write_hosts)
        if json_out:
            print_json(done.report.to_json())
    raise typer.Exit(done.report.exit_code)


def _per_node(spec: RunSpec, cluster: Cluster, procs_per_node: int | None) -> RunSpec:
    """Every GPU of a node unless told otherwise; one process per CPU node."""
    from dataclasses import replace

    from dtrun.spec.cluster import Accelerator

    inventory = cluster.inventory
    if procs_per_node is None and inventory.accelerator is Accelerator.CUDA:
        spec = replace(spec, procs_per_node=min(node.slots for node in inventory.nodes))
    return replace(spec, nodes=len(inventory.nodes))


def _check_on(cluster: Cluster, resolved: ResolvedRun, output: Path, stream: bool) -> CheckRun:
    from dtrun.sweep.check import run_check

    out = console()

    # under --spark a node is a barrier task until the check learns its host (docs/check.md)
    unit = cluster.engine.unit

    def on_begin(run_dir: RunDir, plan: LaunchPlan) -> None:
        out.print(
            f"dtrun check: {plural(plan.nnodes, unit)} x {plan.procs_per_node} on "
            f"{cluster.inventory.description} -> {output / resolved.spec.run_id}",
            highlight=False,
        )

    def on_line(node: str, line: str) -> None:
        if stream:
            print_node_line(out, node, line)

    return run_check(cluster, resolved, output, on_line, on_begin)


def _next_steps(cluster: Cluster, done: CheckRun, write_hosts: Path | None) -> None:
    """--write-hosts, and the engine's next steps (Slurm: the exclude list, --drain-failing)."""
    flagged = [node for node in done.report.nodes if node.flagged]
    if write_hosts is not None:
        write_hosts_file(write_hosts, cluster.inventory, done, {n.host for n in flagged})
    # the nodes' own names (a failed node's host is already its name)
    name_of = {label: name for name, label in done.hosts.items()}
    reasons = {
        name_of.get(node.host, node.host): f"dtrun check {done.run_dir.path.name}: "
        f"{node.verdict.value} ({node.cause.value if node.cause else ''})"
        for node in flagged
    }
    for line in cluster.engine.after_check(cluster, reasons):
        console().print(one_line(f"dtrun: {line}"), highlight=False)
