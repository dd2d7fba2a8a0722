"""The Spark engine's executor: one Spark driver per launch, on this machine.

A launch under ``--spark MASTER`` is one local process, ``spark-driver.sh`` (runner/execute/
spark_driver.py), run by the embedded cluster's LocalExecutor: its output streams, its timeout,
Ctrl-C, SIGTERM and SIGHUP, and the stop of every process below it (the local-cluster's
executors and their ranks are its descendants) are that executor's. What each node did comes
from the files its Spark task's node_main writes in the launch directory: ``<node>.log`` and
``<node>.exit``. The launch directory must be one the executors share with the driver (this
machine's for local-cluster; shared storage otherwise).
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

from runner import __version__
from runner.errors import NodeFailedError, RunError, UsageError
from runner.execute import Answer, LineSink, StopSink, quiet_stop
from runner.execute.failure import explain_log
from runner.execute.local import LocalExecutor, write_launch_files, write_scripts
from runner.execute.spark_node import EXIT_SUFFIX, TAG
from runner.render import render
from runner.spec.cluster import Node
from runner.spec.launch import LaunchPlan, NodeLaunch
from runner.spec.outcome import NodeResult

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
            raise node_failure(results, failed) from None
        except RunError as error:  # a timeout: every node was stopped
            error.node_results = node_results(plan, workdir, stopped=True)
            raise
        return node_results(plan, workdir)


def node_results(plan: LaunchPlan, workdir: Path, stopped: bool = False) -> tuple[NodeResult, ...]:
    """Every node of the launch, from the files its task wrote: its exit code, or None where
    it wrote none (stopped, or never started)."""
    results = []
    for launch in plan.launches:
        exit_file = workdir / f"{launch.node.name}{EXIT_SUFFIX}"
        code = None if stopped else _exit_code(exit_file)
        log = workdir / f"{launch.node.name}.log"
        results.append(
            NodeResult(launch.node.name, launch.node.address, code, str(log), wall_s=0.0)
        )
    return tuple(results)


def _exit_code(path: Path) -> int | None:
    """What node_main recorded; None where it recorded nothing (stopped first) or was killed
    while writing it."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def node_failure(results: tuple[NodeResult, ...], driver: NodeFailedError) -> RunError:
    """The node whose task failed (its exit file; the first to write one if several), or the
    driver's own failure (Spark did not start, the job was refused) with its log."""
    failed = [r for r in results if r.exit_code not in (None, 0)]
    failed.sort(key=lambda r: Path(r.log_path).with_suffix(EXIT_SUFFIX).stat().st_mtime)
    if not failed:
        driver.node_results = results
        return driver
    first = failed[0]
    assert first.exit_code is not None
    error = NodeFailedError(
        first.node,
        first.address,
        first.exit_code,
        first.log_path,
        explain_log(Path(first.log_path)),
    )
    error.node_results = results
    return error


class SparkPreview:
    """What a dry run prints beside each plan: the master, and the driver each launch runs."""

    def __init__(self, executor: SparkExecutor, nodes: int) -> None:
        self.executor = executor
        self.allocation = (
            f"Spark master {executor.master}: {nodes} executor(s), one barrier task per node; "
            "nothing is started by a dry run"
        )

    def launch(self, plan: LaunchPlan, workdir: str) -> str:
        script = driver_script(plan, self.executor.master, self.executor.python,
                               self.executor.code_dir, "TAG")  # fmt: skip
        return (
            f"# ---- {plan.nnodes} node(s): {DRIVER_SCRIPT}, the Spark driver, on this machine "
            f"----\n{script}"
        )
