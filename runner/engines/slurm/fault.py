"""Why a Slurm step ended when neither its nodes nor dtrun ended it (docs/slurm.md, "Failures
and stops"): a node Slurm lost (set down, its slurmd gone), the job's time limit, or a scancel
from outside dtrun. Read from what Slurm itself says: srun's and slurmstepd's messages in the
step's output, the job's state and node list (squeue -t all: under --no-kill a lost node
leaves the job, which runs on) and the lost nodes' states (sinfo).
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field, replace

from dtrun.engines.slurm.allocation import hostnames
from dtrun.engines.slurm.shell import SlurmShell
from dtrun.errors import DtrunError, RunError
from dtrun.execute import Answer, LineSink
from dtrun.spec.outcome import NodeResult

# srun's words for a node the controller lost, and slurmstepd's for a step or job it ends:
# `*** STEP 3.0 ON n1 CANCELLED AT 2026-01-01T10:00:00 DUE TO NODE FAILURE, SEE ... ***`,
# `*** JOB 4 ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***`, and without DUE TO for a scancel.
# srun's own line starts the line: a task's (`0: srun: ...`, --label) is the program's words.
# slurmstepd's comes labelled as its node's first task (`0: slurmstepd-n1: error: *** ...`):
# matched anywhere, for this job only (a program may print an older job's log); a program that
# prints it and exits non-zero fails on its own first (executor.py _failed_itself).
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)")
_CANCELLED = re.compile(
    r"\*\*\* (STEP|JOB) (\S+) ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z][A-Z ]*[A-Z]))?[, ]"
)
# what Slurm's end of a step sends each task: SIGTERM, then SIGKILL after KillWait (scancel(1),
# slurm.conf(5) KillWait); a task that died of one reports 128 + its number (bash(1), EXIT STATUS)
_SLURMS_SIGNALS = (128 + signal.SIGTERM, 128 + signal.SIGKILL)
# srun's own line for a task that ended badly, `srun: error: n1: task 0: Exited with exit code
# 3` or `...: task 0: Killed` (srun's _task_finish): the task ran, and its exit code stands.
_TASK_END = re.compile(r"^srun: error: \S+: tasks? [0-9,\[\]-]+: ")
TASK_LABEL = "0: "  # srun --label's prefix on every line of a one-task step's task
SRUN_SAYS = "srun: "  # how every message of srun's own begins: `srun: error: ...`
FINAL_WAIT_S = 10.0  # how long a job may stay COMPLETING before its end is read anyway


class NodeLostError(RunError):
    """Slurm lost a node of the launch (set down, its slurmd gone): the step ended."""


class SlurmEndedError(RunError):
    """Slurm ended the step: the job's time limit, or a scancel from outside dtrun."""


@dataclass
class Heard:
    """What the step's output said of how Slurm ended it."""

    lost: list[str] = field(default_factory=list)  # nodes srun reported a node failure on
    cancelled: str | None = None  # "STEP 3.0" or "JOB 4" that slurmstepd said it cancelled
    due_to: str = ""  # slurmstepd's reason: TIME LIMIT, NODE FAILURE, PREEMPTION; "" for scancel
    job: str = ""  # the job's id: slurmstepd's line for another job is a program's output

    @property
    def said(self) -> bool:
        return bool(self.lost) or self.cancelled is not None

    def line(self, text: str) -> None:
        lost = _NODE_FAILURE.search(text)
        if lost is not None and lost.group(1) not in self.lost:
            self.lost.append(lost.group(1))
        cancelled = _CANCELLED.search(text)
        if cancelled and self.cancelled is None and cancelled.group(2).split(".")[0] == self.job:
            self.cancelled = f"{cancelled.group(1)} {cancelled.group(2)}"
            self.due_to = cancelled.group(3) or ""


def _srun_s_own(line: str) -> bool:
    """srun's own message, not a task's line: one that begins `srun: ` (SRUN_SAYS), which no
    labelled line does (a task's begins `0: `). The label alone does not tell: the pieces
    after the first of a progress bar's states or of a line too long to hold
    (runner/engines/common/scripts.py segments) are unlabelled and the task's; such a piece
    that itself begins `srun: ` is taken for srun's."""
    return line.startswith(SRUN_SAYS)


