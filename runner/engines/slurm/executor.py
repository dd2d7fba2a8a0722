"""Launches through Slurm: one srun job step per launch, one task per node (docs/slurm.md).

Each node's task runs srun-node.sh, which picks that node's rendered launch script (the same
scripts every engine runs) by SLURMD_NODENAME. srun's --label prefixes each line with its task;
the wrapper's first line binds the task to its node, its last says how the script ended, so
each node gets its own log here and the failing node is named. --kill-on-bad-exit makes Slurm
stop the step when a node fails; a timeout, Ctrl-C, SIGTERM or SIGHUP cancels the step with
scancel and waits until squeue no longer lists it.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dtrun import __version__
from dtrun.engines.common.scripts import run_scripts, write_launch_files, write_scripts
from dtrun.engines.common.signals import sigint_deferred
from dtrun.engines.slurm.fault import Heard, ended_by_slurm, srun_answer, task_lines
from dtrun.engines.slurm.shell import SlurmShell, cancel, last_said, step_guard
from dtrun.engines.slurm.stage import HeadStaging
from dtrun.errors import (
    LaunchInterrupted,
    NodeFailedError,
    RunError,
    RunTimeoutError,
    UsageError,
)
from dtrun.execute import Answer, LineSink, StopSink, cut_stop, quiet_stop
from dtrun.execute.guard import TAG, drop_guard, reaper_on_node
from dtrun.execute.success import Next, Settled, mark_stopped, settle
from dtrun.render import render
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import NodeHealth, NodeResult
from dtrun.spec.text import plural
from dtrun.workloads.files import NodeLog, write_atomic

WRAPPER = "srun-node.sh"
SRUN_LOG = "srun.log"  # srun's own messages, and anything a task printed before it was bound
NOT_SHARED = 97  # the guard's exit: the run directory is not on that node
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_BOUND = re.compile(r"^dtrun: slurm task \S+ of job \S+ runs (\S+) on (\S+)$")
_EXITED = re.compile(r"dtrun: (\S+) on (\S+) exited (\d+) \(launch (\S+)\)$")  # after any output
# Run by each task before the wrapper: a run directory the node does not share fails clearly.
_GUARD = (
    'cd -- "$1" 2>/dev/null && [ -r ./srun-node.sh ] || { echo "dtrun: the run directory $1 is '
    f'not on ${{SLURMD_NODENAME:-this node}}"; exit {NOT_SHARED}; }}; exec bash ./srun-node.sh "$2"'
)


def wrapper(plan: LaunchPlan, run_id: str, python: str = "", package: str = "") -> str:
    """srun-node.sh; with the nodes' ``python`` and dtrun's ``package`` there, each script runs
    under the reaper (runner/execute/reaper.py), with the other engines' 5 s stop grace."""
    scripts = [(launch.node.name, launch.script_name) for launch in plan.launches]
    return render("launch/srun-node.sh.j2", {"version": __version__, "run_id": run_id,
                  "scripts": scripts, **reaper_on_node(python, package, 5.0)})  # fmt: skip


def step_command(
    plan: LaunchPlan, job_id: str, workdir: str, tag: str, gpus_per_node: int = 0
) -> list[str]:
    """The srun line of one launch, step dtrun-``tag``: a task on each node runs a script (its
    end line carries ``tag``), all CPUs (and GPUs) to it, Slurm stopping the step at a failure."""
    nodes = [launch.node for launch in plan.launches]
    command = [
        "srun",
        f"--jobid={job_id}",
        f"--job-name=dtrun-{tag}",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(node.name for node in nodes)}",
        f"--cpus-per-task={min(node.cpus for node in nodes)}",
        "--kill-on-bad-exit=1",
        "--label",
        f"--chdir={workdir}",
    ]
    if gpus_per_node:
        command.append(f"--gres=gpu:{gpus_per_node}")  # a step sees only the GPUs it asks for
    return [*command, "bash", "-c", _GUARD, "dtrun-srun", workdir, tag]


