"""The embedded cluster's executor: every node is a process group on this machine."""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dtrun.engines.common.scripts import pump, run_scripts, write_launch_files
from dtrun.engines.common.signals import sigint_deferred
from dtrun.errors import LaunchInterrupted, NodeFailedError, RunError, RunTimeoutError
from dtrun.execute import Answer, LineSink, StopSink, cut_stop, quiet_stop
from dtrun.execute.guard import TAG, drop_guard, reaper_command, start_guard, stop_script
from dtrun.execute.success import Next, after_exit, mark_stopped
from dtrun.plan.machineenv import node_environment
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from dtrun.spec.outcome import NodeResult
from dtrun.spec.text import plural
from dtrun.workloads.files import NodeLog, write_atomic

TRACK_EVERY_S = 1.0  # how often the process tree below each node is recorded
_PACKAGE = str(Path(__file__).resolve().parent.parent.parent)  # the reaper's package folder


@dataclass
class _Node:
    """A running node: its launch, the process running its script, its log."""

    launch: NodeLaunch
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float
    threads: list[threading.Thread] = field(default_factory=list)  # log reader, exit waiter
    returncode: int | None = None  # set by the waiter thread when the script's process exits
    ended: float | None = None
    stopped: bool = False  # dtrun stopped it before it exited on its own
    # Every process seen below the node, by (pid, start time) so a reused pid is not confused.
    # torchrun puts its workers in sessions of their own: the node's process group misses them.
    descendants: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.launch.node.name

    def result(self) -> NodeResult:
        end = self.ended if self.ended is not None else time.monotonic()
        return NodeResult(
            node=self.name,
            address=self.launch.node.address,
            exit_code=None if self.stopped else self.returncode,
            log_path=str(self.log_path),
            wall_s=end - self.started,
        )


class LocalExecutor:
    """Runs each node's rendered script with bash, in its own process group and session.

    Fail-fast: the first node to exit non-zero stops all the others (SIGTERM to every process
    of every node, SIGKILL after ``grace_s``). The same happens on timeout and on Ctrl-C, and,
    under --success worker0, once node 0 has exited 0 (runner/execute/success.py). A guard
    (runner/execute/guard.py) stops them all the same way if dtrun is killed outright.
    """

    def __init__(
        self,
        *,
        grace_s: float = 5.0,
        cores: Mapping[str, tuple[int, ...]] | None = None,
        gpus: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.grace_s = grace_s
        self.on_stopping: StopSink = quiet_stop
        # each node's cores (runner/engines/embedded/inventory.py node_cores); none: any core
        self.cores = dict(cores or {})
        # each node's GPUs (runner/engines/embedded/inventory.py local_cluster); none: no GPU
        self.gpus = dict(gpus or {})

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        """``tag``: what every process of the launch carries as DTRUN_LAUNCH (a random one
        when not given), which a SIGKILLed dtrun's guard finds them by."""
        workdir.mkdir(parents=True, exist_ok=True)
        write_launch_files(plan, workdir)
        exits: queue.Queue[_Node | OSError] = queue.Queue()  # a node's end, or its log's
        nodes: list[_Node] = []
        verdict: _Node | RunTimeoutError | OSError | None = None
        tag = tag or secrets.token_hex(8)
        guard = start_guard(["bash", "-c", stop_script(tag, self.grace_s)])
        interrupted = False
        try:
            for launch in plan.launches:
                with sigint_deferred():  # a node that was started is one that gets stopped
                    # under the reaper, as on an SSH node: what the script leaves, tagged or
                    # not, is its to stop (runner/execute/reaper.py)
                    reaper = reaper_command(sys.executable, _PACKAGE, self.grace_s)
                    script = [*reaper, "bash", launch.script_name]
                    pinned = self.pinned(launch.node.name, script)
                    nodes.append(_start(launch, pinned, workdir, on_line, exits, tag))
            verdict = _supervise(nodes, exits, timeout_s, plan)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            with sigint_deferred(replay=False) as late:  # raised below, with every node's end
                if interrupted:  # saying so must not replace the stop (a closed terminal)
                    with contextlib.suppress(Exception):
                        self.on_stopping(sum(node.returncode is None for node in nodes))
                self._stop(nodes, tag)
                drop_guard(guard)
        results = tuple(node.result() for node in nodes)
        if isinstance(verdict, OSError):  # a node's log could not be written (writefail.py)
            raise cut_stop(verdict, results, late)  # and a stop signal that came meanwhile
        error = None
        if verdict is not None:
            error = verdict if isinstance(verdict, RunError) else _failure(verdict)
            error.node_results = results
        if interrupted or late:  # each node as it ended: its exit code, or None if stopped
            raise LaunchInterrupted(results, None if interrupted else error)
        if error is None:
            return mark_stopped(plan.success, results)
        raise error

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None, *, hold: bool = False
    ) -> dict[str, Answer]:
        """Each script runs with bash as its simulated node, all at once."""

        def start(name: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                self.pinned(name, ["bash", "-s"]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**node_environment(os.environ), "DTRUN_NODE_NAME": name, TAG: tag},
            )

        tag = f"exec-{secrets.token_hex(8)}"  # a stop finds what the scripts left by it
        ended = run_scripts(scripts, start, on_line, f"{TAG}={tag}")
        return {name: Answer("\n".join(lines), code) for name, (lines, code) in ended.items()}

    def pinned(self, node: str, command: list[str]) -> list[str]:
        """``command`` kept to ``node``'s cores by util-linux taskset (it execs the command:
        the same process, and all it starts inherits the cores), and shown only ``node``'s
        GPUs by CUDA_VISIBLE_DEVICES, set by env(1) (which execs it too)."""
        cores, gpus = self.cores.get(node), self.gpus.get(node)
        if cores:
            command = ["taskset", "--cpu-list", ",".join(map(str, cores)), *command]
        if gpus:
            command = ["env", "CUDA_VISIBLE_DEVICES=" + ",".join(gpus), *command]
        return command

    def _stop(self, nodes: list[_Node], tag: str) -> None:
        """Stop every process of every node that is still there, then reap the nodes; last,
        whatever still carries the launch's tag (a daemon the program started, orphaned to
        init before any reading of the tree saw it), as an SSH node's wrapper stops it
        (templates/remote/launch.sh.j2)."""
        _track(nodes)
        victims: list[psutil.Process] = []
        for node in nodes:
            if node.returncode is None:
                node.stopped = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.popen.pid, signal.SIGTERM)
            victims.extend(p for p in node.descendants.values() if _alive(p))
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        deadline = time.monotonic() + self.grace_s
        for node in nodes:
            try:
                node.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.popen.pid, signal.SIGKILL)
                node.popen.wait()
        alive = _wait_gone(victims, deadline)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _wait_gone(alive, time.monotonic() + 5)
        subprocess.run(
            ["bash", "-c", stop_script(tag, self.grace_s)], stdout=subprocess.DEVNULL, check=False
        )
        for node in nodes:
            for thread in node.threads:
                thread.join(timeout=5)


