"""The Spark engine's executor: each launch is one barrier stage on the sweep's Spark
application (runner/engines/spark/app.py), whose driver runs on this machine.

The driver's output for a launch streams to the console and to ``spark-driver.log`` in the
launch directory; its timeout cancels the launch's job; Ctrl-C, SIGTERM and SIGHUP stop the
application and every process below it (a local-cluster's executors and their ranks; a real
cluster's executors end with the application). What each node did comes from the files its
Spark task's node_main writes in the launch directory: ``<node>.log`` and ``<node>.exit``. The
launch directory must be one the executors share with the driver (this machine's for
local-cluster; shared storage otherwise). A log the disk cannot hold, the driver's here or a
node's on its executor (node_main stops that node and says so), cancels the launch as a failed
node's job ends, and ``run`` raises its OSError with every node's end (LogCut).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from dtrun import __version__
from dtrun.cluster.names import host_problem
from dtrun.engines.common.scripts import write_launch_files, write_scripts
from dtrun.engines.common.signals import sigint_deferred
from dtrun.engines.spark.app import DRIVER_LOG, DRIVER_SCRIPT, AppTimeout, SparkApp
from dtrun.engines.spark.cds import RECORD_WAIT_S
from dtrun.engines.spark.failures import FAILURE_FILE, TASK_OUTPUT
from dtrun.engines.spark.node import CUT, EXIT_SUFFIX, HOST_SUFFIX, TAG
from dtrun.errors import (
    LaunchInterrupted,
    NodeFailedError,
    RunError,
    RunTimeoutError,
    UsageError,
)
from dtrun.execute import Answer, LineSink, LogCut, StopSink, quiet_stop
from dtrun.render import render
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import NodeResult
from dtrun.spec.text import plural
from dtrun.workloads.files import CUT_LOGS

DRIVER = "spark-driver"


def driver_script(run_id: str, master: str, python: str, code_dir: str, tag: str) -> str:
    return render(
        "launch/spark-driver.sh.j2",
        {
            "version": __version__,
            "run_id": run_id,
            "master": master,
            "python": python,
            "code_dir": code_dir,
            "tag": tag,
        },
    )


class SparkExecutor:
    def __init__(
        self, master: str, python: str, code_dir: str, *, run_id: str = "", grace_s: float = 15.0
    ) -> None:
        self.master, self.python, self.code_dir = master, python, code_dir
        self.grace_s = grace_s
        self.on_stopping: StopSink = quiet_stop
        self.run_id = run_id
        # a driver that ends its application waits for its JVM's class data (driver.py)
        self.app = SparkApp(self._script, grace_s=grace_s, end_wait_s=grace_s + RECORD_WAIT_S)

    def start(self) -> None:
        """Start the sweep's application now, while dtrun plans the sweep; its first launch
        finds it up, or says why it did not start (runner/engines/spark/app.py)."""
        self.app.start()

    def _script(self, tag: str) -> str:
        return driver_script(self.run_id, self.master, self.python, self.code_dir, tag)

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None, *, hold: bool = False
    ) -> dict[str, Answer]:
        raise UsageError(
            "dtrun exec and --check run shell scripts on nodes, and Spark runs only tasks",
            fix="leave out --check; run commands on Spark's executors with Spark itself",
        )

    def close(self) -> None:
        """The sweep is over: the application ends (runner/engines/spark/engine.py)."""
        with sigint_deferred():
            self.app.close()

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        write_launch_files(plan, workdir)
        write_scripts(plan, workdir)  # run by each Spark task's node_main, not from here
        for suffix in (EXIT_SUFFIX, HOST_SUFFIX):  # an earlier attempt's (--resume, a check's)
            for stale in workdir.glob(f"*{suffix}"):
                stale.unlink()
        self.run_id = self.run_id or plan.rdzv_id
        names = {str(i): launch.node.name for i, launch in enumerate(plan.launches)}

        lost = threading.Event()  # the driver said it lost an executor
        demux = self._demux(names, workdir, on_line, lost)

        def settled() -> bool:
            """Nothing more to wait for before naming the node that failed: Spark said it
            lost an executor, or every node wrote its exit (SETTLE_S)."""
            exits = (workdir / f"{launch.node.name}{EXIT_SUFFIX}" for launch in plan.launches)
            return lost.is_set() or all(path.exists() for path in exits)

        try:
            code = self.app.launch(workdir, demux, timeout_s, settled=settled)
        except AppTimeout:
            error = RunTimeoutError(
                f"the launch on {plural(plan.nnodes, 'node')} did not finish within "
                f"{timeout_s:g} s",
                why="Spark cancelled its job when the time ran out",
                fix="raise --timeout, or read the node logs for where it hung",
            )
            error.node_results = node_results(plan, workdir)
            raise error from None
        except OSError as cut:  # a log the disk could not hold: the caller says why (writefail)
            if cut is not self.app.cut:
                raise
            raise LogCut(cut, node_results(plan, workdir)) from None
        except KeyboardInterrupt:  # each node as its files say: exited, or stopped
            with sigint_deferred(replay=False):  # a second Ctrl-C is this stop
                with contextlib.suppress(Exception):  # saying so must not replace the stop
                    self.on_stopping(plan.nnodes)
                self.app.stop()
            raise LaunchInterrupted(node_results(plan, workdir)) from None
        results = node_results(plan, workdir)
        if code == 0:
            return results
        from dtrun.execute.failure import explain_log  # its patterns: only for a failure

        log = workdir / DRIVER_LOG
        driver = NodeFailedError(DRIVER, "127.0.0.1", 1 if code is None else code, str(log),
                                 explain_log(log))  # fmt: skip
        raise node_failure(results, driver, driver_failure(workdir))

    def _demux(
        self, names: dict[str, str], workdir: Path, on_line: LineSink, lost: threading.Event
    ) -> Callable[[str], None]:
        """The driver's lines to the console: each node's by name, the driver's own and
        Spark's as the driver's; ``lost`` set when Spark says it lost an executor; a node's
        cut log (node_main's `dtrun-log-cut R[.L]: ERRNO WHY`) cuts the launch short."""

        def demux(line: str) -> None:
            # node_main's lines, streamed by TorchDistributor: `dtrun-node R: text`
            head, _, rest = line.partition(": ")
            stem = _cut_log(head, names)
            if stem is not None:
                self.app.cut_short(_cut(workdir / f"{stem}.log", rest))
                return
            tagged = head.startswith(f"{TAG} ")
            if tagged and head[len(TAG) + 1 :] in names:
                on_line(names[head[len(TAG) + 1 :]], rest)
            else:  # the driver's own (`dtrun-node -: ...`) and Spark's
                if _LOST_ON.search(line):
                    lost.set()
                on_line(DRIVER, rest if tagged else line)

        return demux


def _cut_log(head: str, names: dict[str, str]) -> str | None:
    """The stem of the log a `dtrun-log-cut R[.L]` line names: node R's, or its rank L's past
    the first (node_main's ``stem``); None for any other line."""
    if not head.startswith(f"{CUT} "):
        return None
    node, _, local = head[len(CUT) + 1 :].partition(".")
    if node not in names or (local and not (local.isascii() and local.isdigit())):
        return None
    return names[node] + (f".{local}" if local else "")


def _cut(log: Path, said: str) -> OSError:
    """Node log ``log`` cut by a write error on its executor, as its node_main said it
    (`ERRNO WHY`), as this machine's NodeLog would have it: in CUT_LOGS, for the records."""
    number, _, why = said.partition(" ")
    code = int(number) if number.isascii() and number.isdigit() else errno.ENOSPC  # int('²')
    why = why.strip() or os.strerror(code)
    CUT_LOGS[str(log)] = why
    return OSError(code, why, str(log))


def node_results(plan: LaunchPlan, workdir: Path) -> tuple[NodeResult, ...]:
    """Every node of the launch, from the files its task wrote: its exit code, or None where
    it wrote none (stopped, or never started); a node whose executor Spark lost has the
    executor's exit code, as the driver recorded it (spark-failure.json)."""
    failure = driver_failure(workdir)
    lost = failure.get("partition") if isinstance(failure.get("partition"), int) else None
    gone = lost_hosts(workdir)
    recorded = [_executor(workdir / f"{launch.node.name}{HOST_SUFFIX}") for launch in plan.launches]
    shared = Counter(host for host, _ in recorded)
    results = []
    for rank, launch in enumerate(plan.launches):
        exit_file = workdir / f"{launch.node.name}{EXIT_SUFFIX}"
        code = _exit_code(exit_file)
        log = workdir / f"{launch.node.name}.log"
        result = NodeResult(launch.node.name, launch.node.address, code, str(log), wall_s=0.0)
        host, ident = recorded[rank]
        # by its executor's id where it knew it, else by a host no other node ran on
        went = gone.get((host.lower(), ident)) if ident or shared[host] == 1 else None
        if code is None and host and went is not None:  # Spark lost its executor: the node
            result = replace(result, address=host, cause=f"{EXECUTOR_LOST}{went}",
                             exit_code=_exited(went))  # fmt: skip
        elif rank == lost and code is None:
            executor = failure.get("exit_code")
            if not isinstance(executor, int):
                executor = lost_executor_exit(gone)
            result = replace(
                result,
                exit_code=executor if isinstance(executor, int) else None,
                cause=f"Spark lost it: {failure.get('why', '')}",
            )
        results.append(result)
    return tuple(results)


# The driver's log line for each executor it lost (TaskSchedulerImpl): `Lost executor 0 on
# 127.0.0.42: worker lost: 127.0.0.42:36329 got disassociated` (its host went), or `...: Command
# exited with code 137` (the executor was killed). The host up to the first ": " (an IPv6
# address has colons); bare and lower-cased, as executor_address has it (urlsplit's hostname).
_LOST_ON = re.compile(  # not in a node's line, nor in a failed task's output (TASK_OUTPUT)
    rf"^(?!dtrun-node )(?:(?!{re.escape(TASK_OUTPUT)}).)*?Lost executor (\S+) on (\S+?): (.*)$",
    re.MULTILINE,
)
_EXITED = re.compile(r"exited with code (-?\d+)")
EXECUTOR_LOST = "Spark lost its executor: "  # a node's cause, before Spark's reason


def _exited(why: str) -> int | None:
    """The executor's exit code in Spark's reason (`Command exited with code 137`), if any."""
    found = _EXITED.search(why)
    return int(found.group(1)) if found else None


def lost_hosts(workdir: Path) -> dict[tuple[str, str], str]:
    """Spark's reason for each executor the driver's log says it lost, by (host, executor id)
    and by (host, "") for a task that recorded no id."""
    try:
        text = (workdir / DRIVER_LOG).read_text(errors="replace")
    except OSError:
        return {}
    out = {}
    for found in _LOST_ON.finditer(text):
        executor, why = found.group(1), found.group(3).strip()
        host = found.group(2).removeprefix("[").removesuffix("]").lower()
        out[(host, executor)] = out[(host, "")] = why
    return out


def _executor(path: Path) -> tuple[str, str]:
    """What a task recorded of its executor (node.py): its host and id, "" for each unknown. A
    host that is not one (host_problem) is unknown: Spark's answer is checked before it becomes
    a node's address in records and messages (docs/security.md, "Threat model")."""
    try:
        host, _, ident = path.read_text(errors="replace").strip().partition(" ")
    except OSError:
        return "", ""
    return ("", "") if host_problem(host) else (host, ident)


def lost_executor_exit(gone: dict[tuple[str, str], str]) -> int | None:
    """The exit code of the one executor the driver's log says was lost (``lost_hosts``); None
    when it names no such executor, or several with different codes (which one ran the
    partition is unknown)."""
    codes = {code for why in gone.values() if (code := _exited(why)) is not None}
    return codes.pop() if len(codes) == 1 else None


def driver_failure(workdir: Path) -> dict[str, object]:
    """What the driver recorded of the failure (runner/engines/spark/driver.py); {} if none."""
    try:
        data = json.loads((workdir / FAILURE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _exit_code(path: Path) -> int | None:
    """What node_main recorded; None where it recorded nothing (stopped first) or was killed
    while writing it."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def node_failure(
    results: tuple[NodeResult, ...], driver: NodeFailedError, said: dict[str, object]
) -> RunError:
    """The node whose task failed (its exit file; the first to write one if several), the
    node whose executor Spark lost, or the driver's own failure as it recorded it (``said``:
    no master, no executors, Spark did not start), else with its log."""
    failed = [r for r in results if r.exit_code not in (None, 0) and r.cause is None]
    failed.sort(key=lambda r: Path(r.log_path).with_suffix(EXIT_SUFFIX).stat().st_mtime)
    lost = [r for r in results if r.cause is not None]
    gone = [r for r in lost if r.cause and r.cause.startswith(EXECUTOR_LOST)]
    error: RunError
    if gone and (code := gone[0].exit_code) is not None:  # before the others' failures:
        first = gone[0]  # they came from losing it (gloo: connection closed by peer)
        error = NodeFailedError(first.node, first.address, code, first.log_path, first.cause or "")
    elif gone:
        first = gone[0]
        error = RunError(f"Spark lost {first.node} ({first.address})", why=first.cause or "",
                         fix=f"bring {first.address} back, or run without it")  # fmt: skip
        error.lost_node, error.others_held = first.node, True  # a check goes on without it
    elif failed:
        from dtrun.execute.failure import explain_log  # its patterns: only for a failure

        first = failed[0]
        assert first.exit_code is not None
        detail = explain_log(Path(first.log_path))
        error = NodeFailedError(first.node, first.address, first.exit_code, first.log_path, detail)
    elif lost and (code := lost[0].exit_code) is not None:
        first, detail = lost[0], f"Spark: {said.get('why', '')}"
        error = NodeFailedError(first.node, first.address, code, first.log_path, detail)
    elif said.get("what"):
        what = str(said["what"])
        if lost:
            what = f"{lost[0].node} ({lost[0].address}): {what}"
        error = RunError(what, why=str(said.get("why", "")), fix=str(said.get("fix", "")))
    else:
        error = driver
    error.node_results = results
    return error


class SparkPreview:
    """What a dry run prints beside each plan: the master, and the driver the sweep runs."""

    def __init__(self, executor: SparkExecutor, nodes: int) -> None:
        self.executor = executor
        self.allocation = (
            f"Spark master {executor.master}: {plural(nodes, 'executor')}, one application for "
            "the sweep and one barrier stage per launch, one task per node; nothing is started "
            "by a dry run"
        )

    def launch(self, plan: LaunchPlan, workdir: str) -> str:
        script = driver_script(plan.rdzv_id, self.executor.master, self.executor.python,
                               self.executor.code_dir, "TAG")  # fmt: skip
        return (
            f"# ---- {plural(plan.nnodes, 'node')}: a barrier stage on the Spark application "
            f"that {DRIVER_SCRIPT}, the Spark driver, runs on this machine for the sweep "
            f"----\n{script}"
        )