def task_lines(on_line: LineSink) -> LineSink:
    """``on_line`` for a one-task `srun --label` step: the task's lines as it printed them.
    srun's own lines are not the node's: the one for the task's end repeats the exit code its
    answer carries, and is dropped; any other streams as `[slurm] ...`, as a launch's do."""

    def sink(node: str, line: str) -> None:
        if not _srun_s_own(line):
            on_line(node, line.removeprefix(TASK_LABEL))
        elif _TASK_END.match(line) is None:
            on_line("slurm", line)

    return sink


def srun_answer(said: list[str], code: int, job: str) -> Answer:
    """A one-task `srun --label` step's answer (``said``: its lines, labelled) in job ``job``:
    the task's output (srun's own lines left out) and exit code, or srun's own error where srun
    ran no task. A task's line that reads `srun: error` (labelled) or srun's line for the task's
    end is no such error: the task ran. A task Slurm ended (a scancel from outside dtrun, the
    job's time limit) keeps its exit code, and the error says Slurm's doing."""
    own = [line for line in said if _srun_s_own(line)]
    task = [line.removeprefix(TASK_LABEL) for line in said if not _srun_s_own(line)]
    output = "\n".join(task)
    last = own[-1] if own else ""
    ran = bool(task) or _TASK_END.match(last) is not None  # a task printed, or ended
    if code != 0 and not ran and last.startswith("srun: error"):
        return Answer(output, error=last)
    heard = Heard(job=job)
    for line in said:
        heard.line(line)
    if code != 0 and heard.cancelled is not None:
        why = heard.due_to.lower() or "a scancel from outside dtrun"
        return Answer(output, code, error=f"Slurm cancelled the {heard.cancelled.lower()}: {why}")
    return Answer(output, code)


def job_end(shell: SlurmShell, job_id: str, wait_s: float = FINAL_WAIT_S) -> tuple[str, str, str]:
    """(state, time limit, node list) of the job as squeue lists it, ended jobs included (-t
    all, for MinJobAge after their end); a job still COMPLETING is waited for, up to
    ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        done = shell.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%l|%N"])
        state, limit, nodelist = [*done.stdout.strip().partition("\n")[0].split("|", 2), "", ""][:3]
        if state != "COMPLETING" or time.monotonic() >= deadline:
            return state, limit, nodelist
        time.sleep(0.2)


def released(shell: SlurmShell, nodelist: str, names: list[str]) -> list[str]:
    """Those of ``names`` a running job's node list no longer holds: under --no-kill
    (allocation.py) Slurm takes a lost node out of the job, and may return it to service
    (ReturnToService) before sinfo is asked."""
    try:  # where Slurm does not say, none is taken for released
        held = hostnames(shell, nodelist) if nodelist else ()
    except DtrunError:
        held = ()
    return [name for name in names if held and name not in held]


def node_states(shell: SlurmShell, names: list[str]) -> dict[str, str]:
    """Each node's state and reason as sinfo says them: `down* (Not responding)`."""
    done = shell.run(["sinfo", "-N", "-h", "-n", ",".join(names), "-o", "%N|%T|%E"])
    states = {}
    for row in done.stdout.splitlines():
        name, state, reason = [*row.split("|", 2), "", ""][:3]
        states[name] = f"{state} ({reason})" if reason not in ("", "none") else state
    return states


