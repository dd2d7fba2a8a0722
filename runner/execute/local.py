"""The embedded cluster's executor: every node is a process group on this machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from runner.errors import NodeFailedError, RunError, RunTimeoutError
from runner.execute import LineSink, tail
from runner.spec import LaunchPlan, NodeLaunch, NodeResult


@dataclass
class _Node:
    """A running node: its launch, the process running its script, its log."""

    launch: NodeLaunch
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float
    reader: threading.Thread
    returncode: int | None = None
    ended: float | None = None
    stopped: bool = False  # dtrun stopped it before it exited on its own
    descendants: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.launch.node.name

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.popen.poll()
            if self.returncode is not None:
                self.ended = time.monotonic()
        return self.returncode

    def track(self) -> None:
        """Remember every process below the node: torchrun puts its workers in new sessions,
        so the node's process group alone does not reach them."""
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.popen.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.descendants[(child.pid, child.create_time())] = child

    def result(self) -> NodeResult:
        end = self.ended if self.ended is not None else time.monotonic()
        return NodeResult(
            node=self.name,
            address=self.launch.node.address,
            exit_code=None if self.stopped else self.returncode,
            log_path=str(self.log_path),
            wall_s=end - self.started,
        )


def _pump(stream: IO[bytes], log: IO[bytes], name: str, on_line: LineSink) -> None:
    with stream, log:
        for raw in iter(stream.readline, b""):
            log.write(raw)
            log.flush()
            on_line(name, raw.decode(errors="replace").rstrip("\r\n"))


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Let cleanup finish even if Ctrl-C is pressed again; the interrupt arrives afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class LocalExecutor:
    """Runs each node's rendered script with bash, in its own process group and session.

    Fail-fast: the first node to exit non-zero stops all the others (SIGTERM to every process
    of every node, SIGKILL after ``grace_s``). The same happens on timeout and on Ctrl-C.
    """

    def __init__(self, *, grace_s: float = 5.0, poll_s: float = 0.1) -> None:
        self.grace_s = grace_s
        self.poll_s = poll_s

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        workdir.mkdir(parents=True, exist_ok=True)
        nodes: list[_Node] = []
        verdict: _Node | RunTimeoutError | None = None
        try:
            for launch in plan.launches:
                nodes.append(self._start(launch, workdir, on_line))
            verdict = self._supervise(nodes, timeout_s, plan.nnodes)
        finally:
            with _sigint_deferred():
                self._stop(nodes)
        results = tuple(node.result() for node in nodes)
        if verdict is None:
            return results
        error = verdict if isinstance(verdict, RunError) else _failure(verdict)
        error.node_results = results
        raise error

    def _start(self, launch: NodeLaunch, workdir: Path, on_line: LineSink) -> _Node:
        script = workdir / launch.script_name
        script.write_text(launch.script)
        script.chmod(0o700)
        log_path = workdir / f"{launch.node.name}.log"
        popen = subprocess.Popen(
            ["bash", launch.script_name],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Ctrl-C reaches dtrun, not nodes
        )
        assert popen.stdout is not None  # we asked for a pipe
        reader = threading.Thread(
            target=_pump,
            args=(popen.stdout, log_path.open("wb"), launch.node.name, on_line),
            name=f"dtrun-log-{launch.node.name}",
            daemon=True,
        )
        reader.start()
        return _Node(launch, popen, log_path, time.monotonic(), reader)

    def _supervise(
        self, nodes: list[_Node], timeout_s: float, nnodes: int
    ) -> _Node | RunTimeoutError | None:
        """Wait until every node exits 0 (None), one fails (that node), or time runs out."""
        deadline = time.monotonic() + timeout_s
        next_track = 0.0
        while True:
            now = time.monotonic()
            if now >= next_track:
                for node in nodes:
                    node.track()
                next_track = now + 0.5
            running = [node for node in nodes if node.poll() is None]
            failed = [node for node in nodes if node.returncode not in (None, 0)]
            if failed:
                return min(failed, key=lambda n: n.ended or now)
            if not running:
                return None
            if now >= deadline:
                names = ", ".join(node.name for node in running)
                return RunTimeoutError(
                    f"the launch on {nnodes} node(s) did not finish within {timeout_s:g} s",
                    why=f"still running when stopped: {names}",
                    fix="raise --timeout, or read the node logs for where it hung",
                )
            time.sleep(self.poll_s)

    def _stop(self, nodes: list[_Node]) -> None:
        """Stop every process of every node that is still there, then reap the nodes."""
        for node in nodes:
            node.track()
        victims: list[psutil.Process] = []
        for node in nodes:
            if node.poll() is None:
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
            node.poll()
        alive = _wait_gone(victims, deadline)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _wait_gone(alive, time.monotonic() + 5)
        for node in nodes:
            node.reader.join(timeout=5)


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
    assert node.returncode is not None  # only exited nodes are verdicts
    return NodeFailedError(
        node.name,
        node.launch.node.address,
        node.returncode,
        str(node.log_path),
        tail(node.log_path),
    )
