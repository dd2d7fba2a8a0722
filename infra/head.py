"""The head VM: the only machine with a public IP, SSH jump host to the nodes."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute, network

from dtrun.infra.machines import MachineArgs, image_reference, linux_keys_only

CUSTOM_DATA_PATH = "osProfile.customData"  # the VM's input property, as Pulumi paths name it


class HeadNode(pulumi.ComponentResource):
    public_address: pulumi.Output[str]
    private_address: pulumi.Output[str]

    def __init__(
        self, name: str, args: MachineArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dtrun:azure:HeadNode", name, None, opts)
        cluster = args.cluster
        child = pulumi.ResourceOptions(parent=self)
        ip = network.PublicIPAddress(
            f"{name}-ip",
            resource_group_name=args.resource_group_name,
            location=cluster.location,
            sku=network.PublicIPAddressSkuArgs(name="Standard"),  # closed unless an NSG allows
            public_ip_allocation_method="Static",
            tags=args.tags,
            opts=child,
        )
        nic = network.NetworkInterface(
            f"{name}-nic",
            resource_group_name=args.resource_group_name,
            location=cluster.location,
            ip_configurations=[
                network.NetworkInterfaceIPConfigurationArgs(
                    name="primary",
                    primary=True,
                    subnet=network.SubnetArgs(id=args.subnet_id),
                    public_ip_address=network.PublicIPAddressArgs(id=ip.id),
                    private_ip_allocation_method="Dynamic",
                )
            ],
            tags=args.tags,
            opts=child,
        )
        compute.VirtualMachine(
            f"{name}-vm",
            resource_group_name=args.resource_group_name,
            location=cluster.location,
            hardware_profile=compute.HardwareProfileArgs(vm_size=cluster.head_vm_size),
            os_profile=compute.OSProfileArgs(
                computer_name=f"{cluster.name_prefix}-head",
                admin_username=cluster.admin_user,
                custom_data=args.custom_data,
                linux_configuration=linux_keys_only(cluster.admin_user, args.admin_public_key),
            ),
            storage_profile=compute.StorageProfileArgs(
                image_reference=image_reference(cluster.image),
                os_disk=compute.OSDiskArgs(
                    create_option="FromImage",
                    delete_option="Delete",
                    managed_disk=compute.ManagedDiskParametersArgs(
                        storage_account_type="Premium_LRS"
                    ),
                ),
            ),
            network_profile=compute.NetworkProfileArgs(
                network_interfaces=[compute.NetworkInterfaceReferenceArgs(id=nic.id, primary=True)]
            ),
            # Expiry's identity: the head's timer takes its tokens from IMDS (docs/azure.md).
            identity=compute.VirtualMachineIdentityArgs(
                type=compute.ResourceIdentityType.USER_ASSIGNED,
                user_assigned_identities=[args.identity_id],
            )
            if args.identity_id is not None
            else None,
            tags=args.tags,
            # Azure cannot change a single VM's custom data ("For single VMs, you can't update
            # custom data": Microsoft Learn, custom-data). What changes with nodeCount,
            # pythonPackages or the expiry action stays out of it (docs/azure.md "What an
            # update changes"); any other change to it is a new head, shown as a replacement.
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=[CUSTOM_DATA_PATH]),
        )
        self.public_address = ip.ip_address.apply(lambda address: address or "")
        self.private_address = nic.ip_configurations.apply(
            lambda configs: (configs or [])[0].private_ip_address or ""
        )
        self.register_outputs(
            {"public_address": self.public_address, "private_address": self.private_address}
        )
