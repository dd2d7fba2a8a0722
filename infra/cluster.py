"""The GPU nodes: one scale set, shaped so InfiniBand connects all of them (docs/facts.md §3-4)."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute

from dtrun.azure.catalog import SIZES
from dtrun.infra.machines import MachineArgs, image_reference, linux_keys_only


class GpuCluster(pulumi.ComponentResource):
    scale_set_name: pulumi.Output[str]
    # When Azure created the scale set (its timeCreated): where the nodes' paid time begins,
    # for the report's time paid before a sweep (docs/report.md "Cost").
    created_at: pulumi.Output[str]

    def __init__(
        self, name: str, args: MachineArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dtrun:azure:GpuCluster", name, None, opts)
        cluster = args.cluster
        size = SIZES[cluster.vm_size]
        child = pulumi.ResourceOptions(parent=self)
        # dtrun:zone puts the nodes (and Lustre, docs/azure.md) in one availability zone;
        # empty leaves the placement to Azure.
        zones = [cluster.zone] if cluster.zone else None
        placement = compute.ProximityPlacementGroup(
            f"{name}-ppg",
            resource_group_name=args.resource_group_name,
            location=cluster.location,
            proximity_placement_group_type="Standard",
            zones=zones,
            tags=args.tags,
            opts=child,
        )
        spot = (
            {
                "priority": "Spot",
                "eviction_policy": "Delete",
                "billing_profile": compute.BillingProfileArgs(max_price=cluster.spot_max_price),
            }
            if cluster.spot
            else {"priority": "Regular"}
        )
        scale_set = compute.VirtualMachineScaleSet(
            f"{name}-vmss",
            resource_group_name=args.resource_group_name,
            location=cluster.location,
            sku=compute.SkuArgs(name=size.name, tier="Standard", capacity=cluster.node_count),
            zones=zones,
            # InfiniBand joins only the VMs of one Uniform scale set in one placement group.
            orchestration_mode="Uniform",
            single_placement_group=True,
            # Extra VMs would join the IB fabric and then vanish; one fault domain keeps the
            # set on one fabric (common practice, docs/facts.md §3).
            overprovision=False,
            platform_fault_domain_count=1,
            proximity_placement_group=compute.SubResourceArgs(id=placement.id),
            upgrade_policy=compute.UpgradePolicyArgs(mode=compute.UpgradeMode.MANUAL),
            virtual_machine_profile=compute.VirtualMachineScaleSetVMProfileArgs(
                os_profile=compute.VirtualMachineScaleSetOSProfileArgs(
                    computer_name_prefix=f"{cluster.name_prefix}node",
                    admin_username=cluster.admin_user,
                    custom_data=args.custom_data,
                    linux_configuration=linux_keys_only(cluster.admin_user, args.admin_public_key),
                ),
                storage_profile=compute.VirtualMachineScaleSetStorageProfileArgs(
                    image_reference=image_reference(cluster.image),
                    os_disk=compute.VirtualMachineScaleSetOSDiskArgs(
                        create_option="FromImage",
                        caching=compute.CachingTypes.READ_WRITE,
                        managed_disk=compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                            storage_account_type="Premium_LRS"
                        ),
                    ),
                ),
                network_profile=compute.VirtualMachineScaleSetNetworkProfileArgs(
                    network_interface_configurations=[
                        compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                            name="nic",
                            primary=True,
                            # Only where the size supports it (docs/facts.md §1): NCv3 does not.
                            enable_accelerated_networking=size.accelerated_networking,
                            # No public IP configuration: nodes are reached through the head.
                            ip_configurations=[
                                compute.VirtualMachineScaleSetIPConfigurationArgs(
                                    name="ipconfig",
                                    primary=True,
                                    subnet=compute.ApiEntityReferenceArgs(id=args.subnet_id),
                                )
                            ],
                        )
                    ]
                ),
                **spot,
            ),
            tags=args.tags,
            opts=child,
        )
        self.scale_set_name = scale_set.name
        self.created_at = scale_set.time_created
        self.register_outputs(
            {"scale_set_name": self.scale_set_name, "created_at": self.created_at}
        )
