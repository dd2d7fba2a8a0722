"""Which cluster a command runs on: the embedded one, a hosts file, or a Pulumi stack.

``open_cluster`` turns the user's choice into an Inventory and the Executor that reaches it
(local processes or SSH), waits for a stack's nodes to register, and gives the readiness
barrier that runs before every launch.
"""

from __future__ import annotations

import contextlib
import getpass
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runner.cluster.embedded import embedded_inventory
from runner.cluster.outputs import StackOutputs, inventory_from_stack, parse_outputs
from runner.cluster.readiness import (
    Patience,
    WaitSink,
    check_ports_free,
    no_wait_sink,
    wait_until_ready,
)
from runner.errors import InventoryError, UsageError
from runner.execute import Executor
from runner.spec.cluster import Inventory, Node
from runner.spec.launch import LaunchPlan
from runner.spec.slurm import SlurmRequest
from runner.spec.text import plural

if TYPE_CHECKING:
    from runner.cluster.registry import RegistryPoll

Notice = Callable[[str], None]


class Preview(Protocol):
    """An engine's own lines in a dry run: the allocation, how each launch starts."""

    @property
    def allocation(self) -> str: ...

    def launch(self, plan: LaunchPlan, workdir: str) -> str: ...


@dataclass(frozen=True)
class ClusterChoice:
    """Where to run, as the options said (at most one of hosts, stack, outputs)."""

    hosts: str | None = None  # a hosts file, or the hosts themselves: h1:4,h2:4
    stack: str | None = None
    outputs: Path | None = None
    local_nodes: int = 1  # size of the embedded cluster when none of the above is given
    accept_new_host_keys: bool = False
    check: bool = False  # health checks (GPUs, InfiniBand, Python) before every launch
    ready_timeout_s: float = 900.0
    connect_timeout_s: float = 30.0  # hosts files: their nodes are up, or the run fails fast
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
            attempt = min(10.0, max(2.0, self.connect_timeout_s / 3))
            return Patience(self.connect_timeout_s, 2.0, attempt, "--connect-timeout")
        return Patience(self.ready_timeout_s)

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


@dataclass
class Cluster:
    inventory: Inventory
    executor: Executor
    choice: ClusterChoice
    on_wait: WaitSink = no_wait_sink  # hears each look at nodes that have not all answered
    engine: str = "local"  # "local", "ssh", "slurm", "spark": how the executor reaches them
    preview: Preview | None = None  # what a dry run prints beside each plan (Slurm)

    def ready(self, plan: LaunchPlan) -> None:
        """The barrier before a launch: its nodes answer and, with --check, are healthy."""
        nodes: Sequence[Node] = plan.nodes or tuple(launch.node for launch in plan.launches)
        if self.engine == "spark":
            return  # Spark's barrier job waits for its executors, or is refused at once
        if self.engine == "slurm" and not self.choice.check:
            return  # Slurm gave the job these nodes: they are up
        if self.engine == "local":
            # MASTER_PORT sits next to the rendezvous port (LaunchRequest.master_port)
            check_ports_free(plan.master_addr, (plan.master_port - 1, plan.master_port))
            if not self.choice.check:
                return  # processes on this machine: nothing to reach
        wait_until_ready(
            self.executor.command,
            self.inventory,
            nodes,
            check=self.choice.check,
            patience=self.choice.patience,
            on_wait=self.on_wait,
        )
        if self.inventory.ssh is not None:
            from runner.cluster.peers import check_peers  # head-only launchers: node 0's ssh

            check_peers(self.executor.command, self.inventory, plan)