@dataclass
class _Step:
    """What the output of one running step has said so far."""

    workdir: Path
    names: dict[str, str]  # script name -> node name
    on_line: LineSink
    tag: str  # the launch's: an end line without it is the program's output (an older log)
    logs: dict[str, NodeLog] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)  # task -> node name
    exits: dict[str, tuple[int, float]] = field(default_factory=dict)  # node -> (code, when)
    guard: list[str] = field(default_factory=list)  # nodes that do not see the run directory
    started: float = field(default_factory=time.monotonic)
    slurm: Heard = field(default_factory=Heard)  # what srun and slurmstepd said of the end
    stopping: bool = False  # dtrun cancels the step: an exit said from now on is the stop's

    def line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip("\r\n")
        self.slurm.line(text)
        label = _LABEL.match(text)
        node = self.bound.get(label.group(1)) if label else None
        if label and node is None:
            content = label.group(2)
            bound = _BOUND.match(content)
            if bound and bound.group(1) in self.names:
                node = self.bound[label.group(1)] = self.names[bound.group(1)]
            elif content.startswith("dtrun: the run directory "):
                self.guard.append(content.rsplit(" ", 1)[-1])
        if node is None:
            self._write(SRUN_LOG, raw)
            self.on_line("slurm", text)
            return
        content = label.group(2) if label else text
        ended = _EXITED.search(content)
        if ended and ended.group(2) == node and ended.group(4) == self.tag and not self.stopping:
            self.exits[node] = (int(ended.group(3)), time.monotonic())
        self._write(f"{node}.log", (content + "\n").encode())
        self.on_line(node, content)

    def settled(self, plan: LaunchPlan) -> Settled:
        """The node exit, so far, that decides the launch by its rule (--success)."""
        launches = {launch.node.name: launch for launch in plan.launches}
        exits = [(when, launches[node], code) for node, (code, when) in list(self.exits.items())]
        return settle(plan.success, exits)

    def _write(self, name: str, data: bytes) -> None:
        if name not in self.logs:
            self.logs[name] = NodeLog(self.workdir / name, append=True)
        self.logs[name].write(data)

    @property
    def cut(self) -> OSError | None:  # a log the disk could not hold: the launch stops
        return next((log.error for log in list(self.logs.values()) if log.error), None)

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