def ended_by_slurm(
    shell: SlurmShell, job_id: str, heard: Heard, results: tuple[NodeResult, ...]
) -> RunError | None:
    """The error for a step Slurm ended (its node results say each node's part), or None when
    Slurm says nothing of it (srun failed on its own)."""
    running = [r.node for r in results if r.exit_code is None]
    # a node whose task died of Slurm's own signal before srun ended was ended by it too
    signalled = [r.node for r in results if r.exit_code is None or r.exit_code in _SLURMS_SIGNALS]
    state, limit, nodelist = job_end(shell, job_id)
    states = node_states(shell, running) if running else {}
    gone = released(shell, nodelist, running) if state == "RUNNING" and running else []
    # srun's own words; else the nodes Slurm has down or took out of the job; else, where the
    # job ended NODE_FAIL and sinfo already has every node back (ReturnToService), all of them
    down = [n for n in running if _down(states.get(n, "")) or n in gone]
    lost = heard.lost or down or (running if state == "NODE_FAIL" else [])
    error: RunError
    if lost or heard.due_to == "NODE FAILURE":
        lost = lost or running
        said = [f"srun: node failure on {', '.join(heard.lost)}"] if heard.lost else []
        said += [f"Slurm has {n} {states[n]}" for n in lost if _down(states.get(n, ""))]
        if out := [n for n in lost if n in gone]:
            said.append(f"Slurm job {job_id} no longer holds {', '.join(out)}")
        if state != "RUNNING":  # its batch host lost, or an allocation without --no-kill
            said.append(f"Slurm job {job_id} ended with it ({state or 'gone from squeue'})")
        # a node whose slurmd is gone has no one to end its step's processes: they run on
        # until it returns, and Slurm then ends them (reproduced with slurmd SIGKILLed)
        error = NodeLostError(
            f"Slurm lost node {', '.join(lost)} (node failure): dtrun gave up the launch on it "
            "and stopped the other nodes",
            why="; ".join(said) or f"srun: node failure on {', '.join(lost)}",
            fix=f"the launch's processes may still run on {', '.join(lost)} until "
            f"{'its slurmd returns' if len(lost) == 1 else 'their slurmds return'}; check with "
            f"`ssh {lost[0]} ps -fu $USER`. `sinfo -R` and `scontrol show node {lost[0]}` say "
            f"why; run again once it is back, or without it (--exclude {','.join(lost)})",
        )
        error.lost_node = lost[0]  # a check goes on without it while the job holds the rest
        error.others_held = state == "RUNNING"
        # with --no-kill (allocation.py) srun ends the step's other tasks with Slurm's signal:
        # one that died of it before srun ended was stopped with the step, not failed
        causes = {
            r.node: f"stopped with the step: Slurm lost {lost[0]}"
            for r in results
            if r.exit_code in _SLURMS_SIGNALS
        }
        causes |= {n: "node failure (Slurm)" for n in lost}
    elif state == "TIMEOUT" or heard.due_to == "TIME LIMIT":
        error = SlurmEndedError(
            f"Slurm job {job_id} reached its time limit ({limit or 'the partition default'}) "
            "and Slurm ended it, with the launch",
            # run, exec and check end here too: only bench's is a sweep, with a dry run
            why="every launch of the command runs in this one job (a sweep's: every point and "
            "repeat)",
            fix="pass a longer --time (or, inside your own allocation, give salloc or sbatch a "
            "longer --time); for a sweep, `dtrun bench --dry-run` shows every launch it makes",
        )
        causes = dict.fromkeys(signalled, "time limit (Slurm)")
    elif heard.cancelled is not None or state == "CANCELLED":
        # slurmstepd says STEP for a cancelled job's steps too: the job's state tells them apart
        what = f"job {job_id}" if state == "CANCELLED" or not heard.cancelled else ""
        what = what or (heard.cancelled or "").lower()
        error = SlurmEndedError(
            f"Slurm {what} was cancelled from outside dtrun (a scancel by its owner or an "
            "admin), and the launch with it",
            why=f"Slurm says the {what.split()[0]} was cancelled"
            + (f"; the job is {state}" if state else "; the job has left squeue"),
            fix=f"run again; `squeue -u $USER` shows what else is running (job {job_id})",
        )
        causes = dict.fromkeys(signalled, "cancelled from outside dtrun (scancel)")
    else:
        return None
    error.node_results = tuple(
        replace(r, cause=causes[r.node]) if r.node in causes else r for r in results
    )
    return error


def _down(state: str) -> bool:
    """A node state in which Slurm lost the node: down, failed, or not responding (`*`)."""
    word = state.split(" ")[0]
    return word.startswith(("down", "fail")) or word.endswith("*")
