"""A launch under --launcher torchtrainer: Ray Train's ``TorchTrainer.fit()`` starts one worker
per node, each pinned to its node by Ray's node-id label and spread STRICT_SPREAD, and each
worker runs its node's script (``train_loop``) as the Ray engine's actors do
(runner/engines/ray/node.py). ``TrainerLaunch`` supervises it as the engine's other launches
are: the same node logs, fail-fast, timeout and stops.

Output and exits travel through a small relay actor that dtrun polls; the relay's stop flag is
how dtrun stops every worker's script (a failed node, a timeout, Ctrl-C, SIGTERM). Ray Train
removes its workers and placement group when ``fit`` ends; a SIGKILLed dtrun ends the Ray job,
and Ray kills them (runner/engines/ray/session.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from dtrun.engines.ray.executor import POLL_S as LAUNCH_POLL_S
from dtrun.engines.ray.executor import _Launch, _Node
from dtrun.engines.ray.node import GRACE_S, NodeProcess
from dtrun.engines.ray.session import said
from dtrun.errors import RunError
from dtrun.execute.success import Next, after_exit

POLL_S = 0.2
NODE_ID = "ray.io/node-id"  # the label Ray gives every node: its node id


class Relay:
    """An actor between the workers and dtrun: lines and exits one way, a stop the other."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, list[bytes]]] = []
        self.codes: dict[str, int | None] = {}
        self.started: dict[str, str] = {}
        self.halted = False

    def start(self, node: str, address: str) -> bool:
        self.started[node] = address
        return self.halted

    def put(self, node: str, lines: list[bytes], code: int | None, ended: bool) -> bool:
        """Lines of ``node``; its exit code once ``ended`` (None: stopped). Whether to stop."""
        if lines:
            self.lines.append((node, lines))
        if ended:
            self.codes[node] = code
        return self.halted

    def take(self) -> tuple[list[tuple[str, list[bytes]]], dict[str, int | None], dict[str, str]]:
        lines, self.lines = self.lines, []
        return lines, dict(self.codes), dict(self.started)

    def halt(self) -> None:
        self.halted = True


def train_loop(config: dict[str, Any]) -> None:
    """Run in each TorchTrainer worker: the script of the node this worker was pinned to."""
    import ray

    relay = config["relay"]
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    node = config["nodes"].get(address)
    if node is None:  # pinned by node id: never
        raise RuntimeError(f"a TorchTrainer worker ran on {address}, which is no node of it")
    name, script = node
    os.environ["MASTER_PORT"] = str(config["master_port"])  # Ray Train's own group holds its
    os.environ["DTRUN_EXECUTOR_ADDR"] = address  # the node's address, as Ray knows it
    process = NodeProcess(config["tag"])
    process.start(config["workdir"], config["files"], script)
    stop = ray.get(relay.start.remote(name, address))
    while True:
        lines, code = process.poll(POLL_S)
        stop = ray.get(relay.put.remote(name, lines, code, code is not None))
        if code is not None:
            break
        if stop:
            lines, code = process.stop(config["grace_s"])
            ray.get(relay.put.remote(name, lines, code, True))
            return
    if code != 0:
        raise RuntimeError(f"{name}'s script exited with {code}")


class TrainerRun:
    """One TorchTrainer.fit() in a thread of dtrun, and its relay."""

    def __init__(self, ray: Any, workdir: Path, tag: str, grace_s: float = GRACE_S) -> None:
        self.ray, self.workdir, self.tag, self.grace_s = ray, workdir, tag, grace_s
        self.relay: Any = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, nodes: dict[str, tuple[str, str]], node_ids: list[str], master_port: int,
              files: list[tuple[str, bytes, int]], name: str) -> None:  # fmt: skip
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        ray = self.ray
        self.relay = ray.remote(num_cpus=0, max_restarts=0)(Relay).remote()
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={
                "relay": self.relay, "nodes": nodes, "tag": self.tag, "files": files,
                "workdir": str(self.workdir), "master_port": master_port,
                "grace_s": self.grace_s,
            },
            scaling_config=ScalingConfig(
                num_workers=len(node_ids),
                use_gpu=False,
                resources_per_worker={"CPU": 1},
                placement_strategy="STRICT_SPREAD",
                # Ray Train 2's own argument; mypy reads Ray Train 1's class under this name
                label_selector=[{NODE_ID: node_id} for node_id in node_ids],  # type: ignore[call-arg]
            ),
            run_config=RunConfig(
                name=name,
                storage_path=str(self.workdir / "ray-train"),
                failure_config=FailureConfig(max_failures=0),
            ),
        )  # fmt: skip

        def fit() -> None:
            try:
                trainer.fit()
            except BaseException as error:  # a failed node's, said by its exit code instead
                self.error = error

        self.thread = threading.Thread(target=fit, name="dtrun-ray-trainer", daemon=True)
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def take(self) -> tuple[list[tuple[str, list[bytes]]], dict[str, int | None], dict[str, str]]:
        result: tuple[list[tuple[str, list[bytes]]], dict[str, int | None], dict[str, str]]
        result = self.ray.get(self.relay.take.remote(), timeout=60)
        return result

    def stop(self) -> None:
        """Every worker stops its script; fit() ends; the relay goes."""
        if self.relay is None:
            return
        with contextlib.suppress(Exception):  # the relay is gone: the job's end takes them
            self.ray.get(self.relay.halt.remote(), timeout=30)
        if self.thread is not None:
            self.thread.join(timeout=self.grace_s + 60)


