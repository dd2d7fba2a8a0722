"""`dtrun check` on an open cluster: which nodes answer, one launch of the check workload over
them (again without a node whose launch failed, which is then named), and the verdicts
(runner/check/judge.py), written to runs/<run-id>/check.json (docs/check.md)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.check.expected import Thresholds, expected_for
from dtrun.check.judge import judge_check
from dtrun.check.model import Cause, CheckReport, Verdict
from dtrun.check.result import Measured, load
from dtrun.check.stopped import (
    CHECK_RECORD,
    CHECK_SCHEMA,
    CheckStatus,
    Progress,
    stopped_record,
    unrecorded_record,
)
from dtrun.errors import (
    DamagedRunError,
    DtrunError,
    NodeFailedError,
    RunDirWriteError,
    RunError,
    UsageError,
)
from dtrun.execute import LineSink, LogCut, discard
from dtrun.execute.guard import guarded
from dtrun.plan.check import CHECK_DIR, CheckSettings, plan_check
from dtrun.record.ended import guard_command
from dtrun.record.rundir import RunDir, create_run_dir
from dtrun.record.writefail import unwritten, write_error
from dtrun.spec.cluster import Inventory, Node, Starter
from dtrun.spec.launchplan import RESULT_FILE, LaunchPlan
from dtrun.spec.outcome import NodeResult

if TYPE_CHECKING:
    from dtrun.engines.base import Cluster
    from dtrun.plan.resolve import ResolvedRun

RETRIES = 2  # launches again without a node whose launch failed, at most this often


@dataclass(frozen=True)
class CheckRun:
    report: CheckReport
    run_dir: RunDir
    launch_dir: Path
    wall_s: float
    hosts: dict[str, str]  # node name -> host, as the user named it
    measured: Measured


def host_labels(inventory: Inventory) -> dict[str, str]:
    """Each node's host as the hosts file, stack or scheduler names it: the host it logs in
    to (with :port where two share a host; a stack's node: the address it registered), else
    the node's own name (Slurm's, embedded; Spark's until the check ran: spark_labels)."""
    stack = inventory.source.startswith("stack:")
    logins = Counter(_login(node, stack) for node in inventory.nodes)
    labels = {}
    for node in inventory.nodes:
        login = _login(node, stack)
        if login is None:
            labels[node.name] = node.name
        elif logins[login] > 1 and node.ssh_port is not None:
            labels[node.name] = f"{login}:{node.ssh_port}"
        else:
            labels[node.name] = login
    return labels


def _login(node: Node, stack: bool) -> str | None:
    """The host dtrun logs in to: a stack's nodes are reached at their registered address
    (runner/cluster/outputs.py, inventory_from_stack)."""
    return node.ssh_host or (node.address if stack else None)


def spark_labels(measured: Measured, labels: dict[str, str]) -> dict[str, str]:
    """Spark's nodes by the host of the executor each ran on, as Spark names its executors
    (its barrier task's number, spark-N, says nothing of the machine). The workload makes the
    tasks of one host one node (runner/workloads/check.py, Fleet); where Spark did not say an
    executor's host, so two nodes share the inventory's placeholder, the node's own name."""
    hosts = Counter(measured.addresses)
    named = dict(labels)
    for name, address in zip(measured.names, measured.addresses, strict=True):
        if address and hosts[address] == 1:
            named[name] = address
    return named


def one_spark_host(measured: Measured, tasks: int) -> None:
    """A RunError when Spark ran every task of the check on one host: a check compares hosts,
    and one host has none to be compared with (no verdict its figures would support)."""
    if tasks < 2 or len(measured.names) != 1:
        return
    host = measured.addresses[0] if measured.addresses else measured.names[0]
    raise RunError(
        f"Spark ran the check's {tasks} tasks on one host, {host}",
        why="dtrun check compares hosts, and the tasks of one host are that host",
        fix="give the application executors on two or more hosts (more workers, or "
        "spark.executor.cores below a worker's cores) and run again",
    )


def answering(cluster: Cluster, labels: dict[str, str]) -> tuple[tuple[Node, ...], dict[str, str]]:
    """The nodes that run a shell command, and why each other one is out."""
    nodes = cluster.inventory.nodes
    try:
        answers = cluster.executor.command({node.name: "true" for node in nodes})
    except UsageError:  # an engine that runs tasks, not shells: Spark gave its live executors
        return nodes, {}
    out = {}
    for node in nodes:
        answer = answers[node.name]
        if answer.error is not None or answer.exit_code != 0:
            out[labels[node.name]] = answer.error or f"`true` exited {answer.exit_code}"
    return tuple(n for n in nodes if labels[n.name] not in out), out


def _out_of(error: RunError) -> tuple[str | None, str]:
    """The node a launch's ``error`` puts out of the check, and why: one whose launch failed,
    or one lost mid-check while the others are still held; (None, "") for any other error."""
    if isinstance(error, NodeFailedError):
        return error.node, f"its launch failed: {error.message}"
    if error.lost_node is not None and error.others_held:
        return error.lost_node, f"lost during the check: {error.what}: {error.why}"
    return None, ""


def _out_label(
    starter: Starter | None, plan: LaunchPlan, labels: dict[str, str], error: RunError, name: str
) -> str:
    """The label of a node put out of the check: where tasks learn their hosts as they run
    (Starter.TASKS; spark_labels), its address when no other node shares it, as the nodes
    measured are labelled (the host the launch's results learned, else where it was placed);
    else its label as it was."""
    if starter is not Starter.TASKS:
        return labels[name]
    learned = {result.node: result.address for result in error.node_results}
    where = {node.name: learned.get(node.name) or node.address for node in plan.every_node}
    addresses = Counter(where.values())
    placed = where.get(name, "")
    return placed if placed and addresses[placed] == 1 else labels[name]


def _not_the_disk(error: RunError, root: Path, ended: list[NodeResult]) -> None:
    """Raise the full disk, not the node, where a node's launch failed because its disk could
    not take its result.json (runner/record/writefail.py ``unwritten``): no node is put out of
    the check for it, and no launch is tried again on a disk that holds nothing more. Each
    node's end goes to ``ended``, for check.json."""
    explained = unwritten(error, root)
    if explained is not None:
        ended.extend(error.node_results)
        raise explained from None


def failed_earlier(report: CheckReport, again: dict[str, str]) -> CheckReport:
    """Each host an earlier attempt put out and a later one measured, one row: failed (its
    launch failed), its figures, and why first. Two rows, failed and measured, said both."""
    nodes = tuple(
        replace(node, verdict=Verdict.FAILED, cause=Cause.UNREACHABLE,
                evidence=(again[node.host], *node.evidence))
        if node.host in again else node
        for node in report.nodes
    )  # fmt: skip
    return replace(report, nodes=nodes)


def _result(workdir: Path, launched: tuple[NodeResult, ...]) -> Measured:
    """Rank 0's result; missing or damaged after a launch every node exited 0 from, the check
    failed (exit 1), each node's end kept for check.json."""
    try:
        return load(workdir / RESULT_FILE)
    except DamagedRunError as exc:
        error = RunError(
            "the check's launch ended without a result to judge",
            why=f"{exc.what}: {exc.why}",
            fix=f"read the node logs in {workdir}, and run dtrun check again",
        )
        error.node_results = launched
        raise error from None


def run_check(
    cluster: Cluster,
    resolved: ResolvedRun,
    output: Path,
    on_line: LineSink = discard,
    on_begin: Callable[[RunDir, LaunchPlan], None] | None = None,
    settings: CheckSettings | None = None,
) -> CheckRun:
    inventory = cluster.inventory
    settings = settings or CheckSettings.for_inventory(inventory)
    labels = host_labels(inventory)
    run_dir = create_run_dir(output, resolved.spec.run_id)
    started = time.monotonic()
    unreachable: dict[str, str] = {}
    ended: list[NodeResult] = []  # how each node ended where a full disk stopped the launch
    # SIGKILL runs none of the code below: the guard writes check.json (record/ended.py)
    with guarded(guard_command(run_dir.path / CHECK_RECORD, unrecorded_record())):
        try:
            return _checked(cluster, resolved, run_dir, started, labels, unreachable, ended,
                            on_line, on_begin, settings)  # fmt: skip
        except (DtrunError, KeyboardInterrupt) as stop:  # a damaged result.json among them
            wall = time.monotonic() - started
            record = stopped_record(stop, wall, unreachable, labels, inventory.source, ended)
            # atomic, no link followed; a full disk keeps the stop's own error and exit code
            with contextlib.suppress(RunDirWriteError):
                run_dir.write_json(run_dir.path / CHECK_RECORD, record)
            raise


def _checked(  # noqa: PLR0913 - run_check's state, handed on
    cluster: Cluster,
    resolved: ResolvedRun,
    run_dir: RunDir,
    started: float,
    labels: dict[str, str],
    unreachable: dict[str, str],
    ended: list[NodeResult],
    on_line: LineSink,
    on_begin: Callable[[RunDir, LaunchPlan], None] | None,
    settings: CheckSettings,
) -> CheckRun:
    inventory = cluster.inventory
    workdir = run_dir.path / CHECK_DIR
    nodes, answered = answering(cluster, labels)
    unreachable.update(answered)
    put_out: list[str] = []  # each node a failed launch put out of the check, and why
    for attempt in range(RETRIES + 1):
        if not nodes:
            raise RunError(
                "no node could run the check",
                why="; ".join(f"{host}: {why}" for host, why in unreachable.items()),
                fix="bring the nodes back (dtrun exec -- true shows which answer) and run again",
            )
        plan = plan_check(resolved, inventory, nodes, settings)
        if on_begin is not None:
            on_begin(run_dir, plan)
        run_dir.makedirs(workdir)
        (workdir / RESULT_FILE).unlink(missing_ok=True)
        timeout = resolved.spec.timeout_s or float(resolved.join_timeout_s)
        progress = Progress(on_line)  # which node stopped making progress, at a timeout
        try:
            cluster.ready(plan)
            progress.start()
            launched = cluster.executor.run(plan, workdir, timeout_s=timeout, on_line=progress)
            break
        except OSError as exc:  # an executor's write: a full disk, the run directory removed
            explained = write_error(exc, run_dir.path)
            if explained is None:
                raise
            ended.extend(exc.node_results if isinstance(exc, LogCut) else ())
            raise explained from None
        except RunError as exc:
            _not_the_disk(exc, run_dir.path, ended)
            progress.name_hung(exc, timeout, labels)
            name, why = _out_of(exc)
            failed = next((n for n in nodes if n.name == name), None)
            if failed is None or attempt == RETRIES or len(nodes) < 2:
                if put_out:  # a retry's failure: say what the check went on without, and why
                    exc.why = "; ".join([*filter(None, [exc.why]), *put_out])
                raise
            labels[failed.name] = _out_label(inventory.starter, plan, labels, exc, failed.name)
            unreachable[labels[failed.name]] = why
            put_out.append(f"this launch ran without {labels[failed.name]}, {why}")
            nodes = tuple(n for n in nodes if n is not failed)
    measured = _result(workdir, launched)
    if inventory.starter is Starter.TASKS:  # the tasks learn their hosts as they run
        one_spark_host(measured, plan.nnodes)
        labels = spark_labels(measured, labels)
    # a host put out that a later attempt measured (Spark put a task on a new executor there)
    seen = {labels.get(name, name) for name in measured.names}
    again = {host: why for host, why in unreachable.items() if host in seen}
    report = judge_check(
        measured,
        labels,
        {host: why for host, why in unreachable.items() if host not in again},
        Thresholds.for_device(measured.device),
        expected_for(inventory.size, plan.procs_per_node),
    )
    report = failed_earlier(report, again)
    wall = time.monotonic() - started
    run_dir.write_json(
        run_dir.path / CHECK_RECORD,
        {"schema": CHECK_SCHEMA, **report.to_json(), "wall_s": wall,
         "settings": dict(measured.settings), "source": inventory.source,
         "status": CheckStatus.COMPLETED},
    )  # fmt: skip
    return CheckRun(report, run_dir, workdir, wall, labels, measured)
