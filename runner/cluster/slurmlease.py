"""The lease that ends dtrun's Slurm allocation when dtrun is gone (docs/slurm.md, "Failures
and stops").

dtrun cancels the allocation it asked for however it ends, except when it is killed outright
(SIGKILL, an OOM kill, a lost login session's machine): then none of its own code runs. So the
allocation's batch script holds the nodes only while dtrun renews a lease. dtrun rewrites the
job's comment (`scontrol update JobId=J Comment=dtrun-lease:N`, N counting up) every fifth of
the lease; the script reads its own job's comment (`squeue -h -j $SLURM_JOB_ID -o %k`) and ends
the job when the comment has not changed for a whole lease. Only the script's own clock is used
(no clock is compared between machines), and a poll Slurm does not answer starts the count
again, so a controller that is down ends no job. A node without squeue holds the nodes as
before: until dtrun cancels the job or --time ends it.

The lease is DTRUN_SLURM_LEASE_S seconds (default 300, at least 10): how long a job outlives a
dtrun that was killed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from types import TracebackType

from runner.errors import DtrunError, UsageError
from runner.execute.slurmshell import SlurmShell

LEASE_ENV = "DTRUN_SLURM_LEASE_S"
DEFAULT_LEASE_S = 300
MIN_LEASE_S = 10
COMMENT = "dtrun-lease:"  # the job's comment: this, then the renewal count


def lease_seconds(environ: Mapping[str, str] | None = None) -> int:
    """The lease from DTRUN_SLURM_LEASE_S, or the default; a bad value is bad input."""
    text = (os.environ if environ is None else environ).get(LEASE_ENV, "").strip()
    if not text:
        return DEFAULT_LEASE_S
    if not text.isdigit() or int(text) < MIN_LEASE_S:
        raise UsageError(
            f"{LEASE_ENV} is {text!r}, not a whole number of seconds of at least {MIN_LEASE_S}",
            why="it is how long dtrun's Slurm job outlives a dtrun that was killed",
            fix=f"set it to e.g. {DEFAULT_LEASE_S}, or unset it",
        )
    return int(text)


def hold_script(lease_s: int) -> str:
    """The allocation's batch script (sh, sbatch --wrap): hold the nodes while the lease is
    renewed."""
    poll = max(2, min(30, lease_s // 5))
    return (
        "command -v squeue >/dev/null || exec sleep infinity; "
        f"lease={lease_s}; last=; since=$(date +%s); "
        f"while sleep {poll}; do "
        'if seen=$(squeue -h -j "$SLURM_JOB_ID" -o %k 2>/dev/null); then '
        '[ "$seen" = "$last" ] || { last=$seen; since=$(date +%s); }; '
        "else since=$(date +%s); fi; "
        '[ $(( $(date +%s) - since )) -lt "$lease" ] || exit 0; '
        "done"
    )


class Lease:
    """While open, renews job ``job``'s lease every fifth of ``lease_s`` in a daemon thread.
    A renewal Slurm does not take is tried again at the next one."""

    def __init__(self, shell: SlurmShell, job: str, lease_s: int) -> None:
        self.shell, self.job, self.every = shell, job, lease_s / 5
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="dtrun-slurm-lease", daemon=True)

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every)

    def _renew(self) -> None:
        count = 0
        while not self._stop.wait(self.every):
            count += 1
            command = ["scontrol", "update", f"JobId={self.job}", f"Comment={COMMENT}{count}"]
            try:
                done = self.shell.run(command, timeout_s=self.every)
            except DtrunError:
                continue  # Slurm did not answer in time: the next renewal tries again
            if done.returncode == 0:
                self.renewals = count
