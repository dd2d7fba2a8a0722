"""The SSH engine's options: a hosts file or a stack's nodes (--stack and --outputs, declared in
runner/engines/common/stack.py), and how long they have to answer.
Spread into bench, run and exec through ``EngineOptions`` (runner/engines/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from dtrun.cluster.readiness import Patience
from dtrun.engines.base import DEFAULT_READY_TIMEOUT, WHERE_PANEL
from dtrun.engines.common.stack import StackOptions
from dtrun.spec.bounds import seconds

DEFAULT_CONNECT_TIMEOUT = 30.0
READY_TIMEOUT, CONNECT_TIMEOUT = seconds("--ready-timeout"), seconds("--connect-timeout")

Hosts = Annotated[
    str | None,
    typer.Option(
        metavar="FILE|HOSTS",
        help="Run on the machines of a hosts file (YAML, MPI `HOST slots=N`, `h1:4,h2:4` lists) "
        'or on these hosts: h1:4,h2:4 (as Horovod -H, "$MLP_MPI_HOSTS").',
        rich_help_panel=WHERE_PANEL,
    ),
]


@dataclass(frozen=True)
class SshOptions(StackOptions):
    hosts: Hosts = None  # a hosts file, or the hosts themselves: h1:4,h2:4
    accept_new_host_keys: Annotated[
        bool,
        typer.Option(
            "--accept-new-host-keys",
            help="Record host keys not yet in known_hosts (never a changed one) and say so.",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = False
    ready_timeout: Annotated[
        float,
        READY_TIMEOUT,
        typer.Option(
            help="Stacks: seconds to wait for nodes to boot, register and answer before giving up"
            f"{READY_TIMEOUT.within}.",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = DEFAULT_READY_TIMEOUT
    connect_timeout: Annotated[
        float,
        CONNECT_TIMEOUT,
        typer.Option(
            help="Hosts files: seconds every node has to answer SSH (tried every 2 s) before the "
            "run fails, naming the nodes that did not"
            f"{CONNECT_TIMEOUT.within}.",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = DEFAULT_CONNECT_TIMEOUT

    def check(self) -> None:
        from dtrun.plan.checks import check_bound

        check_bound(READY_TIMEOUT, self.ready_timeout)
        check_bound(CONNECT_TIMEOUT, self.connect_timeout)

    @property
    def patience(self) -> Patience:
        """How long a launch waits for its nodes. A hosts file's nodes should already be up,
        so a dead one fails the run within --connect-timeout (a look every 2 s, each
        connection attempt bounded by ``attempt_s``); a stack's may still be booting."""
        if self.hosts is not None:
            attempt = min(10.0, max(2.0, self.connect_timeout / 3))
            return Patience(self.connect_timeout, 2.0, attempt, "--connect-timeout")
        return Patience(self.ready_timeout)