def _read(path: Path, what: str, fix: str = "") -> str:
    """A text file as editors write it: UTF-8, with or without a byte-order mark."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InventoryError(
            f"cannot read the {what} {path}",
            why=exc.strerror or str(exc),
            fix=fix or f"pass an existing, readable file to --{what.split()[0]}",
        ) from None
    try:
        text = data.decode("utf-8-sig")  # a BOM (Windows editors) is not part of a host name
    except UnicodeDecodeError as exc:
        utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
        raise InventoryError(
            f"the {what} {path} is not UTF-8 text",
            why=f"byte {exc.start} is {data[exc.start : exc.start + 1]!r}"
            + (" (the file is UTF-16)" if utf16 else ""),
            fix="save it as UTF-8 text (`iconv -f UTF-16 -t UTF-8`), one host per line",
        ) from None
    control = next((c for c in text if ord(c) < 32 and c not in "\t\n\r"), None)
    if control is not None:
        line = text.count("\n", 0, text.index(control)) + 1
        raise InventoryError(
            f"the {what} {path} is not a text file",
            why=f"line {line} holds the control character {control!r}",
            fix=f"pass the {what} itself (text: UTF-8, one host per line or YAML)",
        )
    return text


def _hosts_inventory(hosts: str) -> Inventory:
    """--hosts FILE, or --hosts h1:4,h2:4 (the hosts themselves) where no such file exists."""
    from runner.cluster.hostlines import is_host_list
    from runner.cluster.hosts import Defaults, parse_hosts_file, parse_hosts_value  # yaml: here

    defaults = Defaults(getpass.getuser(), python_bin=embedded_inventory(1).python_bin)
    if not Path(hosts).exists() and is_host_list(hosts):
        return parse_hosts_value(hosts, defaults)
    text = _read(
        Path(hosts),
        "hosts file",
        fix="pass an existing, readable file to --hosts, or the hosts themselves as "
        "HOST:SLOTS items (--hosts gpu-a:8,gpu-b:8)",
    )
    return parse_hosts_file(text, hosts, defaults)


def _stack_outputs(choice: ClusterChoice) -> StackOutputs:
    if choice.outputs is not None:
        text = _read(choice.outputs, "outputs file")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InventoryError(
                f"{choice.outputs} is not JSON",
                why=str(exc) if text.strip() else "the file is empty",
                fix="save the outputs again with `dtrun outputs --stack NAME --save FILE`",
            ) from None
        return parse_outputs(data, str(choice.outputs))
    from runner.azure.stack import check_stack_name
    from runner.azure.stack import outputs as read_outputs

    assert choice.stack is not None  # only called for --stack or --outputs
    return parse_outputs(read_outputs(check_stack_name(choice.stack)).values, choice.stack)


def _through_ssh_config(inventory: Inventory) -> Inventory:
    """A hosts file may name Host aliases of the user's ~/.ssh/config: dtrun logs in through the
    alias, as `ssh ALIAS` would, and the nodes reach each other (rendezvous, MASTER_ADDR) at the
    alias's HostName."""
    from runner.execute.sshsession import endpoint

    nodes = []
    for node in inventory.nodes:
        target = endpoint(inventory, node)
        if target.hostname and node.address == target.host:  # no address of its own given
            node = replace(node, address=target.hostname, ssh_host=target.host)
        nodes.append(node)
    return replace(inventory, nodes=tuple(nodes))


@contextlib.contextmanager
def open_cluster(
    choice: ClusterChoice,
    notice: Notice,
    on_outputs: Callable[[StackOutputs], None] = lambda outputs: None,
    on_poll: RegistryPoll | None = None,
) -> Iterator[Cluster]:
    """The cluster to run on, connected, for the duration of a command. ``on_outputs`` hears
    a stack's outputs as soon as they are read (from then on, the stack is known to exist)."""
    if choice.slurm is not None:
        from runner.cluster.slurmjob import open_slurm, stack_head

        if choice.stack_name is None:
            with open_slurm(choice, notice) as cluster:
                yield cluster
            return
        outputs = _stack_outputs(choice)  # a stack's own Slurm, through its head
        on_outputs(outputs)
        with (
            stack_head(choice.stack_name, outputs) as head,
            open_slurm(choice, notice, head) as cluster,
        ):
            yield cluster
        return
    if choice.spark is not None:
        from runner.cluster.spark import spark_inventory
        from runner.execute.spark import SparkExecutor, SparkPreview

        inventory = spark_inventory(choice.spark, choice.local_nodes)
        executor = SparkExecutor(choice.spark, f"{inventory.python_bin}/python", inventory.code_dir)
        preview = SparkPreview(executor, len(inventory.nodes))
        yield Cluster(inventory, executor, choice, engine="spark", preview=preview)
        return
    if choice.embedded:
        from runner.execute.local import LocalExecutor

        yield Cluster(embedded_inventory(choice.local_nodes), LocalExecutor(), choice)
        return

    from runner.execute.ssh import SshExecutor
    from runner.execute.sshsession import SshSession

    if choice.hosts is not None:
        inventory = _through_ssh_config(_hosts_inventory(choice.hosts))
        with SshSession(
            inventory,
            accept_new_host_keys=choice.accept_new_host_keys,
            notice=notice,
            # one attempt per look: the readiness barrier retries until --connect-timeout
            connect_timeout=choice.patience.attempt_s,
            retries=1,
        ) as session:
            yield Cluster(inventory, SshExecutor(session), choice, engine="ssh")
        return

    from runner.cluster.registry import no_poll, wait_for_registry

    name = choice.stack_name
    assert name is not None
    outputs = _stack_outputs(choice)
    on_outputs(outputs)
    access = inventory_from_stack(name, outputs)  # no nodes yet: they register at boot
    with SshSession(access, notice=notice) as session:
        notice(f"waiting for the {plural(outputs.node_count, 'node')} of stack {name} to register")
        session.inventory = wait_for_registry(
            session,
            name,
            outputs,
            timeout_s=choice.ready_timeout_s,
            on_poll=on_poll if on_poll is not None else no_poll,
        )
        yield Cluster(session.inventory, SshExecutor(session), choice, engine="ssh")
