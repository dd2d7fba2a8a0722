"""One launch under --launcher torchtrainer, supervised as the Ray engine's other launches are
(runner/engines/ray/executor.py): the same node logs, fail-fast, timeout and stops, with Ray
Train's workers in place of dtrun's actors (runner/engines/ray/trainer.py)."""

from __future__ import annotations

import contextlib
import time

from dtrun.engines.ray.executor import POLL_S, _Launch, _Node, said
from dtrun.engines.ray.trainer import TrainerRun
from dtrun.errors import RunError, RunTimeoutError
from dtrun.execute.success import Next, after_exit
from dtrun.spec.text import plural


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
                return RunTimeoutError(
                    f"the launch on {plural(self.plan.nnodes, 'node')} did not finish within "
                    f"{timeout_s:g} s",
                    why="still running when stopped: "
                    + ", ".join(node.launch.node.name for node in waiting),
                    fix="raise --timeout, or read the node logs for where it hung",
                )
            time.sleep(POLL_S)

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
