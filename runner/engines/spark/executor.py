"""The Spark engine's executor: one Spark driver per launch, on this machine.

A launch under ``--spark MASTER`` is one local process, ``spark-driver.sh`` (runner/engines/
spark/driver.py), run by the embedded cluster's LocalExecutor: its output streams, its timeout,
Ctrl-C, SIGTERM and SIGHUP, and the stop of every process below it (the local-cluster's
executors and their ranks are its descendants) are that executor's. What each node did comes
from the files its Spark task's node_main writes in the launch directory: ``<node>.log`` and
``<node>.exit``. The launch directory must be one the executors share with the driver (this
machine's for local-cluster; shared storage otherwise).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import replace
from pathlib import Path

from runner import __version__
from runner.engines.embedded.executor import LocalExecutor, write_launch_files, write_scripts
from runner.engines.spark.driver import FAILURE_FILE
from runner.engines.spark.node import EXIT_SUFFIX, TAG
from runner.errors import LaunchInterrupted, NodeFailedError, RunError, UsageError
from runner.execute import Answer, LineSink, StopSink, quiet_stop
from runner.render import render
from runner.spec.cluster import Node
from runner.spec.launchplan import LaunchPlan, NodeLaunch
from runner.spec.outcome import NodeResult
from runner.spec.text import plural

DRIVER = "spark-driver"
DRIVER_SCRIPT = "spark-driver.sh"


def driver_script(plan: LaunchPlan, master: str, python: str, code_dir: str, tag: str) -> str:
    return render(
        "launch/spark-driver.sh.j2",
        {
            "version": __version__,
            "run_id": plan.rdzv_id,
            "launcher": plan.launcher,
            "nnodes": plan.nnodes,
            "master": master,
            "python": python,
            "code_dir": code_dir,
            "tag": tag,
        },
    )


class SparkExecutor:
    def __init__(self, master: str, python: str, code_dir: str, *, grace_s: float = 15.0) -> None:
        self.master, self.python, self.code_dir = master, python, code_dir
        self.local = LocalExecutor(grace_s=grace_s)
        self.on_stopping: StopSink = quiet_stop

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None
    ) -> dict[str, Answer]:
        raise UsageError(
            "dtrun exec and --check run shell scripts on nodes, and Spark runs only tasks",
            fix="leave out --check; run commands on Spark's executors with Spark itself",
        )

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        write_launch_files(plan, workdir)
        write_scripts(plan, workdir)  # run by each Spark task's node_main, not from here
        for stale in workdir.glob(f"*{EXIT_SUFFIX}"):  # an earlier attempt's (--resume)
            stale.unlink()
        tag = secrets.token_hex(8)
        script = driver_script(plan, self.master, self.python, self.code_dir, tag)
        driver = NodeLaunch(Node(DRIVER, "127.0.0.1"), 0, DRIVER_SCRIPT, script)
        names = {str(i): launch.node.name for i, launch in enumerate(plan.launches)}

        def demux(name: str, line: str) -> None:
            # node_main's lines, streamed by TorchDistributor: `dtrun-node R: text`
            head, _, rest = line.partition(": ")
            tagged = head.startswith(f"{TAG} ")
            if tagged and head[len(TAG) + 1 :] in names:
                on_line(names[head[len(TAG) + 1 :]], rest)
            else:  # the driver's own (`dtrun-node -: ...`) and Spark's
                on_line(name, rest if tagged else line)

        self.local.on_stopping = self.on_stopping
        try:
            self.local.run(
                replace(plan, launches=(driver,), files=()),
                workdir,
                timeout_s=timeout_s,
                on_line=demux,
                tag=tag,  # the driver's own, which its executors carry too
            )
        except NodeFailedError as failed:
            results = node_results(plan, workdir)
            raise node_failure(results, failed, driver_failure(workdir)) from None
        except RunError as error:  # a timeout: every node still running was stopped
            error.node_results = node_results(plan, workdir)
            raise
        except KeyboardInterrupt:  # each node as its files say: exited, or stopped
            raise LaunchInterrupted(node_results(plan, workdir)) from None
        return node_results(plan, workdir)


def node_results(plan: LaunchPlan, workdir: Path) -> tuple[NodeResult, ...]:
    """Every node of the launch, from the files its task wrote: its exit code, or None where
    it wrote none (stopped, or never started); a node whose executor Spark lost has the
    executor's exit code, as the driver recorded it (spark-failure.json)."""
    failure = driver_failure(workdir)
    lost = failure.get("partition") if isinstance(failure.get("partition"), int) else None
    results = []
    for rank, launch in enumerate(plan.launches):
        exit_file = workdir / f"{launch.node.name}{EXIT_SUFFIX}"
        code = _exit_code(exit_file)
        log = workdir / f"{launch.node.name}.log"
        result = NodeResult(launch.node.name, launch.node.address, code, str(log), wall_s=0.0)
        if rank == lost and code is None:
            executor = failure.get("exit_code")
            if not isinstance(executor, int):
                executor = lost_executor_exit(workdir)
            result = replace(
                result,
                exit_code=executor if isinstance(executor, int) else None,
                cause=f"Spark lost it: {failure.get('why', '')}",
            )
        results.append(result)
    return tuple(results)


# The driver's log line for an executor that died (TaskSchedulerImpl): `Lost executor 0 on
# 127.0.0.42: Command exited with code 137`.
_LOST_EXECUTOR = re.compile(r"Lost executor \S+ on \S+: .*?exited with code (-?\d+)")


def lost_executor_exit(workdir: Path) -> int | None:
    """The exit code of the one executor the driver's log says was lost; None when it names no
    such executor, or several with different codes (which one ran the partition is unknown)."""
    try:
        text = (workdir / "spark-driver.log").read_text(errors="replace")
    except OSError:
        return None
    codes = {int(found.group(1)) for found in _LOST_EXECUTOR.finditer(text)}
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
    error: RunError
    if failed:
        from runner.execute.failure import explain_log  # its patterns: only for a failure

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
    """What a dry run prints beside each plan: the master, and the driver each launch runs."""

    def __init__(self, executor: SparkExecutor, nodes: int) -> None:
        self.executor = executor
        self.allocation = (
            f"Spark master {executor.master}: {plural(nodes, 'executor')}, one barrier task per "
            "node; "
            "nothing is started by a dry run"
        )

    def launch(self, plan: LaunchPlan, workdir: str) -> str:
        script = driver_script(plan, self.executor.master, self.executor.python,
                               self.executor.code_dir, "TAG")  # fmt: skip
        return (
            f"# ---- {plural(plan.nnodes, 'node')}: {DRIVER_SCRIPT}, the Spark driver, on this "
            "machine "
            f"----\n{script}"
        )
