"""Where Slurm's commands run (here, or on a stack's head over ssh), and the two questions
every Slurm engine part asks: how a job stands, and cancelling one until squeue agrees."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dtrun.errors import InventoryError, RunError, SiteError, UsageError
from dtrun.execute.guard import start_guard
from dtrun.redact import redact_cuts

POLL_S = 1.0  # how often squeue is asked while a job waits or ends
CANCEL_WAIT_S = 60.0  # how long a cancelled job may take to leave squeue before dtrun says so
# Job states in which the job still holds nodes or may still be given some (squeue's %T).
LIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
     "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"}
)  # fmt: skip

# Pending reasons (squeue's %r) that no wait ends: the job asks for more than its partition,
# account or QOS ever gives (squeue(1), "JOB REASON CODES"). PartitionNodeLimit is not one:
# Slurm also gives it while nodes the job needs are down or drained.
NEVER_RUNS = frozenset(
    {"PartitionConfig", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS",
     "AccountNotAllowed", "QOSMaxNodePerJobLimit", "QOSMaxWallDurationPerJobLimit",
     "AssocMaxNodesPerJobLimit", "AssocMaxWallDurationPerJobLimit"}
)  # fmt: skip


@dataclass(frozen=True)
class SlurmShell:
    """Where Slurm's commands run: here (a login node), or on a stack's head through ssh."""

    prefix: tuple[str, ...] = ()  # ("ssh", OPTIONS..., "user@head"): one shell line follows

    def argv(self, command: Sequence[str]) -> list[str]:
        return [*self.prefix, shlex.join(command)] if self.prefix else list(command)

    def popen(self, command: Sequence[str], **kwargs: object) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(self.argv(command), **kwargs)  # type: ignore[call-overload,no-any-return]
        except FileNotFoundError:
            raise _not_installed(command[0]) from None

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                self.argv(command),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except FileNotFoundError:
            raise _not_installed(command[0]) from None
        except subprocess.TimeoutExpired:
            raise InventoryError(
                f"`{shlex.join(command)}` did not answer within {timeout_s:g} s",
                why="Slurm's controller is slow or unreachable",
                fix="check it with `scontrol ping` and `sinfo`, then run again",
            ) from None

    def check(self, command: Sequence[str], doing: str) -> str:
        """The command's standard output; a clear error naming what failed when it fails."""
        done = self.run(command)
        if done.returncode != 0:
            down = site_failure(done.stderr + done.stdout)
            if down is not None:
                raise down
            last = last_said(done.stderr or done.stdout) or f"exit {done.returncode}"
            raise InventoryError(
                f"Slurm could not {doing}",
                why=f"`{shlex.join(command)}` said: {last}",
                fix="check the Slurm options you passed (partition, account, nodes) and that "
                "`sinfo` works here",
            )
        return done.stdout


def last_said(text: str) -> str:
    """The last line a command printed ("" for none) as an error quotes it alone: a secret
    the break before it cuts masked there (redact_cuts), whose earlier part the error drops."""
    said = redact_cuts(text).strip().splitlines()
    return said[-1] if said else ""


# What Slurm's client commands say when the site's services, not the request, are at fault
# (Slurm 22.05's messages; the same words since at least 17.11): munge cannot be reached here,
# or the controller does not answer.
_MUNGE = ("Munge encode failed", "Munge decode failed", "Protocol authentication error")
_CONTROLLER = ("Unable to contact slurm controller",)


def site_failure(said: str) -> SiteError | None:
    """The site's own failure in what a Slurm command printed, or None: munge not answering
    (every Slurm command signs its request with munge) or a controller that does not."""
    lines = [line.strip() for line in redact_cuts(said).splitlines() if line.strip()]
    munge = next((line for line in lines if any(mark in line for mark in _MUNGE[:2])), None)
    if munge is not None or any(_MUNGE[2] in line for line in lines):
        return SiteError(
            "Slurm's authentication service, munge, is not answering on this machine",
            why=munge or next(line for line in lines if _MUNGE[2] in line),
            fix="munged must run here and on every node with the cluster's key: ask the site's "
            "admins (`systemctl status munge`; `munge -n | unmunge` tests it), then run again",
        )
    controller = next((line for line in lines if _CONTROLLER[0] in line), None)
    if controller is not None:
        return SiteError(
            "Slurm's controller does not answer",
            why=controller,
            fix="`scontrol ping` says whether slurmctld is up: ask the site's admins, then run "
            "again",
        )
    return None


