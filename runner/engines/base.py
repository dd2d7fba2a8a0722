"""What every engine shares: the user's choice of cluster, the opened Cluster, and the
``Engine`` interface each engine package implements (runner/engines/registry.py lists them).

An engine turns the choice into an Inventory and the Executor that reaches it (local processes,
SSH, Slurm steps, Spark tasks), says what a dry run prints beside each plan, and holds the
readiness barrier that runs before every launch. Leaving its ``open`` block is its stop: what it
opened for the command (SSH connections, the Slurm job dtrun asked for) is closed or cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runner.cluster.readiness import Patience, WaitSink, no_wait_sink, wait_until_ready
from runner.errors import UsageError
from runner.execute import Executor
from runner.spec.cluster import Inventory, Node
from runner.spec.launchplan import LaunchPlan
from runner.spec.slurmrequest import SlurmRequest

if TYPE_CHECKING:
    from runner.cluster.outputs import StackOutputs

Notice = Callable[[str], None]
# Told after every look at a stack's node registry (ssh/registration.py): nodes registered, of
# them ready, wanted, seconds waited.
RegistryPoll = Callable[[int, int, int, float], None]


class Preview(Protocol):
    """An engine's own lines in a dry run: the allocation, how each launch starts."""

    @property
    def allocation(self) -> str: ...

    def launch(self, plan: LaunchPlan, workdir: str) -> str: ...


@dataclass(frozen=True)
class ClusterChoice:
    """Where to run, as the options said (at most one of hosts, stack, outputs). A field named
    as one of the options' ``Where`` (runner/cli/options.py) is copied from it by that name
    (runner/cli/session.py, ``choose``): a new option is declared there and here, never copied
    by hand."""

    hosts: str | None = None  # a hosts file, or the hosts themselves: h1:4,h2:4
    stack: str | None = None
    outputs: Path | None = None
    local_nodes: int = 1  # size of the embedded cluster when none of the above is given
    accept_new_host_keys: bool = False
    check: bool = False  # health checks (GPUs, InfiniBand, Python) before every launch
    ready_timeout: float = 900.0  # seconds
    connect_timeout: float = 30.0  # hosts files: their nodes are up, or the run fails fast
    slurm: SlurmRequest | None = None  # --slurm: the nodes of a Slurm allocation
    dry_run: bool = False  # --slurm outside an allocation asks for none
    job_name: str = "dtrun"  # the Slurm job dtrun asks for
    spark: str | None = None  # --spark MASTER: the executors of a Spark master are the nodes

    @property
    def patience(self) -> Patience:
        """How long a launch waits for its nodes. A hosts file's nodes should already be up,
        so a dead one fails the run within --connect-timeout (a look every 2 s, each
        connection attempt bounded by ``attempt_s``); a stack's may still be booting."""
        if self.hosts is not None:
            attempt = min(10.0, max(2.0, self.connect_timeout / 3))
            return Patience(self.connect_timeout, 2.0, attempt, "--connect-timeout")
        return Patience(self.ready_timeout)

    def __post_init__(self) -> None:
        given = [flag for flag, value in self._sources() if value is not None]
        if self.slurm is not None and self.hosts is not None:
            raise UsageError(
                "--slurm runs on the nodes Slurm gives, and --hosts names others",
                fix="pass --slurm alone (or with --stack NAME for a stack's own Slurm)",
            )
        if self.spark is not None and (given or self.slurm is not None):
            raise UsageError(
                f"--spark runs on a Spark master's executors, and "
                f"{(given or ['--slurm'])[0]} names other nodes",
                fix="pass --spark MASTER alone",
            )
        if len(given) > 1:
            raise UsageError(
                f"{' and '.join(given)} name two clusters",
                fix="pass one of --hosts, --stack and --outputs (none: the embedded cluster)",
            )

    def _sources(self) -> list[tuple[str, object]]:
        return [("--hosts", self.hosts), ("--stack", self.stack), ("--outputs", self.outputs)]

    @property
    def embedded(self) -> bool:
        """None of --hosts, --stack and --outputs: the embedded cluster, on this machine."""
        return (
            self.hosts is None
            and self.stack_name is None
            and self.slurm is None
            and self.spark is None
        )

    @property
    def stack_name(self) -> str | None:
        if self.stack is not None:
            return self.stack
        return self.outputs.stem if self.outputs is not None else None


@dataclass(frozen=True)
class Hooks:
    """Who hears an engine open its cluster: ``notice`` its one-line news, ``on_outputs`` a
    stack's outputs as soon as they are read (from then on, the stack is known to exist),
    ``on_poll`` each look at a stack's node registry."""

    notice: Notice
    on_outputs: Callable[[StackOutputs], None] = lambda outputs: None
    on_poll: RegistryPoll | None = None


class Engine(Protocol):
    """Where the nodes come from and how a node's script starts, stops and streams."""

    @property
    def name(self) -> str:
        """ "embedded", "ssh", "slurm" or "spark": what the records and messages call it."""
        ...

    def selects(self, choice: ClusterChoice) -> bool:
        """Whether the options chose this engine (exactly one engine selects any choice)."""
        ...

    def open(self, choice: ClusterChoice, hooks: Hooks) -> AbstractContextManager[Cluster]:
        """The cluster, connected, for the block; leaving it is the engine's stop."""
        ...

    def preview(self, cluster: Cluster) -> Preview | None:
        """What a dry run prints beside each plan (None: the plan says it all)."""
        ...

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        """The barrier before a launch: its nodes answer and, with --check, are healthy."""
        ...


@dataclass
class Cluster:
    inventory: Inventory
    executor: Executor
    choice: ClusterChoice
    engine: Engine  # how the executor reaches the nodes
    on_wait: WaitSink = no_wait_sink  # hears each look at nodes that have not all answered

    @property
    def preview(self) -> Preview | None:
        """What a dry run prints beside each plan (Slurm, Spark)."""
        return self.engine.preview(self)

    def ready(self, plan: LaunchPlan) -> None:
        """The barrier before a launch: its nodes answer and, with --check, are healthy."""
        self.engine.ready(self, plan)


def wait_for_nodes(cluster: Cluster, plan: LaunchPlan) -> None:
    """The plan's nodes answer (and, with --check, are healthy); node 0 reaches the others by
    ssh where the inventory logs in by ssh."""
    nodes: Sequence[Node] = plan.nodes or tuple(launch.node for launch in plan.launches)
    wait_until_ready(
        cluster.executor.command,
        cluster.inventory,
        nodes,
        check=cluster.choice.check,
        patience=cluster.choice.patience,
        on_wait=cluster.on_wait,
    )
    if cluster.inventory.ssh is not None:
        from runner.cluster.peers import check_peers  # head-only launchers: node 0's ssh

        check_peers(cluster.executor.command, cluster.inventory, plan)
