"""The VNet: a head subnet reachable by SSH from the admin CIDRs only, a node subnet reachable
by SSH from the head and, on every port, from the nodes themselves, and the subnets shared
storage needs. Never overlaps 172.16.0.0/16. With Slurm, its ports are open between the head and
node subnets and closed to everything else.

An NSG on a subnet also filters traffic between the machines of that subnet (Azure's
network-security-group-how-it-works: "This includes intra-subnet traffic as well"), so the
nodes' deny rules would stop node -> node SSH without the explicit allow below
(tests/infra/reachability.py evaluates the rules as Azure does).

Outbound is explicit (docs/azure.md "Outbound"). The nodes need the internet at boot (apt, pip
into the shared environment) and have no public IP; Azure's implicit "default outbound access"
is being retired: subnets are private by default from network API 2025-07-01
(https://learn.microsoft.com/azure/virtual-network/ip-services/default-outbound-access, which
recommends a NAT gateway). So a NAT gateway with its own static public IP serves the nodes'
subnet (and Lustre's, whose file system reaches the AzureCloud service tag), the head goes out
through its own public IP, and every subnet with machines in it sets defaultOutboundAccess
false, so no machine depends on the implicit path on any API version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import network

from dtrun.azure.settingcheck import subnets
from dtrun.infra.slurm import SLURMCTLD_PORT, SLURMD_PORT
from dtrun.spec.cluster import ClusterSpec, Scheduler, StorageKind

WITHIN_NODES_PRIORITY = 200  # ahead of every deny rule
SSH_DENY_PRIORITY = 4096  # the lowest priority: evaluated after every allow rule
SLURM_ALLOW_PRIORITY = 3000  # after the SSH allows (100 + one per admin CIDR)
SLURM_DENY_PRIORITY = 4095
SLURM_PORTS = f"{SLURMCTLD_PORT}-{SLURMD_PORT}"  # slurmctld on the head, slurmd on the nodes


@dataclass(frozen=True)
class NetworkArgs:
    cluster: ClusterSpec
    resource_group_name: pulumi.Input[str]
    tags: dict[str, str]


def _inbound(
    name: str,
    priority: int,
    access: str,
    source: str,
    ports: str,
    protocol: str = "Tcp",
    destination: str = "*",
) -> network.SecurityRuleArgs:
    return network.SecurityRuleArgs(
        name=name,
        priority=priority,
        direction="Inbound",
        access=access,
        protocol=protocol,
        source_address_prefix=source,
        source_port_range="*",
        destination_address_prefix=destination,
        destination_port_range=ports,
    )


def _within_nodes(nodes_cidr: str) -> network.SecurityRuleArgs:
    """Every port and protocol from a node to a node: SSH for head-only launchers on node 0
    (mpirun, pdsh, horovodrun), the rendezvous and MASTER_PORT (--port, any port), and the
    ephemeral ports NCCL's bootstrap, gloo and MPI listen on. Only the nodes' own subnet."""
    return _inbound(
        "all-within-nodes", WITHIN_NODES_PRIORITY, "Allow", nodes_cidr, "*", "*", nodes_cidr
    )


def _ssh_rules(sources: list[str], allow_name: str) -> list[network.SecurityRuleArgs]:
    """Allow SSH from each source; deny it from everywhere else (the default rules would let
    every address in the VNet in)."""
    rules = [
        _inbound(f"{allow_name}-{index}", 100 + index, "Allow", source, "22")
        for index, source in enumerate(sources)
    ]
    rules.append(_inbound("deny-other-ssh", SSH_DENY_PRIORITY, "Deny", "*", "22"))
    return rules


def _slurm_rules(cluster: ClusterSpec) -> list[network.SecurityRuleArgs]:
    """slurmctld's and slurmd's ports from the head and node subnets only. The default
    AllowVnetInBound rule would admit every address the VNet reaches (peerings, gateways)."""
    if cluster.scheduler is not Scheduler.SLURM:
        return []
    cidrs = subnets(cluster.vnet_cidr)
    allows = [
        _inbound(f"slurm-from-{role}", SLURM_ALLOW_PRIORITY + index, "Allow", cidrs[role],
                 SLURM_PORTS)
        for index, role in enumerate(("head", "nodes"))
    ]  # fmt: skip
    return [*allows, _inbound("deny-other-slurm", SLURM_DENY_PRIORITY, "Deny", "*", SLURM_PORTS)]


def _nat_gateway(name: str, args: NetworkArgs, opts: pulumi.ResourceOptions) -> network.NatGateway:
    """The nodes' way out: a Standard NAT gateway (its only SKU) with one static Standard public
    IP, which takes no inbound connection (a NAT gateway is outbound only)."""
    group, location = args.resource_group_name, args.cluster.location
    address = network.PublicIPAddress(
        f"{name}-nat-ip",
        resource_group_name=group,
        location=location,
        sku=network.PublicIPAddressSkuArgs(name="Standard"),
        public_ip_allocation_method="Static",
        tags=args.tags,
        opts=opts,
    )
    return network.NatGateway(
        f"{name}-nat",
        resource_group_name=group,
        location=location,
        sku=network.NatGatewaySkuArgs(name="Standard"),
        public_ip_addresses=[network.SubResourceArgs(id=address.id)],
        tags=args.tags,
        opts=opts,
    )


class Network(pulumi.ComponentResource):
    head_subnet_id: pulumi.Output[str]
    nodes_subnet_id: pulumi.Output[str]
    storage_subnet_id: pulumi.Output[str] | None  # NetApp's delegated or Lustre's own subnet

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dtrun:azure:Network", name, None, opts)
        cluster = args.cluster
        child = pulumi.ResourceOptions(parent=self)
        cidrs = subnets(cluster.vnet_cidr)
        group, location = args.resource_group_name, cluster.location

        head_nsg = network.NetworkSecurityGroup(
            f"{name}-head-nsg",
            security_rules=[
                *_ssh_rules(list(cluster.admin_cidrs), "ssh-from-admin"),
                *_slurm_rules(cluster),
            ],
            tags=args.tags,
            resource_group_name=group,
            location=location,
            opts=child,
        )
        nodes_nsg = network.NetworkSecurityGroup(
            f"{name}-nodes-nsg",
            security_rules=[
                *_ssh_rules([cidrs["head"]], "ssh-from-head"),
                _within_nodes(cidrs["nodes"]),
                *_slurm_rules(cluster),
            ],
            tags=args.tags,
            resource_group_name=group,
            location=location,
            opts=child,
        )
        vnet = network.VirtualNetwork(
            f"{name}-vnet",
            address_space=network.AddressSpaceArgs(address_prefixes=[cluster.vnet_cidr]),
            tags=args.tags,
            resource_group_name=group,
            location=location,
            opts=child,
        )
        nat = _nat_gateway(name, args, child)
        # Azure Files NFS admits clients through the subnets' Microsoft.Storage endpoint.
        endpoints = (
            [network.ServiceEndpointPropertiesFormatArgs(service="Microsoft.Storage")]
            if cluster.storage.kind is StorageKind.AZURE_FILES
            else None
        )

        def subnet(role: str, after: pulumi.Resource, **props: Any) -> network.Subnet:
            # One subnet after the other: Azure rejects concurrent changes to one VNet.
            return network.Subnet(
                f"{name}-{role}",
                resource_group_name=group,
                virtual_network_name=vnet.name,
                address_prefix=cidrs[role],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[after]),
                **props,
            )

        through_nat = network.SubResourceArgs(id=nat.id)
        head = subnet(
            "head",
            vnet,
            network_security_group=network.NetworkSecurityGroupArgs(id=head_nsg.id),
            service_endpoints=endpoints,
            default_outbound_access=False,  # the head goes out through its own public IP
        )
        nodes = subnet(
            "nodes",
            head,
            network_security_group=network.NetworkSecurityGroupArgs(id=nodes_nsg.id),
            service_endpoints=endpoints,
            nat_gateway=through_nat,
            default_outbound_access=False,
        )
        self.head_subnet_id = head.id
        self.nodes_subnet_id = nodes.id
        self.storage_subnet_id = None
        if cluster.storage.kind is StorageKind.NETAPP:
            # The delegated subnet holds only the volume's NFS endpoint, which makes no
            # outbound connection: outbound there is left to Azure NetApp Files.
            delegation = network.DelegationArgs(
                name="netapp", service_name="Microsoft.NetApp/volumes"
            )
            self.storage_subnet_id = subnet("netapp", nodes, delegations=[delegation]).id
        elif cluster.storage.kind is StorageKind.LUSTRE:
            # Managed Lustre's servers reach the AzureCloud service tag from this subnet
            # (Azure Managed Lustre prerequisites, "Subnet access and permissions").
            self.storage_subnet_id = subnet(
                "lustre", nodes, nat_gateway=through_nat, default_outbound_access=False
            ).id
        self.register_outputs(
            {"head_subnet_id": self.head_subnet_id, "nodes_subnet_id": self.nodes_subnet_id}
        )
