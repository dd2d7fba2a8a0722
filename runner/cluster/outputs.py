"""The stack outputs contract (versions 1 to 4) and the node registry, parsed into an Inventory.

`pulumi up` exports the outputs (infra/program.py); every booted node writes one registry entry
on the shared storage (templates/cloud-init/dtrun-register.sh.j2). Both are documented in
docs/azure.md ("Stack outputs", "Boot: cloud-init and the node registry"). Parsing is pure
and tested against recorded files.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dtrun.azure.catalog import MAX_NODES_BY_SUPPORT_REQUEST, SIZES
from dtrun.azure.expiry import MAX_IDLE_MINUTES, ExpiryError, parse_iso
from dtrun.cluster.names import control_character, host_problem, login_problem, node_dir_problem
from dtrun.errors import UsageError
from dtrun.spec.cluster import Accelerator, Inventory, Node, SshAccess

OUTPUTS_VERSION = 4  # what `dtrun up` writes: version 3 and the nodes' creation (docs/azure.md)
# version 1 stacks have no scheduler: "none"; 1 and 2 no expiry; 1 to 3 no creation time
READ_VERSIONS = (1, 2, 3, 4)
SCHEDULERS = ("none", "slurm")
EXPIRY_ACTIONS = ("scaleset", "group")
REGISTRY_SCHEMA = "dtrun.node/1"
# The most GPUs (and InfiniBand ports) one VM has: Azure's largest have 8; a count past this,
# or below 0, is a changed file, not a machine.
MOST_PER_VM = 64


class OutputsError(UsageError):
    """Stack outputs or a registry entry that dtrun cannot use."""


@dataclass(frozen=True)
class StackOutputs:
    version: int
    resource_group: str
    location: str
    head_public_address: str
    head_private_address: str
    ssh_user: str
    known_hosts: tuple[str, ...]
    node_count: int
    vm_size: str
    gpus_per_node: int
    nodes_subnet: str
    storage_kind: str
    mount_path: str
    registry_path: str
    python_bin: str
    ssh_private_key: str | None = field(default=None, repr=False)  # when generated; secret
    ssh_port: int = 22  # optional in the file: absent means 22
    image: str | None = None  # optional in the file: the nodes' image URN
    scheduler: str = "none"  # version 2: "none" or "slurm"
    slurm_partition: str | None = None  # version 2, with Slurm: the partition of every node
    expires_at: str | None = None  # version 3: the deadline (ISO 8601 UTC); None: none
    idle_minutes: int = 0  # version 3: the idle rule; 0: none
    expiry_action: str | None = None  # version 3: "scaleset" or "group"; None: expiry off
    nodes_created_at: str | None = None  # version 4: the scale set's timeCreated (ISO 8601)


@dataclass(frozen=True)
class RegistryEntry:
    hostname: str
    address: str
    role: str  # "node" or "head"
    vm_size: str
    gpus: int
    ib_ports_active: int
    ib_ports_expected: int
    infiniband: str  # "active", "degraded" or "none"
    python: str  # "ready" or "failed"; "none" on the head, which installs no environment

    @property
    def ready(self) -> bool:
        return self.infiniband == "active" and self.python == "ready"


def _field(data: Mapping[str, Any], key: str, kind: type, source: str) -> Any:
    if key not in data:
        raise OutputsError(
            f"{source} has no {key!r}",
            why="it is not a complete dtrun stack outputs document",
            fix="save the outputs again with `dtrun outputs --stack NAME --save FILE`",
        )
    value = data[key]
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON from some tools writes 2 as 2.0
    # bool is an int in Python; a stack output that is true is not a node count.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise OutputsError(f"{source}: {key!r} is {value!r}, not {_KINDS.get(kind, kind.__name__)}")
    if isinstance(value, str):
        _check_text(key, value, source)
    return value


_KINDS = {int: "a whole number", str: "text", bool: "true or false", list: "a list"}


def _count(data: Mapping[str, Any], key: str, low: int, high: int, source: str) -> int:
    """A whole number of nodes, GPUs or ports from ``low`` to ``high``, or named as wrong."""
    value: int = _field(data, key, int, source)
    if not low <= value <= high:
        raise OutputsError(
            f"{source}: {key!r} is {value:,}, not a count from {low} to {high}",
            why="a stack made by `dtrun up` never holds one: the file was changed by hand",
            fix="save the outputs again with `dtrun outputs --stack NAME --save FILE`",
        )
    return value


# The outputs that name a machine, an account or a directory on the nodes (as a hosts file's
# `shared` and `python`: the inventory's code directory and Python), and the check each must pass.
_NAME_CHECKS = {
    "head_public_address": host_problem,
    "head_private_address": host_problem,
    "ssh_user": login_problem,
    "mount_path": node_dir_problem,
    "python_bin": node_dir_problem,
}


def _check_text(key: str, value: str, source: str) -> None:
    """No control character in any text a stack or registry entry gives: they reach scripts,
    known_hosts and the terminal (docs/security.md, "Threat model")."""
    control = control_character(value)
    check = _NAME_CHECKS.get(key)
    problem = f"holds a control character ({control})" if control else check and check(value)
    if problem:
        raise OutputsError(
            f"{source}: {key!r} {problem}",
            why="a stack made by `dtrun up` never holds one: the file was changed by hand",
            fix="save the outputs again with `dtrun outputs --stack NAME --save FILE`",
        )


def parse_outputs(data: Mapping[str, Any], source: str) -> StackOutputs:
    """Check the contract version and pull out every field, or say which one is wrong."""
    if not isinstance(data, Mapping):
        raise OutputsError(
            f"{source} does not hold stack outputs",
            why=f"it holds a JSON {type(data).__name__ if data is not None else 'null'}, "
            "not an object of outputs",
            fix="save them with `dtrun outputs --stack NAME --save FILE`",
        )
    version = data.get("version")
    if version is None:
        raise OutputsError(
            f"{source} does not hold stack outputs",
            why="it has no 'version' field, which every dtrun stack's outputs carry",
            fix="save them with `dtrun outputs --stack NAME --save FILE`",
        )
    # true == 1 to Python: a file saying `"version": true` was read as version 1
    if (
        isinstance(version, bool)
        or not isinstance(version, int | float)
        or version not in READ_VERSIONS
    ):
        newer = isinstance(version, int | float) and version > OUTPUTS_VERSION
        raise OutputsError(
            f"{source} holds stack outputs version {version!r}",
            why=f"this dtrun reads versions {', '.join(map(str, READ_VERSIONS))}"
            + (", so the stack was made by a newer dtrun" if newer else ""),
            fix="use the dtrun that made the stack" if newer else "run `dtrun up` again",
        )
    strings = {
        key: _field(data, key, str, source)
        for key in (
            "resource_group", "location", "head_public_address", "head_private_address",
            "ssh_user", "vm_size", "nodes_subnet", "storage_kind", "mount_path",
            "registry_path", "python_bin",
        )
    }  # fmt: skip
    known_hosts = _known_hosts(data, source)
    private_key = data.get("ssh_private_key")
    if private_key is not None and not isinstance(private_key, str):
        raise OutputsError(f"{source}: 'ssh_private_key' is not a string")
    if private_key == "[secret]":
        raise OutputsError(
            f"{source} has its private key masked as [secret]",
            fix="save the outputs with `dtrun outputs --stack NAME --save FILE`, "
            "which keeps the secret (mode 0600)",
        )
    port = data.get("ssh_port", 22)
    if isinstance(port, float) and port.is_integer():
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise OutputsError(f"{source}: 'ssh_port' is {port!r}, not a port number")
    image = _image(data, source)
    return StackOutputs(
        version=int(version),
        ssh_port=port,
        image=image,
        **_scheduler(data, int(version), source),
        **_expiry(data, int(version), source),
        **_created(data, int(version), source),
        known_hosts=tuple(known_hosts),
        node_count=_count(data, "node_count", 1, MAX_NODES_BY_SUPPORT_REQUEST, source),
        gpus_per_node=_count(data, "gpus_per_node", 0, MOST_PER_VM, source),
        ssh_private_key=private_key,
        **strings,
    )


def _known_hosts(data: Mapping[str, Any], source: str) -> list[str]:
    known_hosts: list[Any] = _field(data, "known_hosts", list, source)
    if not all(isinstance(line, str) and len(line.split()) >= 3 for line in known_hosts):
        raise OutputsError(f"{source}: 'known_hosts' holds lines that are not 'HOSTS TYPE KEY'")
    for line in known_hosts:
        _check_text("known_hosts", line, source)
    return known_hosts


def _image(data: Mapping[str, Any], source: str) -> str | None:
    image = data.get("image")
    if image is not None and not isinstance(image, str):
        raise OutputsError(f"{source}: 'image' is {image!r}, not an image URN")
    if image is not None:
        _check_text("image", image, source)
    return image


def _scheduler(data: Mapping[str, Any], version: int, source: str) -> dict[str, Any]:
    """Version 2's scheduler and Slurm partition; a version 1 stack has no scheduler."""
    if version == 1:
        return {}
    scheduler = _field(data, "scheduler", str, source)
    if scheduler not in SCHEDULERS:
        raise OutputsError(
            f"{source}: 'scheduler' is {scheduler!r}, not one of {', '.join(SCHEDULERS)}",
            fix="use the dtrun that made the stack",
        )
    partition = data.get("slurm_partition")
    if scheduler == "slurm" and not (isinstance(partition, str) and partition):
        raise OutputsError(f"{source}: a Slurm stack's 'slurm_partition' is {partition!r}")
    if scheduler == "none" and partition is not None:
        raise OutputsError(f"{source}: 'slurm_partition' is {partition!r} without Slurm")
    return {"scheduler": scheduler, "slurm_partition": partition}


