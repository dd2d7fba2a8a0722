"""What `dtrun bench`, `run` and `exec` share around their own work: choosing and opening the
cluster, checking the results store before and uploading after, and the last word on a stack
that still bills (or its teardown). A command body says only what it does on the cluster."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

from dtrun.cli.common import (
    command_secrets,
    console,
    human_output_to_stderr,
    mute_node_lines,
    user_errors,
)
from dtrun.cli.display import RegistryBar
from dtrun.cli.options import Launching, Where
from dtrun.errors import (
    DtrunError,
    RunInterruptedError,
    UsageError,
    interrupted_exit_code,
    interruption,
)
from dtrun.spec.text import one_line, plural

if TYPE_CHECKING:
    from dtrun.cluster.outputs import StackOutputs
    from dtrun.engines.base import Cluster, ClusterChoice
    from dtrun.spec.cluster import Inventory
    from dtrun.spec.request import LaunchRequest

Opened = TypeVar("Opened")


@dataclass
class StackWatch:
    """What a command learned about its --stack, for the last word on billing."""

    name: str | None
    teardown: bool
    outputs: StackOutputs | None = None  # read: the stack exists and bills


def choose(
    where: Where,
    nodes: int,
    *,
    check: bool = False,
    teardown: bool = False,
    dry_run: bool = False,
    job_name: str = "dtrun",
    drains: bool = False,
    nodes_by: tuple[str, str] = ("the largest of --nodes", "--nodes"),
) -> ClusterChoice:
    """The cluster the options chose, for a command that needs ``nodes`` nodes; ``drains``:
    the command takes --drain-failing (bench's health gate, check's flagged nodes)."""
    from dtrun.engines.base import ClusterChoice

    where.check()  # each engine's own checks, before any cluster is asked
    if where.drain_failing and not drains:
        raise UsageError(
            "--drain-failing drains the nodes `dtrun bench`'s health gate or `dtrun check` "
            "finds below the mark, and this command has neither",
            fix="leave out --drain-failing",
        )
    if teardown and where.stack is None:
        raise UsageError(
            "--teardown destroys a Pulumi stack, and no --stack was given",
            fix="pass --stack NAME with --teardown, or leave --teardown out",
        )
    return ClusterChoice(
        options=where,  # each engine reads its own options (ClusterChoice.of)
        nodes=nodes,
        check=check,
        dry_run=dry_run,
        job_name=job_name,
        nodes_by=nodes_by,
    )


@contextmanager
def opened(choice: ClusterChoice, watch: StackWatch) -> Iterator[Cluster]:
    """The chosen cluster, open for the block; a stack's node registration drawn as a bar."""
    from dtrun.engines.base import Hooks
    from dtrun.engines.registry import open_cluster

    out = console()

    def seen(outputs: StackOutputs) -> None:
        watch.outputs = outputs
        line = expiry_notice(watch.name, outputs)
        if line:
            out.print(one_line(f"dtrun: {line}"), highlight=False)

    with (
        RegistryBar(out) as registry_bar,
        open_cluster(
            choice,
            Hooks(lambda message: out.print(one_line(f"dtrun: {message}")), seen, registry_bar),
        ) as cluster,
    ):

        def stopping(running: int) -> None:
            mute_node_lines()
            out.print(
                f"dtrun: {interruption()}: stopping {plural(running, 'node')}... (what they print "
                "while they stop goes to their logs)",
                highlight=False,
            )

        cluster.executor.on_stopping = stopping
        yield cluster


def expiry_notice(stack: str | None, outputs: StackOutputs) -> str | None:
    """When the stack removes itself; None for stacks made before expiry (outputs < 3)."""
    import datetime

    from dtrun.azure.expiry import describe

    if outputs.version < 3:
        return None
    now = datetime.datetime.now(datetime.UTC)
    return describe(stack, outputs.expires_at, outputs.idle_minutes, outputs.expiry_action, now)


@contextmanager
def last_word_on_billing(watch: StackWatch) -> Iterator[None]:
    """Around a command (outside its error printing, so this comes last): with --teardown,
    destroy the stack, also after a failure or Ctrl-C; without, say that it still bills."""
    from dtrun.cli.stack import destroy_and_say

    try:
        yield
    finally:
        if watch.name is not None and watch.teardown and watch.outputs is not None:
            with contextlib.suppress(typer.Exit), user_errors():
                destroy_and_say(watch.name)
        elif watch.name is not None and watch.outputs is not None:
            outputs = watch.outputs
            line = expiry_notice(watch.name, outputs)
            console(stderr=True).print(
                f"dtrun: stack {watch.name} is still running and billing: {outputs.node_count} x "
                f"{outputs.vm_size} and the head VM; `dtrun down --stack {watch.name}` removes it"
                + (f"; {line}" if line else ""),
                highlight=False,
            )


