"""Expiry's Azure side: a user-assigned identity for the head VM, a custom role with only the
actions the head's script calls, and one assignment of it, all scoped to this stack's resource
group and nothing wider (docs/azure.md "Expiry").

The script (infra/expiry_script.py) reads the group's tags, lists the group's scale sets and
deletes them, or deletes the group. The actions are named as Azure's resource provider
operations name them (learn.microsoft.com/azure/role-based-access-control/permissions/compute,
.../permissions/management-and-governance#microsoftresources). Deleting a group needs its delete
action "and delete for all resources in the resource group", whose children ARM deletes first
(learn.microsoft.com/azure/azure-resource-manager/management/delete-resource-group), so the
group role holds the delete of every resource type the program makes, and of the head's OS disk,
which Azure makes with the VM. tests/infra/test_expiry.py checks that list against the types the
program declares. Built-in roles were wider: Virtual Machine Contributor holds
Microsoft.Storage/storageAccounts/listKeys and the VMs' run-command; Contributor holds nearly all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import authorization, managedidentity

from dtrun.spec.cluster import ClusterSpec, ExpiryAction

READ_GROUP = "Microsoft.Resources/subscriptions/resourceGroups/read"  # the rules are its tags
SCALESET_ACTIONS = (
    READ_GROUP,
    "Microsoft.Compute/virtualMachineScaleSets/read",  # GET .../virtualMachineScaleSets
    "Microsoft.Compute/virtualMachineScaleSets/delete",
)
# Every resource type a stack holds, children first (as ARM deletes them).
GROUP_RESOURCE_TYPES = (
    "Microsoft.Compute/virtualMachineScaleSets",
    "Microsoft.Compute/virtualMachines",
    "Microsoft.Compute/disks",  # the head's OS disk
    "Microsoft.Compute/proximityPlacementGroups",
    "Microsoft.Network/networkInterfaces",
    "Microsoft.Network/publicIPAddresses",
    "Microsoft.Network/natGateways",
    "Microsoft.Network/virtualNetworks/subnets",
    "Microsoft.Network/virtualNetworks",
    "Microsoft.Network/networkSecurityGroups",
    "Microsoft.Storage/storageAccounts/fileServices/shares",
    "Microsoft.Storage/storageAccounts",
    "Microsoft.NetApp/netAppAccounts/capacityPools/volumes",
    "Microsoft.NetApp/netAppAccounts/capacityPools",
    "Microsoft.NetApp/netAppAccounts",
    "Microsoft.StorageCache/amlFilesystems",
    "Microsoft.ManagedIdentity/userAssignedIdentities",
)
DOES = {
    ExpiryAction.SCALESET: "reads the group's tags, lists and deletes its scale sets",
    ExpiryAction.GROUP: "reads the group's tags and deletes the group with all it holds",
}
ACTIONS: dict[ExpiryAction, tuple[str, ...]] = {
    ExpiryAction.SCALESET: SCALESET_ACTIONS,
    ExpiryAction.GROUP: (
        READ_GROUP,
        "Microsoft.Resources/subscriptions/resourceGroups/delete",
        *(f"{kind}/delete" for kind in GROUP_RESOURCE_TYPES),
    ),
}


@dataclass(frozen=True)
class ExpiryArgs:
    cluster: ClusterSpec
    resource_group_name: pulumi.Input[str]
    resource_group_id: pulumi.Output[str]  # /subscriptions/S/resourceGroups/G
    tags: dict[str, str]


def role_guid(group_id: str, action: ExpiryAction) -> str:
    """The custom role's name (a GUID): stable for one group and action, new when the action
    changes, so Pulumi makes the new role before it drops the old one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dtrun-expiry-role:{group_id}:{action.value}"))


def role_definition_id(group_id: str, guid: str) -> str:
    subscription = group_id.split("/resourceGroups/", 1)[0]  # /subscriptions/S
    return f"{subscription}/providers/Microsoft.Authorization/roleDefinitions/{guid}"


def assignment_name(group_id: str, principal_id: str, role: str) -> str:
    """A role assignment's name is a GUID; this one is stable for the same group, identity
    and role, and new when the role changes (so Pulumi creates the new one first)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dtrun-expiry:{group_id}:{principal_id}:{role}"))


class ExpiryIdentity(pulumi.ComponentResource):
    identity_id: pulumi.Output[str]  # for the head VM's identity block
    client_id: pulumi.Output[str]  # for the IMDS token request on the head

    def __init__(
        self, name: str, args: ExpiryArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dtrun:azure:ExpiryIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        action = args.cluster.expiry.action
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=args.resource_group_name,
            location=args.cluster.location,
            tags=args.tags,
            opts=child,
        )
        group_id = args.resource_group_id
        guid = group_id.apply(lambda gid: role_guid(gid, action))
        # Defined at the group and assignable there only; custom role names are unique in the
        # tenant, so the name carries the GUID.
        role = authorization.RoleDefinition(
            f"{name}-role-definition",
            scope=group_id,
            role_definition_id=guid,
            role_name=guid.apply(lambda g: f"dtrun expiry ({action.value}) {g}"),
            description=f"dtrun's expiry timer on the head: {DOES[action]}",
            role_type="CustomRole",
            permissions=[authorization.PermissionArgs(actions=list(ACTIONS[action]))],
            assignable_scopes=[group_id],
            opts=child,
        )
        authorization.RoleAssignment(
            f"{name}-role",
            principal_id=identity.principal_id,
            # A new identity may not have replicated through Entra ID yet; naming its type lets
            # ARM accept the assignment anyway (Azure's advice for new service principals).
            principal_type=authorization.PrincipalType.SERVICE_PRINCIPAL,
            # Through role.id, so the role exists first; in the subscription-level form that
            # role assignments name a role by, custom or built-in.
            role_definition_id=pulumi.Output.all(group_id, guid, role.id).apply(
                lambda v: role_definition_id(v[0], v[1])
            ),
            scope=group_id,  # this stack's resource group only
            role_assignment_name=pulumi.Output.all(group_id, identity.principal_id, guid).apply(
                lambda v: assignment_name(v[0], v[1], v[2])
            ),
            opts=child,
        )
        self.identity_id = identity.id
        self.client_id = identity.client_id
        self.register_outputs({"identity_id": self.identity_id, "client_id": self.client_id})
