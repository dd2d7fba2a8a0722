"""The Ray engine's executor: a launch is one placement group, one ``STRICT_SPREAD`` bundle per
node, pinned to the node's address; in each bundle an actor (runner/engines/ray/node.py) runs
that node's rendered script (docs/ray.md).

dtrun polls every actor for its script's output, which goes to ``<node>.log`` in the launch
directory and to the console, and for its exit. The first node to fail stops the others; a node
whose actor Ray lost (a killed raylet or worker) fails the launch by its name and address,
before the failures it caused on the other nodes. Every end of a launch (done, failed, timed
out, Ctrl-C, SIGTERM, SIGHUP) stops every script, kills every actor and removes the placement
group; a SIGKILLed dtrun ends the Ray job, and Ray kills its actors and removes its placement
groups (runner/engines/ray/session.py).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtrun.engines.common.scripts import line_text, write_launch_files, write_scripts
from dtrun.engines.common.signals import sigint_deferred
from dtrun.engines.ray.launcher import NAME as TORCHTRAINER
from dtrun.engines.ray.node import GRACE_S, NodeProcess
from dtrun.engines.ray.session import RaySession, said
from dtrun.errors import LaunchInterrupted, NodeFailedError, RunError, RunTimeoutError
from dtrun.execute import Answer, LineSink, StopSink, cut_by, cut_stop, quiet_stop
from dtrun.execute.success import Next, after_exit, mark_stopped
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from dtrun.spec.outcome import NodeResult
from dtrun.spec.text import plural
from dtrun.workloads.files import NodeLog

PLACE_S = 60.0  # how long Ray may take to place a launch's bundles
POLL_S = 0.2  # how long each node's actor holds a poll for output (less: its script ended)
ANSWER_S = 1.0  # beyond POLL_S, how long dtrun waits for polls before it looks at the clock
SILENT_S = 10.0  # an actor silent this long at the deadline: its node hangs (timed_out)
BUNDLE_CPUS = 1


def bundle(launch: NodeLaunch) -> dict[str, float]:
    """One node's bundle: a CPU, on the node of its address (Ray's own ``node:ADDRESS``)."""
    return {"CPU": BUNDLE_CPUS, f"node:{launch.node.address}": 0.001}


@dataclass
class _Node:
    launch: NodeLaunch
    log: NodeLog
    actor: Any = None
    poll: Any = None  # the poll under way
    started: float = 0.0
    answered: float | None = None  # its last poll's answer (its start's return, till then)
    ended: float | None = None
    code: int | None = None
    stopped: bool = False
    lost: str | None = None  # Ray's words, when it lost the node's actor
    raised: bool = False  # lost because its start raised, on a node Ray still has

    @property
    def running(self) -> bool:
        return self.actor is not None and self.code is None and self.lost is None

    def result(self) -> NodeResult:
        end = self.ended if self.ended is not None else time.monotonic()
        return NodeResult(
            node=self.launch.node.name,
            address=self.launch.node.address,
            exit_code=None if self.stopped else self.code,
            log_path=str(self.log.path),
            wall_s=end - self.started if self.started else 0.0,
            cause=f"Ray lost it: {self.lost}" if self.lost else None,
        )


class RayExecutor:
    def __init__(
        self,
        session: RaySession,
        addresses: dict[str, str],
        *,
        grace_s: float = GRACE_S,
        place_s: float = PLACE_S,
    ) -> None:
        """``addresses``: each node's, by name (the inventory's)."""
        self.session, self.addresses = session, addresses
        self.grace_s, self.place_s = grace_s, place_s
        self.on_stopping: StopSink = quiet_stop
        self.placed = 0  # placement groups made, for the tests and the benchmark

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None, *, hold: bool = False
    ) -> dict[str, Answer]:
        """Each script runs with bash on its node, as a Ray task pinned to the node's address."""
        from dtrun.engines.ray.commands import run_commands

        return run_commands(self.session, self.addresses, scripts, on_line)

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        write_launch_files(plan, workdir)
        write_scripts(plan, workdir)
        nodes = [_Node(launch, NodeLog(workdir / f"{launch.node.name}.log"))
                 for launch in plan.launches]  # fmt: skip
        launch = _Launch(self, plan, workdir, nodes, on_line)
        if plan.launcher == TORCHTRAINER:
            from dtrun.engines.ray.trainer import TrainerLaunch

            launch = TrainerLaunch(self, plan, workdir, nodes, on_line)
        verdict: RunError | None = None
        interrupted, cut = False, None
        try:
            launch.place()
            verdict = launch.supervise(timeout_s)
        except KeyboardInterrupt:
            interrupted = True
        except OSError as error:  # a node log the disk could not hold (_Launch.cut), only
            cut = cut_by(error, (node.log.error for node in nodes))
        finally:
            with sigint_deferred(replay=False) as late:  # raised below, with every node's end
                if interrupted:  # saying so must not replace the stop (a closed terminal)
                    with contextlib.suppress(Exception):
                        self.on_stopping(sum(node.running for node in nodes))
                launch.stop()
        results = tuple(node.result() for node in nodes)
        if cut is not None:  # the caller says why (writefail.py); a stop signal meanwhile too
            raise cut_stop(cut, results, late)
        if not interrupted:
            verdict = launch.lost_first() or verdict
        if verdict is not None:
            verdict.node_results = results
        if interrupted or late:  # each node as it ended: its exit code, or None if stopped
            raise LaunchInterrupted(results, None if interrupted else verdict)
        if verdict is None:
            return mark_stopped(plan.success, results)
        raise verdict


