"""The machines: an Inventory of Nodes and how to reach them, and the Azure cluster a stack
describes (ClusterSpec). Frozen values; stdlib and dtrun.redact only."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

from dtrun.redact import REDACTED
from dtrun.spec.text import plural


class Accelerator(StrEnum):
    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class Node:
    """One machine that runs one launch script."""

    name: str  # stable label used in logs: node-0, node-1, ...
    address: str  # the address other nodes reach it on (rendezvous, --local-addr)
    slots: int = 1  # processes it is meant to run: its GPUs, or a CPU share on CPU nodes
    cpus: int = 1  # cores this node may use; split between its processes
    # the cores it is kept to (an embedded node under taskset); None: any core it is given
    cores: tuple[int, ...] | None = None
    # the GPUs it is given (an embedded node, by CUDA_VISIBLE_DEVICES); None: every GPU it has
    gpus: tuple[str, ...] | None = None
    # How to log in, where it differs from the inventory's SshAccess (hosts files).
    ssh_host: str | None = None  # default: address
    ssh_port: int | None = None
    ssh_user: str | None = None
    ssh_key: str | None = None  # path of a private key file


@dataclass(frozen=True)
class SshAccess:
    """How the nodes of a real cluster are reached over SSH: by dtrun from this machine, and
    by a head-only launcher (mpirun, horovodrun, DeepSpeed over pdsh) from node 0."""

    user: str | None = None  # None: the user's ssh config for the host, else the local user
    port: int | None = None  # None: the user's ssh config for the host, else 22
    # The private key node 0 uses to reach the other nodes; None: ssh's own defaults there.
    identity_file: str | None = None
    jump_host: str | None = None  # dtrun reaches the nodes through this host (the head VM)
    known_hosts: tuple[str, ...] = ()  # lines to check host keys against; empty: the user's
    private_key: str | None = field(default=None, repr=False)  # secret: never printed
    key_path: str | None = None  # a private key file, when not given inline
    known_hosts_file: str | None = None  # where to check host keys; None: ~/.ssh/known_hosts
    workdir: str = "/tmp/dtrun"  # where dtrun stages scripts on nodes without shared storage

    def redacted(self) -> SshAccess:
        return replace(self, private_key=REDACTED if self.private_key else None)


class Starter(StrEnum):
    """Who starts the processes of the nodes past node 0 where neither ssh (``Inventory.ssh``)
    nor this machine (no ssh: the nodes are local processes) does. Set by the engine."""

    SRUN = "srun"  # the job's scheduler, by its node names: mpirun and horovodrun go through it
    TASKS = "tasks"  # one engine task per node, the launcher inside it (TorchDistributor)


@dataclass(frozen=True)
class Inventory:
    """The nodes a benchmark may use, and how to run Python on them."""

    source: str  # where it came from: "embedded", "hosts:FILE", "stack:NAME"
    nodes: tuple[Node, ...]
    python_bin: str  # directory, on every node, holding python and torchrun
    code_dir: str  # directory, on every node, that holds the runner/workloads package
    accelerator: Accelerator = Accelerator.CPU
    size: str | None = None  # Azure VM size when known (catalog key)
    region: str | None = None  # Azure region when known (the list price's key, with size)
    # None: the nodes are processes on this machine and run no sshd (the embedded cluster),
    # so launchers use their no-SSH modes.
    ssh: SshAccess | None = None
    shared_dir: str | None = None  # a directory every node mounts, when there is one
    interface: str = "eth0"  # the network interface the nodes reach each other on
    image: str | None = None  # the nodes' OS image (URN), when the cluster says
    starter: Starter | None = None  # None: ssh where ``ssh`` is set, else this machine
    # when the nodes were created (ISO 8601), where the cluster says (a stack's outputs v4):
    # the report's time paid before a sweep begins from it (docs/report.md "Cost")
    nodes_created_at: str | None = None
    # a hosts file's text as it was read and checked, once: --write-hosts writes from it, not
    # from the file read again (changed since, it would write what was never checked); no
    # record holds it (recorded)
    hosts_text: str | None = field(default=None, repr=False, compare=False)

    @property
    def description(self) -> str:
        return f"{self.source}: {plural(len(self.nodes), 'node')}, {self.accelerator.value}"

    def redacted(self) -> Inventory:
        """This inventory without secrets, for records and reports."""
        return replace(self, ssh=self.ssh.redacted() if self.ssh else None, hosts_text=None)

    def recorded(self) -> dict[str, object]:
        """What a record keeps of this inventory: its fields, redacted, less the hosts text."""
        kept = asdict(self.redacted())
        del kept["hosts_text"]
        return kept


def usable_cpus() -> int:
    """The cores this process may use (its affinity: a container's cpuset, a `taskset`), not
    every core the machine has: the embedded cluster's nodes share these."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def exceeds_cores(processes: int, cores: int | None) -> bool:
    """Whether ``processes`` on one machine of ``cores`` cores (the embedded cluster's nodes
    times its processes per node) share cores: their figures then measure the shared CPU, not
    the launcher or the communication."""
    return processes > (cores or 1)


def shares_cores(
    kept_to: Sequence[Sequence[int] | None], procs_per_node: int, cores: int | None
) -> bool:
    """Whether the processes of a point on the embedded cluster share cores, its nodes each
    kept to their cores (``kept_to``, in node order; None where a node floats over this
    machine's ``cores``): a node with more processes than cores, or more processes than the
    point's nodes have cores between them. The report's rule and the bench's warning."""
    if not kept_to or any(kept is None for kept in kept_to):
        return exceeds_cores(len(kept_to) * procs_per_node, cores)
    pinned = [set(kept) for kept in kept_to if kept is not None]
    if any(procs_per_node > len(kept) for kept in pinned):
        return True
    return len(kept_to) * procs_per_node > len(set().union(*pinned))


class StorageKind(StrEnum):
    AZURE_FILES = "azurefiles"  # Azure Files premium, NFS 4.1
    NETAPP = "netapp"  # Azure NetApp Files, NFS 4.1 on a delegated subnet
    LUSTRE = "lustre"  # Azure Managed Lustre on its own subnet


class Scheduler(StrEnum):
    """Who hands out the nodes: nobody (dtrun reaches them over SSH) or Slurm on the head."""

    NONE = "none"
    SLURM = "slurm"  # slurmctld on the head, slurmd on every node (docs/azure.md "Slurm")


@dataclass(frozen=True)
class StorageSpec:
    kind: StorageKind
    size_gib: int
    mount_path: str
    lustre_sku: str

    # Where dtrun keeps its things on the shared storage (part of the stack outputs contract).
    @property
    def dtrun_dir(self) -> str:
        return f"{self.mount_path}/.dtrun"

    @property
    def registry_dir(self) -> str:
        """One JSON file per booted machine (docs/azure.md, "Boot")."""
        return f"{self.dtrun_dir}/nodes"

    @property
    def venv_dir(self) -> str:
        return f"{self.dtrun_dir}/venv"


class ExpiryAction(StrEnum):
    """What the head's expiry timer deletes (docs/azure.md "Expiry")."""

    SCALESET = "scaleset"  # the GPU scale set: the bill that matters; head and storage stay
    GROUP = "group"  # the whole resource group, shared storage and the head included


@dataclass(frozen=True)
class ExpirySpec:
    """When the cluster removes itself, without any client: a deadline and an idle rule."""

    ttl_hours: int = 12  # 0: no deadline
    idle_minutes: int = 60  # 0: no idle rule
    action: ExpiryAction = ExpiryAction.SCALESET
    expires_at: str = ""  # ISO 8601 UTC, set by dtrun up/extend; "": ttl_hours from the update

    @property
    def enabled(self) -> bool:
        """Either rule on: the head gets an identity that may delete, and the timer."""
        return self.ttl_hours > 0 or self.idle_minutes > 0


@dataclass(frozen=True)
class ClusterSpec:
    """An Azure InfiniBand cluster as the stack configuration describes it (validated)."""

    name_prefix: str
    location: str
    vm_size: str
    node_count: int
    admin_user: str
    admin_cidrs: tuple[str, ...]
    ssh_public_key: str | None  # None: generate a key pair and export the private key
    storage: StorageSpec
    spot: bool
    spot_max_price: float  # -1: up to the on-demand price
    image: str  # URN: the catalog's for the size, or the override
    head_vm_size: str
    vnet_cidr: str
    tags: tuple[tuple[str, str], ...]
    python_packages: tuple[str, ...]
    scheduler: Scheduler = Scheduler.NONE
    expiry: ExpirySpec = ExpirySpec()
    zone: str = ""  # an availability zone for the nodes and Lustre; "": regional nodes
