"""Shared storage mounted on the head and every node: one builder per kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import netapp, storage, storagecache

from dtrun.spec.cluster import ClusterSpec, StorageKind

SHARE = "shared"  # the share, volume and export name
GIB = 1024**3
TIB = 1024**4
VOLUME_ROOT_MODE = "0755"  # NetApp: the volume root's mode, octal in four digits


@dataclass(frozen=True)
class StorageArgs:
    cluster: ClusterSpec
    resource_group_name: pulumi.Input[str]
    client_subnet_ids: list[pulumi.Output[str]]  # head and nodes
    storage_subnet_id: pulumi.Output[str] | None  # NetApp's delegated or Lustre's own
    tags: dict[str, str]


Builder = Callable[[str, StorageArgs, pulumi.ResourceOptions], pulumi.Output[str]]


def _azure_files(name: str, args: StorageArgs, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    cluster = args.cluster
    account = storage.StorageAccount(
        f"{cluster.name_prefix}nfs",  # auto-named from this: lowercase letters and digits only
        resource_group_name=args.resource_group_name,
        location=cluster.location,
        kind="FileStorage",
        sku=storage.SkuArgs(name="Premium_LRS"),  # NFS shares need premium FileStorage
        # NFS cannot use HTTPS; the traffic stays inside the VNet's service endpoint.
        enable_https_traffic_only=False,
        allow_blob_public_access=False,
        minimum_tls_version="TLS1_2",
        # Only the head and node subnets may reach the share.
        network_rule_set=storage.NetworkRuleSetArgs(
            default_action=storage.DefaultAction.DENY,
            bypass="AzureServices",
            virtual_network_rules=[
                storage.VirtualNetworkRuleArgs(
                    virtual_network_resource_id=subnet, action=storage.Action.ALLOW
                )
                for subnet in args.client_subnet_ids
            ],
        ),
        tags=args.tags,
        opts=opts,
    )
    share = storage.FileShare(
        f"{name}-share",
        resource_group_name=args.resource_group_name,
        account_name=account.name,
        share_name=SHARE,
        enabled_protocols="NFS",
        # Boot scripts run as root and create /shared/.dtrun: squashing root would stop them.
        root_squash="NoRootSquash",
        share_quota=cluster.storage.size_gib,
        opts=opts,
    )
    # Through share.id, so machines are only configured once the share exists.
    return pulumi.Output.all(account.name, share.id).apply(
        lambda v: f"{v[0]}.file.core.windows.net:/{v[0]}/{SHARE}"
    )


def _netapp(name: str, args: StorageArgs, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    cluster = args.cluster
    assert args.storage_subnet_id is not None  # the network made the delegated subnet
    account = netapp.Account(
        f"{name}-netapp",
        resource_group_name=args.resource_group_name,
        location=cluster.location,
        tags=args.tags,
        opts=opts,
    )
    pool = netapp.CapacityPool(
        f"{name}-pool",
        resource_group_name=args.resource_group_name,
        location=cluster.location,
        account_name=account.name,
        pool_name=SHARE,
        service_level="Premium",
        size=cluster.storage.size_gib // 1024 * TIB,  # bytes, in whole TiB
        qos_type="Auto",
        tags=args.tags,
        opts=opts,
    )
    volume = netapp.CapacityPoolVolume(
        f"{name}-volume",
        resource_group_name=args.resource_group_name,
        location=cluster.location,
        account_name=account.name,
        pool_name=SHARE,
        volume_name=SHARE,
        creation_token=SHARE,  # the export path: IP:/shared
        service_level="Premium",
        subnet_id=args.storage_subnet_id,
        usage_threshold=cluster.storage.size_gib * GIB,
        protocol_types=["NFSv4.1"],
        # The volume's root is root's, 0770 unless told (Azure NetApp Files "Configure Unix
        # permissions"): 0755 lets the admin user enter it to reach .dtrun, which it owns.
        unix_permissions=VOLUME_ROOT_MODE,
        export_policy=netapp.VolumePropertiesExportPolicyArgs(
            rules=[
                netapp.ExportPolicyRuleArgs(
                    rule_index=1,
                    allowed_clients=cluster.vnet_cidr,
                    nfsv3=False,
                    nfsv41=True,
                    unix_read_only=False,
                    unix_read_write=True,
                    has_root_access=True,  # boot scripts create /shared/.dtrun as root
                )
            ]
        ),
        tags=args.tags,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[pool])),
    )
    return volume.mount_targets.apply(lambda targets: f"{targets[0].ip_address}:/{SHARE}")


def _lustre(name: str, args: StorageArgs, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    cluster = args.cluster
    assert args.storage_subnet_id is not None  # the network made Lustre's subnet
    filesystem = storagecache.AmlFilesystem(
        f"{name}-lustre",
        resource_group_name=args.resource_group_name,
        location=cluster.location,
        sku=storagecache.SkuNameArgs(name=cluster.storage.lustre_sku),
        storage_capacity_ti_b=cluster.storage.size_gib / 1024,
        filesystem_subnet=args.storage_subnet_id,
        maintenance_window=storagecache.AmlFilesystemMaintenanceWindowArgs(
            day_of_week=storagecache.MaintenanceDayOfWeekType.SUNDAY, time_of_day_utc="02:00"
        ),
        # Managed Lustre is zonal: in the nodes' zone, as Azure advises for its clients
        # (config refuses Lustre without dtrun:zone).
        zones=[cluster.zone],
        tags=args.tags,
        opts=opts,
    )
    return filesystem.client_info.apply(lambda info: f"{info.mgs_address}@tcp:/lustrefs")


BUILDERS: dict[StorageKind, Builder] = {
    StorageKind.AZURE_FILES: _azure_files,
    StorageKind.NETAPP: _netapp,
    StorageKind.LUSTRE: _lustre,
}


class SharedStorage(pulumi.ComponentResource):
    mount_source: pulumi.Output[str]  # what `mount` is given, e.g. HOST:/EXPORT

    def __init__(
        self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dtrun:azure:SharedStorage", name, None, opts)
        build = BUILDERS[args.cluster.storage.kind]
        self.mount_source = build(name, args, pulumi.ResourceOptions(parent=self))
        self.register_outputs({"mount_source": self.mount_source})
