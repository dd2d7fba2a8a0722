"""Every engine, in the order their choices are told apart, its options, and the one the
options chose, opened. A new engine is one line in ``ENGINES`` and its options class among
``EngineOptions``' bases, both here (docs/engines.md, "Adding an engine")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks
from dtrun.engines.embedded.engine import EmbeddedEngine
from dtrun.engines.embedded.options import EmbeddedOptions
from dtrun.engines.ray.engine import RayEngine
from dtrun.engines.ray.options import RayOptions
from dtrun.engines.slurm.engine import SlurmEngine
from dtrun.engines.slurm.options import SlurmOptions
from dtrun.engines.spark.engine import SparkEngine
from dtrun.engines.spark.options import SparkOptions
from dtrun.engines.ssh.engine import SshEngine
from dtrun.engines.ssh.options import SshOptions
from dtrun.errors import UsageError
from dtrun.plan.launchers import register

ENGINES: tuple[Engine, ...] = (
    SlurmEngine(),  # --slurm, alone or with a stack (its own Slurm)
    SparkEngine(),  # --spark MASTER
    RayEngine(),  # --ray ADDRESS
    SshEngine(),  # --hosts, or a stack's nodes
    EmbeddedEngine(),  # none of the above: the default
)
for _engine in ENGINES:  # the launchers an engine brings, planned as the built-in ones
    for _launcher in _engine.own_launchers:
        register(_launcher)


@dataclass(frozen=True)
class EngineOptions(RayOptions, SparkOptions, SlurmOptions, SshOptions, EmbeddedOptions):
    """Every engine's options, one group of fields per engine (bench, run and exec spread them
    as `Where`, runner/cli/options.py)."""

    def check(self) -> None:
        """Every engine's own checks of its options (each options class's ``check``), then
        options that name two clusters."""
        for group in EngineOptions.__bases__:  # each declares its own check
            vars(group)["check"](self)
        self.refuse_two_clusters()

    def refuse_two_clusters(self) -> None:
        """Options that name two clusters are refused, by the command that reads them (inside
        its error handling: a group is built before the command runs)."""
        named = [
            flag
            for flag, value in (("--hosts", self.hosts), ("--stack", self.stack),
                                ("--outputs", self.outputs))
            if value is not None
        ]  # fmt: skip
        if self.slurm and self.hosts is not None:
            raise UsageError(
                "--slurm runs on the nodes Slurm gives, and --hosts names others",
                fix="pass --slurm alone (or with --stack NAME for a stack's own Slurm)",
            )
        if self.spark is not None and (named or self.slurm):
            raise UsageError(
                f"--spark runs on a Spark master's executors, and "
                f"{(named or ['--slurm'])[0]} names other nodes",
                fix="pass --spark MASTER alone",
            )
        if self.ray is not None and (named or self.slurm or self.spark is not None):
            raise UsageError(
                "--ray runs on a Ray cluster's nodes, and another option names other nodes",
                fix="pass --ray ADDRESS alone",
            )
        if len(named) > 1:
            raise UsageError(
                f"{' and '.join(named)} name two clusters",
                fix="pass one of --hosts, --stack and --outputs (none: the embedded cluster)",
            )


def selected(choice: ClusterChoice) -> Engine:
    """The first engine in ``ENGINES`` the choice selects (the embedded one selects any)."""
    return next(engine for engine in ENGINES if engine.selects(choice))


def chosen(options: EngineOptions) -> Engine:
    """The engine these options select, before the cluster is opened."""
    return selected(ClusterChoice(options))


@contextlib.contextmanager
def open_cluster(choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
    """The cluster to run on, connected, for the duration of a command."""
    with selected(choice).open(choice, hooks) as cluster:
        yield cluster
