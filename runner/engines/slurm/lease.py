"""The lease that ends dtrun's Slurm allocation when dtrun is gone (docs/slurm.md, "The
lease").

dtrun cancels the allocation it asked for however it ends, except when it is killed outright
(SIGKILL, an OOM kill, a lost login session's machine): then none of its own code runs. So the
allocation's batch script holds the nodes only while dtrun renews a lease. dtrun rewrites the
job's comment (`scontrol update JobId=J Comment=dtrun-lease:N`, N counting up) every fifth of
the lease; the script reads its own job's comment (`squeue -h -j $SLURM_JOB_ID -o %k`) and ends
the job when the comment has not changed for a whole lease. Only the script's own clock is used
(no clock is compared between machines), a poll Slurm does not answer starts the count again (a
controller that is down ends no job), and a check that errs ends nothing. A node without squeue
holds the nodes as before: until dtrun cancels the job or --time ends it.

The lease is DTRUN_SLURM_LEASE_S seconds (default 300; 10 to 86400; 0: no lease), read and
checked with the other options, before anything is asked of Slurm.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

from dtrun.engines.slurm.shell import NEVER_RUNS, SlurmShell, job_state, never_runs
from dtrun.errors import RunError, UsageError
from dtrun.spec.slurmrequest import DEFAULT_LEASE_S

LEASE_ENV = "DTRUN_SLURM_LEASE_S"
MIN_LEASE_S, MAX_LEASE_S = 10, 86400
COMMENT = "dtrun-lease:"  # the job's comment: this, then the renewal count
SCONTROL_TIMEOUT_S = 15.0
MISSES_TO_WARN = 2  # renewals in a row Slurm did not take before dtrun says so


def lease_seconds(environ: Mapping[str, str] | None = None) -> int:
    """The lease from DTRUN_SLURM_LEASE_S, or the default; a bad value is bad input."""
    text = (os.environ if environ is None else environ).get(LEASE_ENV, "").strip()
    if not text:
        return DEFAULT_LEASE_S
    if re.fullmatch(r"[0-9]{1,6}", text) is None or not (
        int(text) == 0 or MIN_LEASE_S <= int(text) <= MAX_LEASE_S
    ):
        raise UsageError(
            f"{LEASE_ENV} is {text!r}, not 0 or a whole number of seconds from {MIN_LEASE_S} "
            f"to {MAX_LEASE_S}",
            why="it is how long dtrun's Slurm job outlives a dtrun that was killed (0: no lease)",
            fix=f"set it to e.g. {DEFAULT_LEASE_S}, or unset it",
        )
    return int(text)


def poll_seconds(lease_s: int) -> int:
    """How often the batch script reads its comment: a fifth of the lease, 5 to 30 s."""
    return max(5, min(30, lease_s // 5))


def hold_script(lease_s: int, poll_s: int | None = None) -> str:
    """The allocation's batch script (sh, sbatch --wrap): hold the nodes while the lease is
    renewed; with no lease (0), until cancelled."""
    if lease_s == 0:
        return "exec sleep infinity"
    poll = poll_seconds(lease_s) if poll_s is None else poll_s
    return (
        "command -v squeue >/dev/null || exec sleep infinity; "
        f"lease={lease_s}; last=; since=$(date +%s); "
        f"while sleep {poll}; do "
        'if seen=$(squeue -h -j "$SLURM_JOB_ID" -o %k 2>/dev/null); then '
        '[ "$seen" = "$last" ] || { last=$seen; since=$(date +%s); }; '
        "else since=$(date +%s); fi; "
        'if [ $(( $(date +%s) - since )) -ge "$lease" ]; then exit 0; fi; '
        "done"
    )


class Lease:
    """While open, renews job ``job``'s lease every fifth of ``lease_s`` in a daemon thread.
    Opening renews it once and refuses a Slurm that does not take it (the job would end itself
    mid-sweep); later renewals Slurm does not take are tried again, and ``warn`` says so after
    MISSES_TO_WARN in a row."""

    def __init__(
        self, shell: SlurmShell, job: str, lease_s: int, warn: Callable[[str], None]
    ) -> None:
        self.shell, self.job, self.every, self.warn = shell, job, lease_s / 5, warn
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="dtrun-slurm-lease", daemon=True)

    def __enter__(self) -> Lease:
        said = self._once(1)
        if said is not None:
            # Slurm refuses to update a job it will never run ("Requested partition
            # configuration not available now"): that is the request's fault, not the lease's
            seen = job_state(self.shell, self.job)
            if seen is not None and seen[1] in NEVER_RUNS:
                raise never_runs(self.job, seen[1])
            raise RunError(
                f"Slurm did not take the lease of job {self.job}: {said}",
                why="without it the job ends itself one lease after it starts",
                fix=f"ask your Slurm admin whether job comments may be changed, or run with "
                f"{LEASE_ENV}=0 (no lease: a dtrun killed outright leaves the job to --time)",
            )
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        # not a moment's wait for a slow scontrol: the job is cancelled next, and a renewal
        # of a cancelled job does no harm
        self._thread.join(timeout=1.0)

    def _once(self, count: int) -> str | None:
        """Renew the lease; None when Slurm took it, else what went wrong."""
        command = ["scontrol", "update", f"JobId={self.job}", f"Comment={COMMENT}{count}"]
        try:
            done = self.shell.run(command, timeout_s=min(self.every, SCONTROL_TIMEOUT_S))
        except Exception as error:  # the renewal thread must outlive any error
            return str(error)
        if done.returncode != 0:
            return (done.stderr or done.stdout).strip() or f"scontrol exited {done.returncode}"
        self.renewals = count
        return None

    def _renew(self) -> None:
        count, misses = 1, 0
        while not self._stop.wait(self.every):
            count += 1
            said = self._once(count)
            misses = 0 if said is None else misses + 1
            if misses == MISSES_TO_WARN and not self._stop.is_set():
                self.warn(
                    f"Slurm did not take the last {misses} renewals of job {self.job}'s lease "
                    f"({said}); the job ends itself if that lasts a whole lease"
                )
