"""Launches on real machines over SSH: stage, run every node's script, stop, collect.

Every process of a launch carries DTRUN_LAUNCH=<random tag>-<node's index> in its environment
(set on the command line, so no sshd AcceptEnv is needed); stopping a launch on a node signals
every process with that node's tag there and checks that none is left. Each node's script is
started by a wrapper (templates/remote/launch.sh.j2) that does that stop itself once the script
ends, and says so; its guard does it if dtrun's connection closes first (a SIGKILLed dtrun).
dtrun logs in to stop a node only where its wrapper did not say so: a node still running, or
stopped. Staging uses the shared storage when the inventory has one (written once), each
node's workdir otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.engines.common.code import code_files, node_python
from dtrun.engines.common.scripts import AnswerLines, line_text
from dtrun.engines.common.signals import sigint_deferred
from dtrun.engines.ssh.ended import Ended, StoppedLate, node_results, with_left
from dtrun.engines.ssh.remote import (
    launch_command,
    remote_launch_dir,
    run_command,
    stream,
    swept_marker,
)
from dtrun.engines.ssh.session import SshError, SshSession, lost_connection
from dtrun.engines.ssh.transfer import (
    Files,
    exec_get,
    exec_get_steps,
    exec_put,
    next_node_unless_here,
    refused_here,
    sftp_get,
)
from dtrun.errors import LaunchInterrupted, NodeFailedError, RunError, RunTimeoutError
from dtrun.execute import Answer, LineSink, LogCut, StopSink, cut_by, cut_ended, quiet_stop
from dtrun.execute.guard import stop_script
from dtrun.execute.success import Next, after_exit, mark_stopped
from dtrun.spec.cluster import Node
from dtrun.spec.launchplan import RESULT_FILE, STEP_DIR, LaunchPlan, NodeLaunch
from dtrun.spec.outcome import NodeResult
from dtrun.spec.text import plural
from dtrun.workloads.files import NodeLog

if TYPE_CHECKING:
    import asyncssh


class SshExecutor:
    """Runs a LaunchPlan's node scripts over an SshSession (Executor protocol)."""

    def __init__(self, session: SshSession, *, grace_s: float = 5.0) -> None:
        self.session = session
        self.on_stopping: StopSink = quiet_stop
        self.inventory = session.inventory
        self.grace_s = grace_s
        self._code_staged: set[str] = set()
        self._no_sftp: set[str] = set()  # nodes whose sshd offers no SFTP subsystem
        self._stopped: tuple[NodeResult, ...] | None = None  # how each node of a stop ended
        self._held: dict[str, asyncssh.SSHClientProcess[str]] = {}  # the check's, to stage

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        workdir.mkdir(parents=True, exist_ok=True)
        self._stopped = None
        try:
            return self.session.call(self._run(plan, workdir, timeout_s, on_line))
        except KeyboardInterrupt:
            if self._stopped is None:  # stopped before any node started
                raise
            raise LaunchInterrupted(self._stopped) from None
        except StoppedLate as stop:
            raise LaunchInterrupted(stop.nodes, stop.ended) from None

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None, *, hold: bool = False
    ) -> dict[str, Answer]:
        by_name = {node.name: node for node in self.inventory.nodes}
        return self.session.call(
            self._command({by_name[name]: s for name, s in scripts.items()}, on_line, hold)
        )

    async def _command(
        self, scripts: dict[Node, str], on_line: LineSink | None, hold: bool
    ) -> dict[str, Answer]:
        async def one(node: Node, script: str) -> Answer:
            lines = AnswerLines()  # its last lines (ANSWER_MOST)

            def sink(segment: str) -> None:
                line = line_text(segment)
                lines.add(line)
                if on_line is not None:
                    on_line(node.name, line)

            try:
                connection = await self.session.connection(node)
                async with self.session.limit:
                    with lost_connection(node, "running the command"):
                        process, status = await run_command(connection, script, sink, hold=hold)
            except SshError as error:
                self.session.forget(node)
                return Answer(lines.text(), None, f"{error.what}: {error.why}")
            if hold and process.exit_status is None and not process.is_closing():
                self._held[node.name] = process  # the node's staging goes through it
            return Answer(lines.text(), status)

        answers = await asyncio.gather(*(one(node, script) for node, script in scripts.items()))
        return {node.name: answer for node, answer in zip(scripts, answers, strict=True)}

    # -- staging --------------------------------------------------------------------------
    def _staging_nodes(self, nodes: list[Node]) -> list[Node]:
        """Shared storage: one node writes for all. Otherwise every node gets its own copy."""
        return nodes[:1] if self.inventory.shared_dir else nodes

    async def _put(self, node: Node, files: Files, code: Files) -> None:
        """Through the exec channel, every file in one script, the code only where the node
        lacks it (transfer.py says why)."""
        connection = await self.session.connection(node)
        held = self._held.pop(node.name, None)  # the program check's session, if it is open
        if held is not None and (held.exit_status is not None or held.is_closing()):
            held = None
        with lost_connection(node, "copying the launch files"):
            async with self.session.limit:
                await exec_put(connection, node, files, code, held)

    async def _stage(self, plan: LaunchPlan, remote_dir: str) -> None:
        """Code, scripts and launch files to every node of the point: a head-only launcher
        starts ranks on nodes that run no script of their own, and they need the files too.
        Without shared storage a node gets its own script, its own files and those every node
        reads: every node's to every node was N x N files (issue 41)."""
        nodes = list(plan.nodes) or [launch.node for launch in plan.launches]
        code_dir = self.inventory.code_dir
        code = {f"{code_dir}/{rel}": (data, 0o644) for rel, data in code_files().items()}
        shared = bool(self.inventory.shared_dir)  # one node writes every node's
        # a node's rank is its place in plan.nodes, whether it runs a script or a head-only
        # launcher starts its ranks (their launch-env.sh reads the node's own files)
        ranks = {launch.node.name: launch.node_rank for launch in plan.launches}
        ranks.update({node.name: rank for rank, node in enumerate(plan.nodes)})
        uploads = []
        for node in self._staging_nodes(nodes):
            files: Files = {
                f"{remote_dir}/{launch.script_name}": (launch.script.encode(), 0o700)
                for launch in plan.launches
                if shared or launch.node.name == node.name
            }
            files.update(
                {
                    f"{remote_dir}/{file.name}": (file.content.encode(), file.mode)
                    for file in plan.files
                    if shared or file.node_rank is None or file.node_rank == ranks.get(node.name)
                }
            )
            uploads.append(self._put(node, files, {} if node.name in self._code_staged else code))
        await asyncio.gather(*uploads)
        self._code_staged.update(node.name for node in self._staging_nodes(nodes))
        if self.inventory.shared_dir:
            self._code_staged.update(node.name for node in nodes)
            for held in self._held.values():  # node 0 staged every node's: they stage nothing
                held.close()
            self._held.clear()

    # -- one launch -----------------------------------------------------------------------
    async def _node(
        self, launch: NodeLaunch, remote_dir: str, tag: str, log: NodeLog, on_line: LineSink
    ) -> Ended:
        node = launch.node
        started = time.monotonic()
        python = node_python(self.inventory.python_bin, self.inventory.code_dir)
        command = launch_command(remote_dir, launch.script_name, tag, self.grace_s, *python)
        marker = swept_marker(tag)
        left: list[str] | None = None
        try:
            connection = await self.session.connection(node)
            with lost_connection(node):
                import asyncssh

                process = await connection.create_process(command, stderr=asyncssh.STDOUT)

                def sink(segment: str) -> None:
                    nonlocal left
                    # the wrapper's last line, after the program's output even where that
                    # did not end its own last line
                    ours = segment.find(marker)
                    if ours >= 0:
                        said = segment[ours + len(marker) :]
                        left = [pid for pid in said.split() if pid.isdigit()]
                        segment = segment[:ours]
                        if not segment:
                            return
                    log.write(segment.encode())  # as the program wrote it, "\r" and all
                    on_line(node.name, line_text(segment))
                    if log.error is not None:  # the reading ends: the node is to be stopped
                        raise log.error

                await stream(process, sink)
        except SshError as error:
            self.session.forget(node)
            return Ended(launch, None, time.monotonic() - started, error)
        except OSError as error:
            if error is not log.error:
                raise
            return Ended(launch, None, time.monotonic() - started, cut=error)
        status = process.exit_status
        if status is None or status < 0:  # killed by a signal
            signal = process.exit_signal[0] if process.exit_signal else "?"
            on_line(node.name, f"dtrun: the launch ended by signal {signal}")
            status = 128
        return Ended(launch, status, time.monotonic() - started, left=left)

    async def _run(
        self, plan: LaunchPlan, workdir: Path, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        remote_dir = remote_launch_dir(self.inventory, workdir)
        await self._stage(plan, remote_dir)
        launch_tag = secrets.token_hex(8)
        # each node's own: a node's stop leaves another node's processes on its machine alone
        tags = {launch.node.name: f"{launch_tag}-{i}" for i, launch in enumerate(plan.launches)}
        logs = {
            each.node.name: NodeLog(workdir / f"{each.node.name}.log") for each in plan.launches
        }
        tasks = {
            asyncio.create_task(
                self._node(
                    launch, remote_dir, tags[launch.node.name], logs[launch.node.name], on_line
                )
            ): launch
            for launch in plan.launches
        }
        ended: dict[str, Ended] = {}
        verdict: RunError | None = None
        left: list[str] = []
        stopped, cut = False, None
        try:
            verdict = await self._supervise(plan, tasks, ended, timeout_s, workdir)
        except asyncio.CancelledError:  # Ctrl-C, SIGTERM or SIGHUP (the session's loop)
            stopped = True
            raise
        except OSError as error:  # a node log the disk could not hold (_supervise), only
            cut = cut_by(error, (end.cut for end in ended.values()))
        finally:
            with sigint_deferred(replay=False) as late:  # raised below, with every node's end
                if stopped:  # saying so must not replace the stop (a closed terminal)
                    with contextlib.suppress(Exception):
                        self.on_stopping(len(tasks) - len(ended))
                for task in tasks:
                    task.cancel()
                left = await asyncio.shield(self._stop_everywhere(plan, tags, ended))
                for log in logs.values():
                    log.close()
            # each node as it ended, its exit code or None where the stop ended it: for a Ctrl-C
            # now or while the results come back (_collect), and for the end said below
            results = self._stopped = node_results(plan, workdir, ended)
        verdict = with_left(verdict, left)
        if cut is not None:  # the caller says why (writefail.py); a stop signal meanwhile too
            raise StoppedLate(results, cut_ended(cut)) if late else LogCut(cut, results)
        if verdict is not None:
            verdict.node_results = results
        if late:
            raise StoppedLate(results, verdict)
        if verdict is not None:
            await self._steps_of_failed(plan, remote_dir, workdir, verdict)
            raise verdict
        return await self._collected(plan, remote_dir, workdir, mark_stopped(plan.success, results))

    async def _collected(
        self, plan: LaunchPlan, remote_dir: str, workdir: Path, results: tuple[NodeResult, ...]
    ) -> tuple[NodeResult, ...]:
        """How each node ended, once what they left is copied back (_collect). This machine's
        disk refusing a copy (transfer.py) is raised as a cut log is (LogCut): with every
        node's end, for the launch's record."""
        try:
            await self._collect(plan, remote_dir, workdir)
        except OSError as refused:
            if not refused_here(refused):
                raise
            raise LogCut(refused, results) from refused
        return results

    async def _steps_of_failed(
        self, plan: LaunchPlan, remote_dir: str, workdir: Path, verdict: RunError
    ) -> None:
        """A failed program's step records, if they come back: how its ranks ended (earlyexit)."""
        if plan.workload == "program" and isinstance(verdict, NodeFailedError):
            with contextlib.suppress(RunError, OSError, TimeoutError):
                await asyncio.wait_for(self._collect(plan, remote_dir, workdir), 30)

    async def _supervise(
        self,
        plan: LaunchPlan,
        tasks: dict[asyncio.Task[Ended], NodeLaunch],
        ended: dict[str, Ended],
        timeout_s: float,
        workdir: Path,
    ) -> RunError | None:
        """Until the launch succeeds by its rule (None), a node fails or is lost, or time runs
        out. Service nodes (TensorFlow's parameter servers) are not waited for; they are stopped
        afterwards, as every node still running is once node 0 has exited 0 under worker0."""
        waited = sum(not launch.service for launch in tasks.values())
        # taken as they end, O(1) a node (asyncio.wait over every pending task was O(N) each)
        limit = None if math.isinf(timeout_s) else timeout_s
        for end in asyncio.as_completed(tasks, timeout=limit) if waited else ():
            try:
                result = await end
            except TimeoutError:
                still = sorted(t.node.name for k, t in tasks.items() if not (k.done() or t.service))
                return RunTimeoutError(
                    f"the launch on {plural(len(tasks), 'node')} did not finish within "
                    f"{timeout_s:g} s",
                    why=f"still running when stopped: {', '.join(still)}",
                    fix="raise --timeout, or read the node logs for where it hung",
                )
            waited -= not result.launch.service
            ended[result.launch.node.name] = result
            if result.error is not None:
                return result.error
            if result.cut is not None:  # the caller says why (runner/record/writefail.py)
                raise result.cut
            code = 1 if result.exit_code is None else result.exit_code
            step = after_exit(plan.success, result.launch, code)
            if step is Next.FAILED:
                from dtrun.execute.failure import explain_log  # only for a failure

                node, log = result.launch.node, workdir / f"{result.launch.node.name}.log"
                return NodeFailedError(node.name, node.address, code, str(log), explain_log(log))
            if step is Next.DONE or not waited:
                return None
        return None

    async def _stop_everywhere(
        self, plan: LaunchPlan, tags: dict[str, str], ended: dict[str, Ended]
    ) -> list[str]:
        """Stop the launch's processes on every reachable node whose wrapper did not stop them
        (one login a node fewer after a launch that ended by itself: issue 41); say where any
        is left."""
        lost = {name for name, end in ended.items() if end.error is not None}

        def survived(node: Node, left: list[str]) -> str | None:
            return f"{node.name}: pids {' '.join(left)} survived SIGKILL" if left else None

        async def stop(node: Node) -> str | None:
            done = ended.get(node.name)
            if done is not None and done.left is not None:  # its wrapper stopped them
                return survived(node, done.left)
            script = stop_script(tags[node.name], self.grace_s)
            try:
                connection = await self.session.connection(node)
                with lost_connection(node, "stopping the launch"):
                    result = await connection.run("bash -s", input=script, check=False)
            except SshError:
                return f"{node.name}: unreachable, so its processes could not be checked"
            return survived(node, str(result.stdout).rpartition("dtrun-left:")[2].split())

        reachable = [launch.node for launch in plan.launches if launch.node.name not in lost]
        problems = [p for p in await asyncio.gather(*(stop(node) for node in reachable)) if p]
        problems += [f"{name}: its connection was lost; check it by hand" for name in sorted(lost)]
        return problems

    async def _collect(self, plan: LaunchPlan, remote_dir: str, workdir: Path) -> None:
        """Copy rank 0's result back; without shared storage it is on one node, any of them.
        A user program's launch: every node's step records instead (each node holds its own
        ranks' without shared storage), from which dtrun makes the result here; from every
        node at once, not one round trip after another (issue 41). `dtrun run`'s launch
        reads nothing back: its record is the nodes' exit codes and logs."""
        if plan.workload == "run":
            return
        if plan.workload == "program":

            async def steps(node: Node) -> None:
                connection = await self.session.connection(node)
                with lost_connection(node, "copying the step records back"):
                    async with self.session.limit:
                        await exec_get_steps(
                            connection, node, f"{remote_dir}/{STEP_DIR}", workdir / STEP_DIR
                        )

            nodes = list(plan.nodes) or [launch.node for launch in plan.launches]
            await asyncio.gather(*(steps(node) for node in self._staging_nodes(nodes)))
            return
        remote, local = f"{remote_dir}/{RESULT_FILE}", workdir / RESULT_FILE
        for node in list(plan.nodes) or [launch.node for launch in plan.launches]:
            connection = await self.session.connection(node)
            with lost_connection(node, f"copying {RESULT_FILE} back"), next_node_unless_here(local):
                found = None if node.name in self._no_sftp else await sftp_get(
                    connection, remote, local
                )  # fmt: skip
                if found is None:
                    self._no_sftp.add(node.name)
                    found = await exec_get(connection, node, remote, local)
                if found:
                    return