def _expiry(data: Mapping[str, Any], version: int, source: str) -> dict[str, Any]:
    """Version 3's expiry: when and how the cluster removes itself (docs/azure.md "Expiry")."""
    if version < 3:
        return {}
    expires_at = _time_or_null(data.get("expires_at", "absent"), "expires_at", source)
    # the rule `dtrun up` sets (0: none; expiry.py): -1 printed "after -1 min without a launch"
    idle = _count(data, "idle_minutes", 0, MAX_IDLE_MINUTES, source)
    action = data.get("expiry_action", "absent")
    if action is not None and action not in EXPIRY_ACTIONS:
        raise OutputsError(
            f"{source}: 'expiry_action' is {action!r}, not one of {', '.join(EXPIRY_ACTIONS)}"
        )
    return {"expires_at": expires_at, "idle_minutes": idle, "expiry_action": action}


def _created(data: Mapping[str, Any], version: int, source: str) -> dict[str, Any]:
    """Version 4's nodes_created_at: when Azure created the scale set, where the nodes' paid
    time begins (docs/report.md "Cost"). Null is read as unknown (a provider that left it out)."""
    if version < 4:
        return {}
    if "nodes_created_at" not in data:
        _field(data, "nodes_created_at", str, source)  # names it missing
    return {"nodes_created_at": _time_or_null(data["nodes_created_at"], "nodes_created_at", source)}


