"""What every engine shares: the user's choice of cluster, the opened Cluster, and the
``Engine`` interface each engine package implements (runner/engines/registry.py lists them).

An engine turns the choice into an Inventory and the Executor that reaches it (local processes,
SSH, Slurm steps, Spark tasks), says what a dry run prints beside each plan, and holds the
readiness barrier that runs before every launch. Leaving its ``open`` block is its stop: what it
opened for the command (SSH connections, the Slurm job dtrun asked for) is closed or cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from dtrun.cluster.readiness import Patience, WaitSink, no_wait_sink, wait_until_ready
from dtrun.errors import UsageError
from dtrun.execute import Executor
from dtrun.plan.launchers.base import Launcher
from dtrun.spec.cluster import Inventory, Node
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import NodeHealth
from dtrun.spec.request import DEFAULT_MAX_LAUNCHES

if TYPE_CHECKING:
    from dtrun.cluster.outputs import StackOutputs

Notice = Callable[[str], None]
# Told after every look at a stack's node registry (ssh/registration.py): nodes registered, of
# them ready, wanted, seconds waited.
RegistryPoll = Callable[[int, int, int, float], None]
# --drain-failing: takes the nodes below the gate's mark out of the scheduler; says what it did.
Drain = Callable[[Sequence[NodeHealth]], str]


class Preview(Protocol):
    """An engine's own lines in a dry run: the allocation, how each launch starts."""

    @property
    def allocation(self) -> str: ...

    def launch(self, plan: LaunchPlan, workdir: str) -> str: ...


# bench's, run's and exec's --help panel for every engine's options
WHERE_PANEL = "Where it runs (default: the embedded cluster on this machine)"
DEFAULT_READY_TIMEOUT = 900.0  # seconds a stack's nodes have to boot, register and answer

OptionsT = TypeVar("OptionsT")
WAIT_FOR_STACK = Patience(DEFAULT_READY_TIMEOUT)


class ChosenBy(Protocol):
    """What every engine reads of the options a cluster is chosen by (``EngineOptions``)."""

    @property
    def local_nodes(self) -> int | None: ...  # --local-nodes

    @property
    def patience(self) -> Patience: ...  # how long a launch waits for its nodes


@dataclass(frozen=True)
class ClusterChoice:
    """Where to run, as the options said: every engine's options (``EngineOptions``,
    runner/engines/registry.py, one group of fields per engine, declared in the engine's own
    ``options.py``), each read by its engine through ``of``, none copied; and what the command
    adds."""

    options: ChosenBy | None = None  # None: every engine's defaults (the embedded cluster)
    nodes: int = 1  # the nodes the command needs (bench: its most; run: --nodes; check: 4)
    check: bool = False  # health checks (GPUs, InfiniBand, Python) before every launch
    dry_run: bool = False  # --slurm outside an allocation asks for none
    job_name: str = "dtrun"  # the Slurm job dtrun asks for
    # what sets ``nodes``, as a message names it, and the option that changes it
    nodes_by: tuple[str, str] = ("the largest of --nodes", "--nodes")

    @property
    def local_nodes(self) -> int:
        """Size of the embedded cluster (and of an allocation --slurm asks for, the executors
        --spark asks for): --local-nodes, else the nodes the command needs."""
        given = None if self.options is None else self.options.local_nodes
        return self.nodes if given is None else given

    @property
    def local_nodes_by(self) -> tuple[str, str]:
        """The option ``local_nodes`` comes from, as a message names it."""
        given = None if self.options is None else self.options.local_nodes
        return self.nodes_by if given is None else ("--local-nodes", "--local-nodes")

    @property
    def patience(self) -> Patience:
        """How long a launch waits for its nodes."""
        return WAIT_FOR_STACK if self.options is None else self.options.patience

    def of(self, kind: type[OptionsT]) -> OptionsT:
        """The options of one engine (its ``options.py`` class), as given or defaulted."""
        if self.options is None:
            return kind()
        if not isinstance(self.options, kind):
            raise TypeError(f"{type(self.options).__name__} holds no {kind.__name__}")
        return self.options


@dataclass(frozen=True)
class Hooks:
    """Who hears an engine open its cluster: ``notice`` its one-line news, ``on_outputs`` a
    stack's outputs as soon as they are read (from then on, the stack is known to exist),
    ``on_poll`` each look at a stack's node registry."""

    notice: Notice
    on_outputs: Callable[[StackOutputs], None] = lambda outputs: None
    on_poll: RegistryPoll | None = None


