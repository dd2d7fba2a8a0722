"""The whole cluster: resource group, network, shared storage, head VM, GPU scale set, keys.

``build`` returns the stack outputs, version 4 of the contract that runner/cluster/outputs.py parses
(docs/azure.md "Stack outputs").
"""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

import pulumi
import pulumi_tls as tls
from pulumi_azure_native import resources

from dtrun.azure.catalog import SIZES
from dtrun.azure.expiry import deadline, group_tags
from dtrun.azure.settingcheck import CLUSTER_TAG, MANAGED_BY_TAG, subnets
from dtrun.infra.cloudinit import Boot, ClusterKey, HeadExpiry, render_cloud_init
from dtrun.infra.cluster import GpuCluster
from dtrun.infra.expiry import ExpiryArgs, ExpiryIdentity
from dtrun.infra.head import HeadNode
from dtrun.infra.machines import MachineArgs, custom_data
from dtrun.infra.network import Network, NetworkArgs
from dtrun.infra.slurm import PARTITION, munge_key
from dtrun.infra.storage import SharedStorage, StorageArgs
from dtrun.spec.cluster import ClusterSpec, Scheduler

OUTPUTS_VERSION = 4


def _no_expiry() -> pulumi.Output[HeadExpiry | None]:
    """Made when the program runs, not at import: an Output needs the run's event loop."""
    return pulumi.Output.from_input(None)


def _boot(
    role: str,
    cluster: ClusterSpec,
    mount_source: pulumi.Output[str],
    key: tls.PrivateKey,
    munge: pulumi.Output[str | None],
    cluster_key: tls.PrivateKey | None = None,
    expiry: pulumi.Output[HeadExpiry | None] | None = None,
) -> pulumi.Output[str]:
    expiry = _no_expiry() if expiry is None else expiry
    pattern = nodes_host_pattern(subnets(cluster.vnet_cidr)["nodes"])
    node_to_node = (
        pulumi.Output.all(cluster_key.private_key_openssh, cluster_key.public_key_openssh)
        if cluster_key
        else pulumi.Output.from_input([])
    )

    def render(values: list[Any]) -> str:
        source, host_private, host_public, node_keys, munge_b64, head_expiry = values
        shared_key = None
        if node_keys:
            shared_key = ClusterKey(
                node_keys[0], node_keys[1].strip(), f"{pattern} {host_public.strip()}"
            )
        return render_cloud_init(
            Boot(
                role, cluster, source, host_private, host_public.strip(), shared_key, munge_b64,
                head_expiry,
            )
        )  # fmt: skip

    cloud_init = pulumi.Output.all(
        mount_source, key.private_key_openssh, key.public_key_openssh, node_to_node, munge, expiry
    ).apply(render)
    return custom_data(cloud_init)


def nodes_host_pattern(nodes_cidr: str) -> str:
    """known_hosts pattern for every address of the /24 node subnet: 10.42.1.*"""
    network = ipaddress.ip_network(nodes_cidr)
    return ".".join(str(network.network_address).split(".")[:3]) + ".*"


def _munge_key(cluster: ClusterSpec) -> pulumi.Output[str | None]:
    """With Slurm, the cluster's munge key (base64, secret): derived from an ed25519 key that
    pulumi-tls makes once and keeps in state, as pulumi-random is not a dependency."""
    if cluster.scheduler is not Scheduler.SLURM:
        return pulumi.Output.from_input(None)
    seed = tls.PrivateKey("munge-key-seed", algorithm="ED25519")
    return pulumi.Output.secret(seed.private_key_openssh.apply(munge_key))


def expires_at(cluster: ClusterSpec, now: datetime.datetime) -> str | None:
    """The deadline: the one `dtrun up`/`extend` wrote, else ttlHours from now (a plain
    `pulumi up`); None when ttlHours is 0."""
    expiry = cluster.expiry
    if not expiry.ttl_hours:
        return None
    return expiry.expires_at or deadline(now, expiry.ttl_hours)


def _expiry(
    cluster: ClusterSpec, group: resources.ResourceGroup, tags: dict[str, str]
) -> tuple[pulumi.Output[HeadExpiry | None], pulumi.Output[str] | None]:
    """With expiry on: the head's identity and its role on the group, and what the head's
    cloud-init needs; both None-valued when dtrun:ttlHours and idleMinutes are 0."""
    if not cluster.expiry.enabled:
        return _no_expiry(), None
    identity = ExpiryIdentity("expiry", ExpiryArgs(cluster, group.name, group.id, tags))
    head = pulumi.Output.all(group.id, identity.client_id).apply(
        lambda v: HeadExpiry(group_id=v[0], client_id=v[1])
    )
    return head, identity.identity_id