class SlurmExecutor:
    """Runs a LaunchPlan's node scripts as one srun step in a Slurm job (Executor protocol)."""

    def __init__(  # reaper: the nodes' python and dtrun's package there
        self, shell: SlurmShell, job_id: str, *, gpus_per_node: int = 0,
        staging: HeadStaging | None = None, grace_s: float = 15.0,
        reaper: tuple[str, str] = ("", ""),
    ) -> None:  # fmt: skip
        self.shell, self.job_id, self.grace_s = shell, job_id, grace_s
        self.reaper = reaper
        self.gpus_per_node = gpus_per_node
        # a stack's Slurm: launch directories go to its shared storage, and come back
        self.staging = staging
        self.on_stopping: StopSink = quiet_stop

    def run(
        self, plan: LaunchPlan, workdir: Path, *, timeout_s: float, on_line: LineSink
    ) -> tuple[NodeResult, ...]:
        if any(launch.service for launch in plan.launches):
            raise UsageError(
                f"--launcher {plan.launcher} is not supported with --slurm",
                fix="use --launcher torchrun, deepspeed or mpirun",
            )
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        write_launch_files(plan, workdir)
        write_scripts(plan, workdir)
        srun_node = wrapper(plan, workdir.parent.parent.name, *self.reaper)
        write_atomic(workdir / WRAPPER, srun_node.encode(), 0o755)
        there = self.staging.push(workdir) if self.staging else str(workdir)
        tag = secrets.token_hex(6)
        step = _Step(workdir, {x.script_name: x.node.name for x in plan.launches}, on_line, tag)
        step.slurm.job = self.job_id
        name = f"dtrun-{tag}"
        guard = step_guard(self.shell, self.job_id, name)  # first: no moment without it
        process = self._start(plan, there, tag, guard)
        reader = threading.Thread(target=_pump, args=(process, step), daemon=True)
        reader.start()
        timed_out = interrupted = False
        try:
            ends = lambda: step.cut is not None or step.settled(plan).next is Next.DONE  # noqa: E731
            timed_out = _wait(process, timeout_s, ends)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            with sigint_deferred(replay=False) as late:  # raised below, with every node's end
                if interrupted:  # saying so must not replace the stop (a closed terminal)
                    with contextlib.suppress(Exception):
                        self.on_stopping(len(plan.launches) - len(step.exits))
                if process.poll() is None:
                    step.stopping = True  # a task that outlives its killed script says it exited
                    self._stop(process, name)
                drop_guard(guard)
                reader.join(timeout=10)
                step.close()
        if step.cut is not None and not interrupted:  # the caller says why (writefail.py)
            raise cut_stop(step.cut, _results(plan, step, step.exits), late)
        if late and not interrupted:  # came while its nodes stopped for its end (a failure)
            try:
                self._verdict(plan, process.returncode, step, timed_out, timeout_s)
            except RunError as ended:
                raise LaunchInterrupted(_results(plan, step, step.exits), ended) from None
        if interrupted or late:  # each node as it ended: its exit code, or None if stopped
            raise LaunchInterrupted(_results(plan, step, step.exits))
        if self.staging is not None:
            self.staging.pull(there, workdir)  # result.json and what the program wrote
        return self._verdict(plan, process.returncode, step, timed_out, timeout_s)

    def _start(
        self, plan: LaunchPlan, there: str, tag: str, guard: subprocess.Popen[bytes]
    ) -> subprocess.Popen[bytes]:
        """srun: every process of the launch carries the tag, here and through the head's
        ssh; Ctrl-C reaches dtrun (a session of its own), which cancels the step itself."""
        command = ["env", f"{TAG}={tag}", *step_command(plan, self.job_id, there, tag,
                                                         self.gpus_per_node)]  # fmt: skip
        try:
            return self.shell.popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        except BaseException:
            drop_guard(guard)
            raise

    def _stop(self, process: subprocess.Popen[bytes], name: str) -> None:
        """Cancel the step (Slurm signals every process of it on every node), then srun. A
        step Slurm does not list yet (srun just started) is stopped through srun (SIGTERM)."""
        deadline = time.monotonic() + 2.0
        ids: list[str] = []
        while not ids and process.poll() is None and time.monotonic() < deadline:
            found = self.shell.run(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i|%j"])
            ids = [line.split("|")[0] for line in found.stdout.splitlines() if line.endswith(name)]
            if not ids:
                time.sleep(0.1)
        for step_id in ids:
            cancel(self.shell, step_id)
        if not ids and process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=self.grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _verdict(
        self, plan: LaunchPlan, code: int, step: _Step, timed_out: bool, timeout_s: float
    ) -> tuple[NodeResult, ...]:
        now = time.monotonic()
        settled = step.settled(plan)
        done = settled.next is Next.DONE  # worker0: exits after node 0's are dtrun's stop
        exits = {n: e for n, e in step.exits.items() if not done or e[1] <= (settled.at or now)}
        results = _results(plan, step, exits)
        if done:
            results = mark_stopped(plan.success, results)
        error: RunError | None = None
        if step.guard:
            raise UsageError(
                f"the run directory is not on {', '.join(step.guard)}, a node of the Slurm job",
                why="Slurm's nodes run the scripts where dtrun writes them: a directory they share",
                fix="pass --output a directory on a file system every node mounts (your home "
                "directory on most clusters)",
            )
        if timed_out:
            running = ", ".join(r.node for r in results if r.exit_code is None)
            error = RunTimeoutError(
                f"the launch on {plural(plan.nnodes, 'node')} did not finish within {timeout_s:g} "
                "s",
                why=f"still running when its Slurm step was cancelled: {running}",
                fix="raise --timeout, or read the node logs for where it hung",
            )
        elif (
            not done
            and not _failed_itself(step, settled)
            and step.slurm.said
            and (slurm := ended_by_slurm(self.shell, self.job_id, step.slurm, results))
        ):
            error = slurm  # Slurm ended the step: a node that exited on its signal is not it
        elif settled.next is Next.FAILED and settled.launch is not None:
            from dtrun.execute.failure import explain_log  # its patterns: only for a failure

            node, address = settled.launch.node.name, settled.launch.node.address
            log = step.workdir / f"{node}.log"
            error = NodeFailedError(node, address, step.exits[node][0], str(log), explain_log(log))
        elif not done and (code != 0 or len(step.exits) < len(plan.launches)):
            ended = ended_by_slurm(self.shell, self.job_id, step.slurm, results)
            if ended is not None:
                raise ended
            srun_log = step.workdir / SRUN_LOG
            text = srun_log.read_text(errors="replace") if srun_log.exists() else ""
            error = RunError(
                f"srun did not run the launch on {plural(plan.nnodes, 'node')} (exit {code})",
                why=last_said(text) or "srun said nothing",
                fix=f"read {srun_log}; check the job with `squeue -j {self.job_id}`",
            )
        if error is None:
            return results
        # Slurm's own end already says each node's part (its cause): keep that one
        error.node_results = error.node_results or results
        raise error

    def drain(self, nodes: Sequence[NodeHealth], run_id: str) -> str:
        """Drain nodes the health gate found below its mark, each with the reason (scontrol
        update): Slurm lets the job end, then gives them to no one until they are resumed."""
        reasons = {}
        for node in nodes:
            figure = f"{node.busbw:.1f} GB/s" if node.busbw is not None else "did not run"
            reasons[node.node] = f"dtrun health gate, run {run_id}: all-reduce {figure}"
        return self.drain_hosts(reasons)

    def drain_hosts(self, reasons: Mapping[str, str]) -> str:
        """Drain these nodes (node name -> reason), as ``drain`` does; `dtrun check` names them."""
        for name, reason in reasons.items():
            done = self.shell.run(
                ["scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}"]
            )
            if done.returncode != 0:
                raise RunError(
                    f"Slurm did not drain {name}",
                    why=(done.stderr or done.stdout).strip() or f"exit {done.returncode}",
                    fix="draining needs Slurm operator rights: ask an admin, or pass --exclude",
                )
        return f"--drain-failing drained {', '.join(reasons)} in Slurm"

    def command(
        self, scripts: dict[str, str], on_line: LineSink | None = None, *, hold: bool = False
    ) -> dict[str, Answer]:
        """Each script on its node as a one-task step (--overlap: beside any other step). A
        node srun could not start the step on gets an error, not an exit code."""
        # --label: a task's line that reads like srun's is told from srun's (fault.py)
        one = ["srun", f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1", "--label"]

        def start(name: str) -> subprocess.Popen[bytes]:
            return self.shell.popen(
                [*one, f"--nodelist={name}", "bash", "-s"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        answers = run_scripts(scripts, start, None if on_line is None else task_lines(on_line))
        return {
            name: srun_answer(said, code, self.job_id) for name, (said, code) in answers.items()
        }


def _results(
    plan: LaunchPlan, step: _Step, exits: dict[str, tuple[int, float]]
) -> tuple[NodeResult, ...]:
    """Each node's result: the exit its task reported, or None (stopped, or never bound)."""
    now = time.monotonic()
    return tuple(
        NodeResult(
            node=launch.node.name,
            address=launch.node.address,
            exit_code=exits.get(launch.node.name, (None, now))[0],
            log_path=str(step.workdir / f"{launch.node.name}.log"),
            wall_s=exits.get(launch.node.name, (None, now))[1] - step.started,
        )
        for launch in plan.launches
    )


def _pump(process: subprocess.Popen[bytes], step: _Step) -> None:
    assert process.stdout is not None
    with process.stdout:
        for raw in iter(process.stdout.readline, b""):
            step.line(raw)


def _wait(process: subprocess.Popen[bytes], timeout_s: float, done: Callable[[], bool]) -> bool:
    """For srun to end, or ``done()`` (worker0 done, a log cut): True if ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while process.poll() is None and not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=min(0.2, left))
    return False


def _failed_itself(step: _Step, settled: Settled) -> bool:
    """A node's program exited non-zero on its own (not on a signal, 128 + N): its failure is
    the launch's, and the step Slurm then reports cancelled is dtrun's fail-fast stop of it.
    Not where srun says Slurm lost a node: a peer's exit then is the loss's doing (a check goes
    on without the lost node, docs/check.md), as the other engines name a lost node first."""
    if settled.next is not Next.FAILED or settled.launch is None or step.slurm.lost:
        return False
    code = step.exits[settled.launch.node.name][0]
    return 0 < code < 128