class Engine:
    """Where the nodes come from and how a node's script starts, stops and streams, and what
    the commands may ask of it. Each engine subclasses it; the defaults are what most do."""

    name: ClassVar[str]  # "embedded", "ssh", ...: what the records and messages call it
    # The launchers it runs, its default first; (): every launcher no other engine runs.
    launchers: ClassVar[tuple[str, ...]] = ()
    # Launchers it brings, from its own package (the registry registers them with the planner)
    own_launchers: ClassVar[tuple[Launcher, ...]] = ()
    runs_shell: ClassVar[bool] = True  # Executor.command runs bash on the nodes
    runs_this_python: ClassVar[bool] = False  # its nodes run this very interpreter
    evictable: ClassVar[bool] = False  # a failed launch asks its nodes whether one was evicted
    logs_in: ClassVar[bool] = True  # its nodes are hosts a hosts file can name
    unit: ClassVar[str] = "node"  # what `dtrun check` counts before it knows the hosts
    # --max-launches' default: launching until decided, the most launches a node count takes
    max_launches: ClassVar[int] = DEFAULT_MAX_LAUNCHES

    def selects(self, choice: ClusterChoice) -> bool:
        """Whether the options chose this engine (exactly one engine selects any choice)."""
        raise NotImplementedError

    def open(self, choice: ClusterChoice, hooks: Hooks) -> AbstractContextManager[Cluster]:
        """The cluster, connected, for the block; leaving it is the engine's stop."""
        raise NotImplementedError

    def preview(self, cluster: Cluster) -> Preview | None:
        """What a dry run prints beside each plan (None: the plan says it all)."""
        return None

    def ready(self, cluster: Cluster, plan: LaunchPlan) -> None:
        """The barrier before a launch: its nodes answer and, with --check, are healthy."""
        wait_for_nodes(cluster, plan)

    def refuse_launcher(self, launcher: str) -> None:
        """A UsageError where ``launchers`` leaves this launcher out."""
        if self.launchers and launcher not in self.launchers:
            raise UsageError(
                f"--launcher {launcher} does not run on the {self.name} engine",
                fix=f"pass --launcher {' or '.join(self.launchers)}",
            )

    def refuse_check(self, choice: ClusterChoice) -> None:
        """A UsageError for options `dtrun check` cannot honour on this engine."""

    def warnings(
        self, cluster: Cluster, node_counts: Sequence[int], procs_per_node: int
    ) -> list[str]:
        """Lines to warn with before a launch (the embedded cluster's cores)."""
        return []

    def drain(self, cluster: Cluster, run_id: str) -> Drain | None:
        """--drain-failing's bench: what takes the gate's failing nodes out (None: nothing,
        or --drain-failing not given)."""
        return None

    def after_check(self, cluster: Cluster, flagged: Mapping[str, str]) -> list[str]:
        """`dtrun check`'s next steps for the flagged nodes (node name -> why), as lines."""
        return []


@dataclass
class Cluster:
    inventory: Inventory
    executor: Executor
    choice: ClusterChoice
    engine: Engine  # how the executor reaches the nodes
    on_wait: WaitSink = no_wait_sink  # hears each look at nodes that have not all answered
    # when the program check first tried the nodes (time.monotonic()): the next readiness
    # wait counts its patience from then, once (runner/cluster/readiness.py)
    contacted: float | None = None
    # the nodes that answered that check: without --check, the next readiness wait does not
    # ask them again (one SSH channel a node fewer), once
    answered: frozenset[str] = frozenset()
    # the command asks nothing more of the nodes (the sweep's report is still to be written):
    # an engine may start letting go of them; leaving its open() block still waits for that
    release: Callable[[], None] = lambda: None

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
    nodes: Sequence[Node] = plan.every_node
    since, cluster.contacted = cluster.contacted, None
    answered, cluster.answered = cluster.answered, frozenset()
    # every node just answered the program check, and reaching them is all this wait asks
    if cluster.choice.check or not {node.name for node in nodes} <= answered:
        wait_until_ready(
            cluster.executor.command,
            cluster.inventory,
            nodes,
            check=cluster.choice.check,
            patience=cluster.choice.patience,
            on_wait=cluster.on_wait,
            since=since,
        )
    if cluster.inventory.ssh is not None:
        from dtrun.cluster.peers import check_peers  # head-only launchers: node 0's ssh

        check_peers(cluster.executor.command, cluster.inventory, plan)
