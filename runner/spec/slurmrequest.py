"""What a user asks of Slurm: where the allocation comes from and the sbatch options passed
through to it (docs/slurm.md). Frozen values; stdlib only."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_QUEUE_TIMEOUT_S = 3600.0  # an hour in the queue, then dtrun cancels its request
# how long dtrun's own job outlives a dtrun killed outright (runner/engines/slurm/lease.py)
DEFAULT_LEASE_S = 300


@dataclass(frozen=True)
class SlurmRequest:
    """--slurm and the options that shape the allocation dtrun asks for (sbatch's own names)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None  # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH...
    constraint: str | None = None
    exclude: str | None = None
    nodelist: str | None = None
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    lease_s: int = DEFAULT_LEASE_S  # DTRUN_SLURM_LEASE_S; 0: no lease

    def passed_through(self) -> tuple[tuple[str, str], ...]:
        """(sbatch option, value) for every option the user gave, in sbatch's spelling."""
        named = (
            ("--partition", self.partition),
            ("--account", self.account),
            ("--qos", self.qos),
            ("--time", self.time),
            ("--constraint", self.constraint),
            ("--exclude", self.exclude),
            ("--nodelist", self.nodelist),
        )
        return tuple((flag, value) for flag, value in named if value is not None)