def _time_or_null(value: Any, key: str, source: str) -> str | None:
    """An output that is an ISO 8601 time with its zone, or null; anything else is named."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise OutputsError(f"{source}: {key!r} is {value!r}, not a time or null")
    try:
        parse_iso(value, key)
    except ExpiryError as error:
        raise OutputsError(f"{source}: {error.what}") from None
    return value


def parse_registry_entry(data: Mapping[str, Any], source: str) -> RegistryEntry:
    if data.get("schema") != REGISTRY_SCHEMA:
        raise OutputsError(
            f"{source} is not a dtrun node registry entry",
            why=f"its schema is {data.get('schema')!r}, not {REGISTRY_SCHEMA!r}",
        )
    entry = RegistryEntry(
        hostname=_field(data, "hostname", str, source),
        address=_field(data, "address", str, source),
        role=_field(data, "role", str, source),
        vm_size=_field(data, "vm_size", str, source),
        gpus=_count(data, "gpus", 0, MOST_PER_VM, source),
        ib_ports_active=_count(data, "ib_ports_active", 0, MOST_PER_VM, source),
        ib_ports_expected=_count(data, "ib_ports_expected", 0, MOST_PER_VM, source),
        infiniband=_field(data, "infiniband", str, source),
        python=_field(data, "python", str, source),
    )
    try:
        address = ipaddress.ip_address(entry.address)
    except ValueError:
        raise OutputsError(f"{source}: 'address' is {entry.address!r}, not an IP address") from None
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        raise OutputsError(  # 0.0.0.0, 224.0.0.1, 255.255.255.255: no one node's address
            f"{source}: 'address' is {entry.address}, which no single node can have",
            why="it is an unspecified, multicast or reserved address",
        )
    return entry


def inventory_from_stack(
    stack: str, outputs: StackOutputs, registry: Sequence[RegistryEntry] = ()
) -> Inventory:
    """The cluster as dtrun uses it: nodes from the registry (ordered by address), reached
    through the head VM, with host keys checked against the stack's known_hosts."""
    entries = sorted(
        (entry for entry in registry if entry.role == "node"),
        key=lambda entry: ipaddress.ip_address(entry.address),
    )
    for one, other in itertools.pairwise(entries):
        if ipaddress.ip_address(one.address) == ipaddress.ip_address(other.address):
            raise OutputsError(  # counted as two nodes, one machine would run both's ranks
                f"the nodes {one.hostname} and {other.hostname} both registered the address "
                f"{one.address}",
                why="one of the two registry entries is stale (a VM replaced or re-imaged)",
                fix="remove the stale entry from the registry on the head node, or run "
                "`dtrun down` and `dtrun up` to rebuild the cluster",
            )
    size = SIZES.get(outputs.vm_size)
    cpus = size.vcpus if size else 1
    nodes = tuple(
        Node(
            name=f"node-{index}",
            address=entry.address,
            slots=entry.gpus or outputs.gpus_per_node or 1,
            cpus=cpus,
        )
        for index, entry in enumerate(entries)
    )
    return Inventory(
        source=f"stack:{stack}",
        nodes=nodes,
        python_bin=outputs.python_bin,
        code_dir=f"{outputs.mount_path}/.dtrun/code",
        accelerator=Accelerator.CUDA if outputs.gpus_per_node else Accelerator.CPU,
        size=outputs.vm_size,
        region=outputs.location,
        ssh=SshAccess(
            user=outputs.ssh_user,
            port=outputs.ssh_port,
            jump_host=outputs.head_public_address,
            known_hosts=outputs.known_hosts,
            private_key=outputs.ssh_private_key,
        ),
        shared_dir=outputs.mount_path,
        image=outputs.image,
        nodes_created_at=outputs.nodes_created_at,
    )
