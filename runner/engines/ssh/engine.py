"""The SSH engine: --hosts (a hosts file or h1:4,h2:4), or --stack/--outputs without --slurm
(a stack's nodes, waited for until they register on its shared storage)."""

from __future__ import annotations

import contextlib
import getpass
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from dtrun.cluster.outputs import inventory_from_stack
from dtrun.engines.base import Cluster, ClusterChoice, Engine, Hooks
from dtrun.engines.common.code import this_python
from dtrun.engines.inputs import read_text, stack_outputs
from dtrun.engines.ssh.options import SshOptions
from dtrun.spec.cluster import Inventory
from dtrun.spec.text import plural


class SshEngine(Engine):
    name = "ssh"
    evictable = True  # real machines, spot VMs among them (runner/sweep/eviction.py)

    def selects(self, choice: ClusterChoice) -> bool:
        # after Slurm in ENGINES: a stack with --slurm is Slurm's (--spark beside either is
        # refused by EngineOptions)
        options = choice.of(SshOptions)
        return options.hosts is not None or options.stack_name is not None

    def open(
        self, choice: ClusterChoice, hooks: Hooks
    ) -> contextlib.AbstractContextManager[Cluster]:
        if choice.of(SshOptions).hosts is not None:
            return self._hosts(choice, hooks)
        return self._stack(choice, hooks)

    @contextlib.contextmanager
    def _hosts(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        from dtrun.engines.ssh.executor import SshExecutor
        from dtrun.engines.ssh.session import SshSession

        options = choice.of(SshOptions)
        assert options.hosts is not None
        inventory = _through_ssh_config(_hosts_inventory(options.hosts))
        with SshSession(
            inventory,
            accept_new_host_keys=options.accept_new_host_keys,
            notice=hooks.notice,
            # one attempt per look: the readiness barrier retries until --connect-timeout
            connect_timeout=choice.patience.attempt_s,
            retries=1,
        ) as session:
            yield Cluster(inventory, SshExecutor(session), choice, self)

    @contextlib.contextmanager
    def _stack(self, choice: ClusterChoice, hooks: Hooks) -> Iterator[Cluster]:
        from dtrun.engines.ssh.executor import SshExecutor
        from dtrun.engines.ssh.registration import no_poll, wait_for_registry
        from dtrun.engines.ssh.session import SshSession

        options = choice.of(SshOptions)
        name = options.stack_name
        assert name is not None
        outputs = stack_outputs(options.stack, options.outputs)
        hooks.on_outputs(outputs)
        access = inventory_from_stack(name, outputs)  # no nodes yet: they register at boot
        with SshSession(access, notice=hooks.notice) as session:
            hooks.notice(
                f"waiting for the {plural(outputs.node_count, 'node')} of stack {name} to register"
            )
            session.inventory = wait_for_registry(
                session,
                name,
                outputs,
                timeout_s=options.ready_timeout,
                on_poll=hooks.on_poll if hooks.on_poll is not None else no_poll,
            )
            yield Cluster(session.inventory, SshExecutor(session), choice, self)


def _hosts_inventory(hosts: str) -> Inventory:
    """--hosts FILE, or --hosts h1:4,h2:4 (the hosts themselves) where no such file exists."""
    from dtrun.cluster.names import remember_password
    from dtrun.engines.ssh.hostlines import is_host_list
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file, parse_hosts_value  # yaml: here
    from dtrun.workloads.files import name_too_long

    for item in hosts.split(","):  # a USER:PASSWORD@HOST typed there: masked where quoted
        remember_password(item)
    defaults = Defaults(getpass.getuser(), python_bin=this_python())
    if (name_too_long(Path(hosts)) or not Path(hosts).exists()) and is_host_list(hosts):
        return parse_hosts_value(hosts, defaults)
    text = read_text(
        Path(hosts),
        "hosts file",
        fix="pass an existing, readable file to --hosts, or the hosts themselves as "
        "HOST:SLOTS items (--hosts gpu-a:8,gpu-b:8)",
    )
    return replace(parse_hosts_file(text, hosts, defaults), hosts_text=text)  # --write-hosts


def _through_ssh_config(inventory: Inventory) -> Inventory:
    """A hosts file may name Host aliases of the user's ~/.ssh/config: dtrun logs in through the
    alias, as `ssh ALIAS` would, and the nodes reach each other (rendezvous, MASTER_ADDR) at the
    alias's HostName."""
    from dtrun.engines.common.threads import DaemonThreads
    from dtrun.engines.ssh.endpoint import endpoint, user_ssh_config

    if not user_ssh_config():  # no config, no command to wait for: a thread's round trip a
        targets = [endpoint(inventory, node) for node in inventory.nodes]  # host saved
    else:
        # every host at once: reading the config for a host runs its `Match exec` commands, as
        # `ssh HOST` would; one host after another, a 1 s command took N seconds
        # (docs/clusters.md); daemon threads: a command that never ends does not hold a stop
        with DaemonThreads(min(32, len(inventory.nodes) or 1), "dtrun-ssh-config") as pool:
            targets = list(pool.map(lambda node: endpoint(inventory, node), inventory.nodes))
    nodes = []
    for node, target in zip(inventory.nodes, targets, strict=True):
        if target.hostname and node.address == target.host:  # no address of its own given
            node = replace(node, address=target.hostname, ssh_host=target.host)
        nodes.append(node)
    return replace(inventory, nodes=tuple(nodes))
