"""Every engine, in the order their choices are told apart, and the one the options chose,
opened. A new engine is one line here (docs/architecture.md, "Adding an engine")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from runner.engines.base import Cluster, ClusterChoice, Engine, Hooks
from runner.engines.embedded.engine import EmbeddedEngine
from runner.engines.slurm.engine import SlurmEngine
from runner.engines.spark.engine import SparkEngine
from runner.engines.ssh.engine import SshEngine

ENGINES: tuple[Engine, ...] = (
    SlurmEngine(),  # --slurm, alone or with a stack (its own Slurm)
    SparkEngine(),  # --spark MASTER
    EmbeddedEngine(),  # none of the above, no --hosts, --stack, --outputs
    SshEngine(),  # --hosts, or a stack's nodes
)


def selected(choice: ClusterChoice) -> Engine:
    """The engine the choice selects (ClusterChoice refuses choices that name two)."""
    return next(engine for engine in ENGINES if engine.selects(choice))


@contextlib.contextmanager
def open_cluster(choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
    """The cluster to run on, connected, for the duration of a command."""
    with selected(choice).open(choice, hooks) as cluster:
        yield cluster