def _not_installed(tool: str) -> InventoryError:
    return InventoryError(
        f"{tool} is not installed here",
        why="--slurm runs Slurm's commands (sbatch, srun, squeue, scancel, sinfo, scontrol)",
        fix="run dtrun on a Slurm login node, or put Slurm's client commands on PATH",
    )


def job_state(shell: SlurmShell, job_id: str) -> tuple[str, str, str] | None:
    """(state, reason, node list) of a job squeue still lists; None once it has left."""
    done = shell.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N"])
    line = done.stdout.strip()
    if done.returncode != 0 or not line:
        return None  # squeue says "Invalid job id" for a job that has left its records
    state, reason, nodelist = [*line.splitlines()[0].split("|", 2), "", ""][:3]
    return state, reason, nodelist


def never_runs(job_id: str, reason: str) -> UsageError:
    """The error for a job Slurm holds pending for a reason no wait ends (NEVER_RUNS)."""
    return UsageError(
        f"Slurm will never start job {job_id} as asked: it is pending ({reason})",
        why="the request asks for more than the partition, account or QOS allows (squeue(1), "
        f"JOB REASON CODES: {reason}); dtrun cancelled the job",
        fix="compare --nodes, --time, --partition, --account, --qos and --constraint with "
        "`scontrol show partition` and `sacctmgr show assoc user=$USER`",
    )


def cancel(shell: SlurmShell, target: str, *, wait_s: float = CANCEL_WAIT_S) -> None:
    """scancel a job (or JOB.STEP), then wait until squeue no longer lists it as live. A
    squeue that errs (a controller that does not answer) is no word that it left: it is asked
    again, and after ``wait_s`` dtrun says the end is unconfirmed."""
    shell.run(["scancel", target])
    job_id = target.split(".")[0]
    deadline = time.monotonic() + wait_s
    while True:
        if "." in target:
            done = shell.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"])
            live, state = target in done.stdout.split(), "running"
        else:
            done = shell.run(["squeue", "-h", "-j", job_id, "-o", "%T"])
            state = done.stdout.strip().partition("\n")[0]
            live = state in LIVE
        if done.returncode != 0 and _LEFT not in done.stderr:
            said = last_said(done.stderr or done.stdout) or done.returncode
            live, state = True, f"unconfirmed (squeue: {said})"
        if not live:
            return
        if time.monotonic() >= deadline:
            unconfirmed = state.startswith("unconfirmed")
            when = "once the controller answers (`scontrol ping`), " if unconfirmed else ""
            raise RunError(
                f"Slurm job {target} is still {state} {wait_s:.0f} s after dtrun cancelled it",
                fix=f"{when}check it with `squeue -j {job_id}` and cancel it with "
                f"`scancel {target}`",
            )
        time.sleep(0.05)  # a cancelled job leaves squeue within a few tenths of a second


_LEFT = "Invalid job id"  # squeue's words for a job that has left its records


# Run with `sh -c CANCEL dtrun-step-cancel JOB NAME` where Slurm's commands run: scancel the
# step named NAME in JOB once squeue lists it (srun may still be waiting for the step to be
# created), for up to 5 minutes, or until the job itself has ended.
CANCEL = (
    'i=0; while [ "$i" -lt 600 ]; do '
    'ids=$(squeue -h -s -j "$1" -o "%i|%j" 2>/dev/null | sed -n "s/|$2\\$//p"); '
    '[ -z "$ids" ] || exec scancel $ids; '
    '[ -n "$(squeue -h -j "$1" -o %i 2>/dev/null)" ] || exit 0; '
    "sleep 0.5; i=$((i + 1)); done"
)


def step_guard(shell: SlurmShell, job_id: str, name: str) -> subprocess.Popen[bytes]:
    """The guard (runner/execute/guard.py) that cancels the step when dtrun ends without
    stopping it. Inside a job dtrun asked for, the lease ends the job too (runner/engines/slurm/
    lease.py); inside a user's own allocation, which outlives dtrun, this is what stops
    dtrun's steps."""
    return start_guard(shell.argv(["sh", "-c", CANCEL, "dtrun-step-cancel", job_id, name]))