# One launch under --launcher torchtrainer, supervised as the engine's other launches are
# (runner/engines/ray/executor.py), with Ray Train's workers in place of dtrun's actors.
class TrainerLaunch(_Launch):
    run: TrainerRun | None = None
    decider: _Node  # the node whose exit decided the launch

    def place(self) -> None:
        ids = {str(n["NodeManagerAddress"]): str(n["NodeID"])
               for n in self.ray.nodes() if n.get("Alive")}  # fmt: skip
        if any(node.launch.node.address not in ids for node in self.nodes):
            raise self.unplaced()
        files = [(f.name, f.content.encode(), f.mode) for f in self.plan.files]
        files += [(n.launch.script_name, n.launch.script.encode(), 0o700) for n in self.nodes]
        scripts = {n.launch.node.address: (n.launch.node.name, n.launch.script_name)
                   for n in self.nodes}  # fmt: skip
        self.executor.session.trained = True  # its detached actors are looked for at the end
        self.run = TrainerRun(self.ray, self.workdir, self.tag, self.executor.grace_s)
        self.run.start(scripts, [ids[n.launch.node.address] for n in self.nodes],
                       self.plan.master_port, files, f"dtrun-{self.plan.rdzv_id}")  # fmt: skip
        self.executor.placed += 1
        for node in self.nodes:
            node.actor = self.run  # a node runs until the relay has its exit

    def take(self) -> Next | None:
        """What the relay holds now; the first exit that decides the launch, if one does."""
        assert self.run is not None
        lines, codes, started = self.run.take()
        by_name = {node.launch.node.name: node for node in self.nodes}
        for name in started:
            by_name[name].started = by_name[name].started or time.monotonic()
        for name, chunk in lines:
            self.write(by_name[name], chunk)
        decided = None
        for name, code in codes.items():
            node = by_name[name]
            if node.code is not None or node.stopped or code is None:
                continue
            node.code, node.ended = code, time.monotonic()
            step = after_exit(self.plan.success, node.launch, code)
            if step is not Next.WAIT and decided is None:
                decided = step if step is Next.DONE else Next.FAILED
                self.decider = node
        return decided

    def supervise(self, timeout_s: float) -> RunError | None:
        assert self.run is not None
        deadline = time.monotonic() + timeout_s
        while True:
            step = self.take()
            self.cut()
            if step is Next.FAILED:
                return self.failed(self.decider)
            waiting = [n for n in self.nodes if n.code is None and not n.launch.service]
            if step is Next.DONE or not waiting:
                return None
            if not self.run.running:  # fit() ended with nodes that never said how
                for node in waiting:
                    node.lost = said(self.run.error) if self.run.error else "Ray Train ended"
                    node.ended = time.monotonic()
                return None  # lost_first says which
            if time.monotonic() >= deadline:
                return self.timed_out(timeout_s, waiting)
            time.sleep(LAUNCH_POLL_S)

    def stop(self) -> None:
        if self.run is not None:
            for node in self.nodes:
                if node.code is None and not node.lost:
                    node.stopped = True
            self.run.stop()
            with contextlib.suppress(Exception):
                self.take()
            with contextlib.suppress(Exception):
                self.ray.kill(self.run.relay, no_restart=True)
        for node in self.nodes:
            node.ended = node.ended or time.monotonic()
            node.log.close()
