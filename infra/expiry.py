"""Expiry's Azure side: a user-assigned identity for the head VM and one role assignment for it,
scoped to this stack's resource group and nothing wider (docs/azure.md "Expiry").

The role is the narrowest built-in one that can delete what dtrun:expiryAction names (Azure's
built-in roles: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles):

- scaleset: Virtual Machine Contributor. Its actions hold
  Microsoft.Compute/virtualMachineScaleSets/* (list and delete) and
  Microsoft.Resources/subscriptions/resourceGroups/read (the group's tags), and nothing over
  storage, identities or access. The read-only roles cannot delete a scale set.
- group: Contributor. Deleting a resource group takes
  Microsoft.Resources/subscriptions/resourceGroups/delete and the delete of everything in it;
  no narrower built-in role holds both. Contributor cannot assign roles (its NotActions hold
  Microsoft.Authorization/*/Write and */Delete), so the identity cannot widen its own reach.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import authorization, managedidentity

from runner.spec.cluster import ClusterSpec, ExpiryAction


@dataclass(frozen=True)
class Role:
    name: str
    id: str  # the built-in role definition's GUID, the same in every subscription


ROLES: dict[ExpiryAction, Role] = {
    ExpiryAction.SCALESET: Role(
        "Virtual Machine Contributor", "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
    ),
    ExpiryAction.GROUP: Role("Contributor", "b24988ac-6180-42a0-ab88-20f7382dd24c"),
}


@dataclass(frozen=True)
class ExpiryArgs:
    cluster: ClusterSpec
    resource_group_name: pulumi.Input[str]
    resource_group_id: pulumi.Output[str]  # /subscriptions/S/resourceGroups/G
    tags: dict[str, str]


def role_definition_id(group_id: str, role: Role) -> str:
    subscription = group_id.split("/resourceGroups/", 1)[0]  # /subscriptions/S
    return f"{subscription}/providers/Microsoft.Authorization/roleDefinitions/{role.id}"


def assignment_name(group_id: str, principal_id: str, role: Role) -> str:
    """A role assignment's name is a GUID; this one is stable for the same group, identity
    and role, and new when the role changes (so Pulumi creates the new one first)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dtrun-expiry:{group_id}:{principal_id}:{role.id}"))


class ExpiryIdentity(pulumi.ComponentResource):
    identity_id: pulumi.Output[str]  # for the head VM's identity block
    client_id: pulumi.Output[str]  # for the IMDS token request on the head

    def __init__(
        self, name: str, args: ExpiryArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("dtrun:azure:ExpiryIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = ROLES[args.cluster.expiry.action]
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_group_name=args.resource_group_name,
            location=args.cluster.location,
            tags=args.tags,
            opts=child,
        )
        group_id = args.resource_group_id
        authorization.RoleAssignment(
            f"{name}-role",
            principal_id=identity.principal_id,
            # A new identity may not have replicated through Entra ID yet; naming its type lets
            # ARM accept the assignment anyway (Azure's advice for new service principals).
            principal_type=authorization.PrincipalType.SERVICE_PRINCIPAL,
            role_definition_id=group_id.apply(lambda gid: role_definition_id(gid, role)),
            scope=group_id,  # this stack's resource group only
            role_assignment_name=pulumi.Output.all(group_id, identity.principal_id).apply(
                lambda v: assignment_name(v[0], v[1], role)
            ),
            opts=child,
        )
        self.identity_id = identity.id
        self.client_id = identity.client_id
        self.register_outputs({"identity_id": self.identity_id, "client_id": self.client_id})