def build(cluster: ClusterSpec) -> dict[str, object]:
    size = SIZES[cluster.vm_size]
    tags = {CLUSTER_TAG: cluster.name_prefix, MANAGED_BY_TAG: "dtrun", **dict(cluster.tags)}
    deadline_at = expires_at(cluster, datetime.datetime.now(datetime.UTC))
    # Only the group carries the expiry tags: the head's timer reads them there, and a new
    # deadline at each `dtrun up` then updates one resource, not all of them.
    group = resources.ResourceGroup(
        f"{cluster.name_prefix}-rg",
        location=cluster.location,
        tags={**tags, **group_tags(cluster.expiry, deadline_at)},
    )
    net = Network("net", NetworkArgs(cluster, group.name, tags))
    shared = SharedStorage(
        "storage",
        StorageArgs(
            cluster,
            group.name,
            [net.head_subnet_id, net.nodes_subnet_id],
            net.storage_subnet_id,
            tags,
        ),
    )
    # Host keys made once and kept in state: every node shares one (they are one scale set).
    head_key = tls.PrivateKey("head-host-key", algorithm="ED25519")
    node_key = tls.PrivateKey("node-host-key", algorithm="ED25519")
    # The nodes' own key pair, so a launcher on node 0 can ssh to the others (mpirun, pdsh).
    cluster_key = tls.PrivateKey("cluster-key", algorithm="ED25519")
    # The admin's key pair, generated when no public key is configured; its private half is
    # a secret output that dtrun reads to reach the cluster.
    public_key: pulumi.Input[str]
    private_key: pulumi.Output[str] | None = None
    if cluster.ssh_public_key:
        public_key = cluster.ssh_public_key
    else:
        admin_key = tls.PrivateKey("admin-key", algorithm="ED25519")
        public_key = admin_key.public_key_openssh
        private_key = pulumi.Output.secret(admin_key.private_key_openssh)
    munge = _munge_key(cluster)
    head_expiry, identity_id = _expiry(cluster, group, tags)
    head = HeadNode(
        "head",
        MachineArgs(
            cluster,
            group.name,
            net.head_subnet_id,
            public_key,
            _boot("head", cluster, shared.mount_source, head_key, munge, expiry=head_expiry),
            tags,
            identity_id,
        ),
    )
    gpu = GpuCluster(
        "gpu",
        MachineArgs(
            cluster,
            group.name,
            net.nodes_subnet_id,
            public_key,
            _boot("node", cluster, shared.mount_source, node_key, munge, cluster_key),
            tags,
        ),
    )
    pattern = nodes_host_pattern(subnets(cluster.vnet_cidr)["nodes"])
    known_hosts = pulumi.Output.all(
        head.public_address, head.private_address, head_key.public_key_openssh,
        node_key.public_key_openssh,
    ).apply(
        lambda v: [f"{v[0]},{v[1]} {v[2].strip()}", f"{pattern} {v[3].strip()}"]
    )  # fmt: skip
    storage = cluster.storage
    return {
        "version": OUTPUTS_VERSION,
        "resource_group": group.name,
        "location": cluster.location,
        "head_public_address": head.public_address,
        "head_private_address": head.private_address,
        "ssh_user": cluster.admin_user,
        "ssh_port": 22,
        "ssh_private_key": private_key,
        "known_hosts": known_hosts,
        "node_count": cluster.node_count,
        "vm_size": size.name,
        "image": cluster.image,
        "gpus_per_node": size.gpu_count,
        "nodes_subnet": subnets(cluster.vnet_cidr)["nodes"],
        "storage_kind": storage.kind.value,
        "mount_path": storage.mount_path,
        "registry_path": storage.registry_dir,
        "python_bin": f"{storage.venv_dir}/bin",
        "scheduler": cluster.scheduler.value,
        "slurm_partition": PARTITION if cluster.scheduler is Scheduler.SLURM else None,
        "expires_at": deadline_at,
        "idle_minutes": cluster.expiry.idle_minutes,
        "expiry_action": cluster.expiry.action.value if cluster.expiry.enabled else None,
        "nodes_created_at": gpu.created_at,
    }
