"""The Slurm engine's options: --slurm and the sbatch options passed through to the allocation
dtrun asks for. Spread into bench, run and exec through ``EngineOptions``
(runner/engines/registry.py); ``request_of`` turns them into the engine's request."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dtrun.errors import UsageError
from dtrun.spec.bounds import seconds
from dtrun.spec.slurmrequest import DEFAULT_QUEUE_TIMEOUT_S, SlurmRequest

if TYPE_CHECKING:
    from dtrun.engines.base import ClusterChoice

PANEL = "Slurm (--slurm)"
QUEUE_TIMEOUT = seconds("--queue-timeout")


def _sbatch(flag: str, what: str) -> Any:  # typer.Option's own return type
    return typer.Option(
        f"--{flag}",
        help=f"--slurm: sbatch --{flag} of the allocation dtrun asks for ({what}).",
        rich_help_panel=PANEL,
        show_default=False,
    )


@dataclass(frozen=True)
class SlurmOptions:
    slurm: Annotated[
        bool,
        typer.Option(
            "--slurm",
            help="Run on Slurm: inside the allocation dtrun runs in (salloc, sbatch), or one it "
            "asks for with the largest node count and cancels at the end; every launch is an "
            "srun step.",
            rich_help_panel=PANEL,
        ),
    ] = False
    partition: Annotated[str | None, _sbatch("partition", "a partition from sinfo")] = None
    account: Annotated[str | None, _sbatch("account", "the account charged")] = None
    qos: Annotated[str | None, _sbatch("qos", "a quality of service")] = None
    time: Annotated[str | None, _sbatch("time", "its time limit, e.g. 30 or 2:00:00")] = None
    constraint: Annotated[str | None, _sbatch("constraint", "node features, e.g. ib&a100")] = None
    exclude: Annotated[str | None, _sbatch("exclude", "nodes not to use, e.g. gpu[03,07]")] = None
    nodelist: Annotated[str | None, _sbatch("nodelist", "nodes it must have")] = None
    drain_failing: Annotated[
        bool,
        typer.Option(
            "--drain-failing",
            help="--slurm: drain the nodes below the mark in Slurm (scontrol update "
            "state=drain, with the reason): bench's health gate's, and then stop the sweep "
            "(exit 4), so that the next allocation gets other nodes; or those `dtrun check` "
            "flags.",
            rich_help_panel=PANEL,
        ),
    ] = False
    queue_timeout: Annotated[
        float,
        QUEUE_TIMEOUT,
        typer.Option(
            help="--slurm: seconds dtrun's allocation may wait in the queue (saying Slurm's "
            "reason) before dtrun cancels it and stops"
            f"{QUEUE_TIMEOUT.within}.",
            rich_help_panel=PANEL,
        ),
    ] = DEFAULT_QUEUE_TIMEOUT_S

    def check(self) -> None:
        """--queue-timeout's range; Slurm's options (--drain-failing among them) without
        --slurm are refused, before Slurm is asked."""
        from dtrun.plan.checks import check_bound

        check_bound(QUEUE_TIMEOUT, self.queue_timeout)
        self.slurm_request()

    def slurm_request(self) -> SlurmRequest | None:
        """--slurm's request; Slurm options without --slurm are refused (they would be lost)."""
        from dtrun.engines.slurm.lease import lease_seconds

        request = SlurmRequest(
            partition=self.partition,
            account=self.account,
            qos=self.qos,
            time=self.time,
            constraint=self.constraint,
            exclude=self.exclude,
            nodelist=self.nodelist,
            queue_timeout_s=self.queue_timeout,
        )
        if self.slurm:
            return replace(request, lease_s=lease_seconds())
        given = [flag for flag, _ in request.passed_through()]
        if self.drain_failing:
            given.append("--drain-failing")
        if self.queue_timeout != DEFAULT_QUEUE_TIMEOUT_S:
            given.append("--queue-timeout")
        if given:
            raise UsageError(
                f"{', '.join(given)} {'shapes' if len(given) == 1 else 'shape'} a Slurm "
                "allocation, and --slurm was not given",
                fix=f"add --slurm, or leave {'them' if len(given) > 1 else 'it'} out",
            )
        return None


def request_of(choice: ClusterChoice) -> SlurmRequest:
    """The request of a choice the Slurm engine selected (--slurm was given)."""
    request = choice.of(SlurmOptions).slurm_request()
    assert request is not None, "only the Slurm engine's choices have a request"
    return request