def _start(
    launch: NodeLaunch,
    command: list[str],
    workdir: Path,
    on_line: LineSink,
    exits: queue.Queue[_Node | OSError],
    tag: str,
) -> _Node:
    write_atomic(workdir / launch.script_name, launch.script.encode(), 0o700)
    log_path = workdir / f"{launch.node.name}.log"
    popen = subprocess.Popen(
        command,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: Ctrl-C reaches dtrun, not the nodes
        # a login's variables and the run-shaping ones, as a node reached by ssh starts with;
        # none of this machine's other variables (its secrets among them)
        env={**node_environment(os.environ), TAG: tag},
    )
    node = _Node(launch, popen, log_path, time.monotonic())
    assert popen.stdout is not None  # asked for above
    node.threads = [
        threading.Thread(
            target=pump,
            args=(popen.stdout, NodeLog(log_path, on_error=exits.put), node.name, on_line),
            name=f"dtrun-log-{node.name}",
            daemon=True,
        ),
        threading.Thread(
            target=_wait, args=(node, exits), name=f"dtrun-wait-{node.name}", daemon=True
        ),
    ]
    for thread in node.threads:
        thread.start()
    return node


def _wait(node: _Node, exits: queue.Queue[_Node | OSError]) -> None:
    code = node.popen.wait()
    node.ended = time.monotonic()
    node.returncode = code
    exits.put(node)


def _supervise(
    nodes: list[_Node], exits: queue.Queue[_Node | OSError], timeout_s: float, plan: LaunchPlan
) -> _Node | RunTimeoutError | OSError | None:
    """Wait until the launch succeeds by its rule (None), a node fails (that node), a node's
    log cannot be written (why: a full disk), or time runs out.

    Service nodes (NodeLaunch.service) are not waited for: once every other node has exited 0
    the launch is done, and the caller stops them (as it stops every node still running once
    node 0 has exited 0 under --success worker0).
    """
    deadline = time.monotonic() + timeout_s
    running = sum(1 for node in nodes if not node.launch.service)
    next_track = 0.0
    while running:
        now = time.monotonic()
        if now >= next_track:
            _track(nodes)
            next_track = now + TRACK_EVERY_S
        if now >= deadline:
            names = ", ".join(node.name for node in nodes if node.returncode is None)
            return RunTimeoutError(
                f"the launch on {plural(plan.nnodes, 'node')} did not finish within {timeout_s:g} "
                "s",
                why=f"still running when stopped: {names}",
                fix="raise --timeout, or read the node logs for where it hung",
            )
        try:
            node = exits.get(timeout=min(next_track, deadline) - now)
        except queue.Empty:
            continue
        if isinstance(node, OSError):
            return node
        assert node.returncode is not None  # set before the node is queued
        step = after_exit(plan.success, node.launch, node.returncode)
        if step is Next.FAILED:
            return node
        if step is Next.DONE:
            return None
        if not node.launch.service:
            running -= 1
    return None


def _track(nodes: Iterable[_Node]) -> None:
    """Record the processes below each node, from one reading of the process table."""
    children: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["ppid", "create_time"]):
        children.setdefault(proc.info["ppid"], []).append(proc)
    for node in nodes:
        stack = [node.popen.pid]
        while stack:
            for child in children.get(stack.pop(), ()):
                node.descendants[(child.pid, child.info["create_time"])] = child
                stack.append(child.pid)


def _alive(proc: psutil.Process) -> bool:
    """Running, and not a zombie waiting for a parent (often init) to reap it."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], deadline: float) -> list[psutil.Process]:
    """Wait until every process is gone or the deadline passes; return those still alive."""
    while True:
        alive = [proc for proc in procs if _alive(proc)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _failure(node: _Node) -> NodeFailedError:
    from dtrun.execute.failure import explain_log  # its patterns: only for a failure

    assert node.returncode is not None  # only exited nodes are verdicts
    for thread in node.threads:
        thread.join(timeout=5)  # the log is complete once its pipe closes
    return NodeFailedError(
        node.name,
        node.launch.node.address,
        node.returncode,
        str(node.log_path),
        explain_log(node.log_path),
    )