class Session:
    """One launch command under way: its options and the stack it may have to speak of."""

    def __init__(self, launching: Launching, where: Where, drains: bool = False) -> None:
        self.launching, self.where = launching, where
        self.watch = StackWatch(where.stack, launching.teardown and not launching.dry_run)
        self.drains = drains  # the command takes --drain-failing (bench)
        # what records a stop (Ctrl-C, SIGTERM, SIGHUP) that comes once the work is done, before
        # the run directory is uploaded (``ended``), and whether it has
        self._late: tuple[str, Callable[[str], None]] | None = None
        self._late_recorded = False

    def ended(self, what: str, record: Callable[[str], None]) -> None:
        """The work (``what``: "the sweep", "the program") ended and is recorded: a stop from
        here on (closing the cluster, uploading, printing) is recorded by ``record(error)``."""
        self._late = (what, record)

    def record_late_stop(self) -> None:
        """Record a stop after the work ended, once (nothing where the work had not ended)."""
        if self._late is None or self._late_recorded:
            return
        self._late_recorded = True
        what, record = self._late
        record(f"{interruption()} after {what} ended (tidying up)")

    @contextmanager
    def cluster(self, spec: LaunchRequest, local_nodes: int) -> Iterator[Cluster]:
        """Check the store, open the cluster, and upload the run directory when the block ends
        (however it ends). Called once the request is checked, so bad input costs nothing."""
        from dtrun.cli.ownwords import kept_secrets, refuse_own_words
        from dtrun.cli.store import check_results, upload_after

        refuse_own_words(spec)
        launching = self.launching
        from dtrun.engines.registry import chosen

        chosen(self.where).refuse_launcher(spec.launcher)
        store = check_results(launching.results, dry_run=launching.dry_run)
        choice = choose(
            self.where,
            local_nodes,
            check=launching.check,
            teardown=launching.teardown,
            dry_run=launching.dry_run,
            job_name=f"dtrun-{spec.run_id}",
            drains=self.drains,
        )
        secrets = kept_secrets(command_secrets(spec))  # as the records here are redacted
        run_path = launching.output / spec.run_id
        with upload_after(store, run_path, secrets):
            try:
                with closed_recorded(opened(choice, self.watch), run_path) as cluster:
                    refuse_own_words(spec, cluster.inventory)  # known once it is opened
                    secrets[:] = kept_secrets(secrets, cluster.inventory)  # the upload's too
                    warn_oversubscribed(cluster, spec, local_nodes)
                    yield cluster
            except (KeyboardInterrupt, RunInterruptedError):
                # stopped while the cluster closed (a stop during an unconfirmed cancel raises
                # the latter): recorded before the copy is uploaded, so the copy says what the
                # local records and the exit code say
                self.record_late_stop()
                raise


@contextmanager
def closed_recorded(opening: AbstractContextManager[Opened], run_path: Path) -> Iterator[Opened]:
    """``opening``'s cluster for the block. An error its close raises (a Slurm job whose end
    squeue cannot confirm) comes after the records said how the work ended: it is added to
    them as `cleanup`, so they say what the terminal and the exit code say. Where a signal
    had stopped the work, the exit code stays 128 + it (130, 143, 129): the error says what
    the close left, the code what ended dtrun, as shells and schedulers read it."""
    entered, body = False, None  # an error opening it, or the block's: the work's to record
    try:
        with opening as cluster:
            entered = True
            try:
                yield cluster
            except BaseException as exc:
                body = exc
                raise
    except DtrunError as exc:
        if entered and exc is not body:  # the close's own
            with contextlib.suppress(OSError, ValueError, DtrunError):  # its error stands
                if record_cleanup(run_path, exc.message):  # the report was built before it
                    report = f"`dtrun report {shlex.quote(str(run_path))}` adds this to the report"
                    exc.fix = f"{exc.fix}; {one_line(report)}" if exc.fix else one_line(report)
            if isinstance(body, KeyboardInterrupt | RunInterruptedError):
                exc.exit_code = interrupted_exit_code()
        raise


def record_cleanup(run_path: Path, message: str) -> bool:
    """``message`` as `cleanup` in the run directory's record (run.json, a sweep's runs.json)
    where this dtrun wrote it; a run directory it does not hold (another run's) is left.
    True where the run directory has a report, built before this (`dtrun report` adds it)."""
    from dtrun.record.rundir import RunDir, amend
    from dtrun.record.writer import holds_writer
    from dtrun.redact import redact_text

    if not holds_writer(run_path):
        return False
    run_dir = RunDir(run_path)
    amended = False
    for record in (run_path / "run.json", run_dir.runs):
        if record.is_file():
            amend(run_dir, record, cleanup=redact_text(message))
            amended = True
    return amended and run_dir.report.is_file()


def warn_oversubscribed(cluster: Cluster, spec: LaunchRequest, local_nodes: int) -> None:
    """The engine's warning line (the embedded cluster's nodes x processes per node beyond
    this machine's cores), and GPUs that --procs-per-node leaves idle."""
    from dtrun.cli.inert import styled
    from dtrun.spec.request import BenchSpec

    counts = spec.node_counts if isinstance(spec, BenchSpec) else (local_nodes,)
    warnings = cluster.engine.warnings(cluster, counts, spec.procs_per_node)
    idle = idle_gpus(cluster.inventory, max(counts), spec.procs_per_node)
    for warning in [*warnings, *([idle] if idle else [])]:
        console().print(styled(("warning:", "yellow"), f" {warning}"))


def idle_gpus(inventory: Inventory, nodes: int, procs_per_node: int) -> str | None:
    """What to say where every one of the first ``nodes`` GPU nodes has more GPUs than
    processes (-p defaults to 1, as torchrun's --nproc-per-node does)."""
    from dtrun.spec.cluster import Accelerator

    used = inventory.nodes[:nodes]
    gpus = min((node.slots for node in used), default=0)
    if inventory.accelerator is not Accelerator.CUDA or gpus <= procs_per_node:
        return None
    return (
        f"each node has {plural(gpus, 'GPU')} and --procs-per-node is {procs_per_node}, so "
        f"{gpus - procs_per_node} of each node's GPUs stay idle and the sweep measures "
        f"{plural(procs_per_node, 'process')} a node; pass -p {gpus} to use them all"
    )


@contextmanager
def session(
    launching: Launching, where: Where, *, json_out: bool = False, drains: bool = False
) -> Iterator[Session]:
    """A launch command's frame: user errors printed as one line, the stack's last word;
    ``drains``: the command takes --drain-failing."""
    current = Session(launching, where, drains)
    with (
        human_output_to_stderr(json_out),
        last_word_on_billing(current.watch),
        user_errors(),
    ):
        yield current