def node_tag(launch_tag: str, index: int) -> str:
    """The tag node ``index``'s actor gives its processes: its own, so that the guard of a
    node whose worker died stops that node's processes, not another node's on the same
    machine (two Ray nodes on one host; CI: ray-1's dead raylet SIGTERMed ray-0's torchrun),
    as the SSH engine's tags are each node's own."""
    return f"{launch_tag}-{index}"


class _Launch:
    """One launch's placement group and actors (module docstring)."""

    def __init__(
        self,
        executor: RayExecutor,
        plan: LaunchPlan,
        workdir: Path,
        nodes: list[_Node],
        on_line: LineSink,
    ) -> None:
        self.executor, self.plan, self.workdir = executor, plan, workdir
        self.nodes, self.on_line = nodes, on_line
        self.ray = executor.session.ray
        self.group: Any = None
        self.tag = secrets.token_hex(8)  # each node's own from it: node_tag

    def place(self) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = self.ray
        with sigint_deferred():  # a group that was made is one that gets removed
            self.group = placement_group(
                [bundle(node.launch) for node in self.nodes],
                strategy="STRICT_SPREAD",
                name=f"dtrun-{self.plan.rdzv_id}",
            )
            self.executor.placed += 1
        # the actors are asked for at once: Ray starts each one's worker as soon as the group
        # is placed, rather than after dtrun has heard so and asked (one round trip less)
        files = [(f.name, f.content.encode(), f.mode) for f in self.plan.files]
        files += [(n.launch.script_name, n.launch.script.encode(), 0o700) for n in self.nodes]
        actor = ray.remote(NodeProcess)
        starts = {}
        for index, node in enumerate(self.nodes):
            with sigint_deferred():
                node.actor = actor.options(
                    num_cpus=BUNDLE_CPUS,
                    max_restarts=0,
                    name=f"dtrun-{self.plan.rdzv_id}-{node.launch.node.name}",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, index),
                ).remote(node_tag(self.tag, index))
            node.started = time.monotonic()
            starts[index] = node.actor.start.remote(
                str(self.workdir), files, node.launch.script_name
            )
        try:
            placed = self.group.wait(timeout_seconds=self.executor.place_s)
        except BaseException:  # Ctrl-C, SIGTERM: no stop to ask of actors that may never start
            self.unstarted()
            raise
        if not placed:
            self.unstarted()
            raise self.unplaced()
        for index, ref in starts.items():
            node = self.nodes[index]
            try:
                address, _host = ray.get(ref)
            except ray.exceptions.RayError as error:
                # RayTaskError: start itself raised (its files could not be written), not a loss
                node.lost = said(error)
                node.raised = isinstance(error, ray.exceptions.RayTaskError)
                continue
            # its first answer: silence counts from here, not from the placement's wait
            node.answered = time.monotonic()
            if address != node.launch.node.address:  # Ray's node:ADDRESS pins it: never
                node.lost = f"its bundle was placed on {address}, not on its own node"

    def unstarted(self) -> None:
        """The actors asked for, killed before Ray placed them (their scripts never began, or
        their guards end them) and unset, so that the stop asks nothing of them."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                self.ray.kill(node.actor, no_restart=True)
            node.actor = None

    def unplaced(self) -> RunError:
        alive = {str(n["NodeManagerAddress"]) for n in self.ray.nodes() if n.get("Alive")}
        gone = [n.launch.node for n in self.nodes if n.launch.node.address not in alive]
        where = ", ".join(f"{node.name} ({node.address})" for node in gone)
        return RunError(
            f"Ray did not place the launch's {plural(len(self.nodes), 'bundle')} within "
            f"{self.executor.place_s:g} s",
            why=f"Ray has no live node at {where}"
            if gone
            else "their nodes' CPUs are taken by other work (one CPU a node)",
            fix="start the missing raylets (`ray start --address HEAD:PORT`), or run with fewer "
            "--nodes"
            if gone
            else "wait for that work to end, or run with fewer --nodes",
        )

    def timed_out(self, timeout_s: float, waiting: list[_Node]) -> RunTimeoutError:
        """The error of a launch whose nodes in ``waiting`` still ran at its deadline, naming
        those whose actor no longer answered (a hung node: Ray calls it dead only later): for
        SILENT_S since it last answered, its start's return the first; one that never
        answered is not named so (Ray may not have placed it yet)."""
        now = time.monotonic()
        hung = "".join(f"; {n.launch.node.name} ({n.launch.node.address}) had not answered "
                       f"dtrun for {now - n.answered:.0f} s: its node hangs" for n in waiting
                       if n.answered is not None and now - n.answered > SILENT_S)  # fmt: skip
        return RunTimeoutError(
            f"the launch on {plural(self.plan.nnodes, 'node')} did not finish within "
            f"{timeout_s:g} s",
            why="still running when stopped: "
            + ", ".join(node.launch.node.name for node in waiting)
            + hung,
            fix="raise --timeout, or read the node logs for where it hung",
        )

    def supervise(self, timeout_s: float) -> RunError | None:
        """Until the launch is decided by its success rule (None), a node fails or is lost,
        or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [n for n in self.nodes if n.running and not n.launch.service]
            if not waiting or any(node.lost for node in self.nodes):
                return None  # done, or lost_first says which node was lost
            if time.monotonic() >= deadline:
                return self.timed_out(timeout_s, waiting)
            for node in self.polled():
                step = self.heard(node)
                self.cut()
                if step is Next.FAILED:
                    return self.failed(node)
                if step is Next.DONE:
                    return None

    def cut(self) -> None:
        """A node log the disk cannot hold (NodeLog) ends the launch as a failed node does:
        run's finally stops every node, and the caller says why (record/writefail.py)."""
        for node in self.nodes:
            if node.log.error is not None:
                raise node.log.error

    def polled(self) -> list[_Node]:
        """The nodes whose poll came back: the first to answer, and any others by then (each
        actor holds a poll up to POLL_S, less once its script ends; a node's next poll is
        asked only once its last one answered)."""
        for node in self.nodes:
            if node.running and node.poll is None:
                node.poll = node.actor.poll.remote(POLL_S)
        polls = [node.poll for node in self.nodes if node.poll is not None]
        done, _ = self.ray.wait(polls, num_returns=1, timeout=POLL_S + ANSWER_S)
        if done:  # the others' answers that came with it
            done, _ = self.ray.wait(polls, num_returns=len(polls), timeout=0)
        return [node for node in self.nodes if node.poll is not None and node.poll in done]

    def heard(self, node: _Node) -> Next:
        """What the node's answered poll says: its lines logged, and its exit, if it exited."""
        ray = self.ray
        ref, node.poll = node.poll, None
        try:
            lines, code = ray.get(ref)
        except ray.exceptions.RayError as error:
            node.lost, node.ended = said(error), time.monotonic()
            return Next.WAIT
        node.answered = time.monotonic()
        self.write(node, lines)
        if code is None:
            return Next.WAIT
        node.code, node.ended = code, time.monotonic()
        return after_exit(self.plan.success, node.launch, code)

    def write(self, node: _Node, lines: list[bytes]) -> None:
        """The node's lines to its log and the console; once dtrun has stopped the node, to
        its log only: what its launcher prints while it stops (torchrun's SignalException
        traceback) is not the user's to read there, as on the other engines."""
        for raw in lines:
            node.log.write(raw)
            if not node.stopped:
                self.on_line(node.launch.node.name, line_text(raw.decode(errors="replace")))

    def failed(self, node: _Node) -> RunError:
        from dtrun.execute.failure import explain_log  # its patterns: only for a failure

        assert node.code is not None
        where, log = node.launch.node, node.log.path
        return NodeFailedError(where.name, where.address, node.code, str(log), explain_log(log))

    def lost_first(self) -> RunError | None:
        """A node Ray lost, named before any failure it caused on the others."""
        lost = [node for node in self.nodes if node.lost]
        if not lost:
            return None
        node = min(lost, key=lambda n: n.ended or 0.0)
        name, address = node.launch.node.name, node.launch.node.address
        if node.raised:
            error = RunError(
                f"{name} ({address}) could not start its launch: its Ray actor raised, and the "
                "other nodes were stopped",
                why=f"Ray: {node.lost}",
                fix=f"the Ray worker on {address} writes the launch's files in {self.workdir} "
                "(the same path as here): let its user make and write that directory, or pass "
                "--output a directory it can write, then run again",
            )
        else:
            error = RunError(
                f"{name} ({address}) was lost: Ray ended its actor, and the other nodes were "
                "stopped",
                why=f"Ray: {node.lost}",
                fix=f"check the Ray node at {address} (its raylet.out, under "
                "/tmp/ray/session_latest/logs there), then run again",
            )
        error.lost_node = node.launch.node.name  # a check goes on without it
        return error

    def stop(self) -> None:
        """Every script stopped, every actor killed, the placement group removed."""
        ray = self.ray
        stops = {}
        for index, node in enumerate(self.nodes):
            if node.running:
                node.stopped = True
                stops[index] = node.actor.stop.remote(self.executor.grace_s)
        if stops:
            ray.wait(list(stops.values()), num_returns=len(stops),
                     timeout=self.executor.grace_s + 10)  # fmt: skip
        for index, ref in stops.items():
            node = self.nodes[index]
            try:
                lines, _ = ray.get(ref, timeout=0)
            except ray.exceptions.RayError as error:
                if not isinstance(error, ray.exceptions.GetTimeoutError):
                    node.lost = node.lost or said(error)
                continue
            finally:
                node.ended = node.ended or time.monotonic()
            self.write(node, lines)
        for node in self.nodes:
            if node.actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(node.actor, no_restart=True)
            node.log.close()
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self.group)
