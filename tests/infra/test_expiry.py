"""Expiry under Pulumi mocks: the head's identity may delete in this stack's group only, with a
custom role holding only what the expiry script calls; the timer and its script ride in the head's
cloud-init; the rules are the group's tags; nothing of it grows with the node count."""

from __future__ import annotations

import datetime
import json
from functools import cache

import pytest
import yaml

from dtrun.azure.config import cluster_spec
from dtrun.azure.expiry import TAG_ACTION, TAG_EXPIRES_AT, TAG_IDLE_MINUTES, parse_iso
from dtrun.infra.cloudinit import EXPIRY_SCRIPT
from dtrun.infra.expiry import ACTIONS, GROUP_RESOURCE_TYPES, role_guid
from dtrun.spec.cluster import ClusterSpec, ExpiryAction
from tests.infra.azure_models import arm_type
from tests.infra.harness import (
    IDENTITY_CLIENT_ID,
    IDENTITY_PRINCIPAL_ID,
    SUBSCRIPTION,
    Program,
    run,
)

TODAY = datetime.date(2026, 11, 23)
GROUP_ID = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/dtrun-rgmock"
SETTINGS_OF_EVERY_KIND: tuple[dict[str, object], ...] = (
    {},
    {"storageKind": "netapp", "storageSizeGib": 4096},
    {"storageKind": "lustre", "storageSizeGib": 8192, "zone": "1"},
    {"scheduler": "slurm", "spot": True},
)


def cluster(**settings: object) -> ClusterSpec:
    return cluster_spec({"adminCidrs": ["203.0.113.4/32"], **settings}, today=TODAY)


@cache
def program(spec: ClusterSpec) -> Program:
    return run(spec)


def head_files(p: Program) -> dict[str, str]:
    document = yaml.safe_load(p.cloud_init(":VirtualMachine"))
    return {item["path"]: item["content"] for item in document["write_files"]}


def group_tags(p: Program) -> dict[str, str]:
    return dict(p.one(":ResourceGroup").inputs["tags"])


@pytest.mark.parametrize("action", ["scaleset", "group"])
def test_the_identity_has_one_custom_role_defined_and_assigned_on_this_group_only(action):
    p = program(cluster(expiryAction=action))
    [definition] = p.of_type(":RoleDefinition")
    guid = role_guid(GROUP_ID, ExpiryAction(action))
    role = definition.inputs
    assert (role["scope"], role["assignableScopes"]) == (GROUP_ID, [GROUP_ID])
    assert (role["roleDefinitionId"], role["roleType"]) == (guid, "CustomRole")
    assert role["roleName"] == f"dtrun expiry ({action}) {guid}"
    [permission] = role["permissions"]
    assert permission == {"actions": list(ACTIONS[ExpiryAction(action)])}
    [assignment] = p.of_type(":RoleAssignment")
    inputs = assignment.inputs
    assert inputs["scope"] == GROUP_ID  # the group itself: not the subscription, not wider
    assert inputs["roleDefinitionId"] == (
        f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/{guid}"
    )
    assert inputs["principalId"] == IDENTITY_PRINCIPAL_ID
    assert inputs["principalType"] == "ServicePrincipal"
    identity = p.one(":UserAssignedIdentity")
    assert identity.inputs["resourceGroupName"] == "dtrun-rgmock"


def test_the_scaleset_role_holds_exactly_what_the_script_calls():
    """GET the group (its tags), GET its scale sets, DELETE each: infra/expiry_script.py."""
    assert set(ACTIONS[ExpiryAction.SCALESET]) == {
        "Microsoft.Resources/subscriptions/resourceGroups/read",
        "Microsoft.Compute/virtualMachineScaleSets/read",
        "Microsoft.Compute/virtualMachineScaleSets/delete",
    }


def test_no_role_can_read_storage_keys_run_commands_or_grant_access():
    """What Virtual Machine Contributor and Contributor held and expiry never needs."""
    for actions in ACTIONS.values():
        for action in actions:
            assert action.rsplit("/", 1)[1] in {"read", "delete"}, action
            assert not action.startswith("Microsoft.Authorization/"), action
            assert "*" not in action, action


def test_the_group_role_deletes_every_resource_type_the_program_makes():
    """Deleting a group needs "delete for all resources in the resource group" (Azure's
    delete-resource-group page): every type the program declares, read from the SDK's URL."""
    declared = {
        kind
        for settings in SETTINGS_OF_EVERY_KIND
        for resource in program(cluster(expiryAction="group", **settings)).resources
        if resource.type.startswith("azure-native:")
        and (kind := arm_type(resource.type)) is not None
    }
    assert declared <= set(GROUP_RESOURCE_TYPES)
    # and no type the program does not make, but the head's OS disk, which Azure makes
    assert set(GROUP_RESOURCE_TYPES) - declared == {"Microsoft.Compute/disks"}
    group = set(ACTIONS[ExpiryAction.GROUP])
    assert {f"{kind}/delete" for kind in GROUP_RESOURCE_TYPES} <= group
    assert "Microsoft.Resources/subscriptions/resourceGroups/delete" in group


def test_the_role_assignment_is_named_anew_when_the_role_changes():
    names = {
        action: program(cluster(expiryAction=action))
        .one(":RoleAssignment")
        .inputs["roleAssignmentName"]
        for action in ("scaleset", "group")
    }
    assert len(set(names.values())) == 2
    assert (
        names["scaleset"] == program(cluster()).one(":RoleAssignment").inputs["roleAssignmentName"]
    )


def test_only_the_head_carries_the_identity():
    p = program(cluster())
    head = p.one(":VirtualMachine").inputs
    assert head["identity"]["type"] == "UserAssigned"
    [identity_id] = head["identity"]["userAssignedIdentities"]
    assert identity_id.endswith("UserAssignedIdentity/expiry-identity")
    vmss = p.one(":VirtualMachineScaleSet").inputs
    assert "identity" not in vmss


def test_the_timer_its_service_and_the_script_are_in_the_head_cloud_init_and_not_the_nodes():
    p = program(cluster())
    files = head_files(p)
    assert files["/usr/local/sbin/dtrun-expiry"] == EXPIRY_SCRIPT.read_text()
    assert json.loads(files["/etc/dtrun/expiry.json"]) == {
        "group_id": GROUP_ID,
        "client_id": IDENTITY_CLIENT_ID,
    }
    timer = files["/etc/systemd/system/dtrun-expiry.timer"]
    assert "OnUnitActiveSec=1min" in timer
    assert "WantedBy=timers.target" in timer
    service = files["/etc/systemd/system/dtrun-expiry.service"]
    assert "ExecStart=/usr/bin/python3 /usr/local/sbin/dtrun-expiry" in service
    assert "ClientAliveInterval 60" in files["/etc/ssh/sshd_config.d/dtrun-client-alive.conf"]
    runcmd = yaml.safe_load(p.cloud_init(":VirtualMachine"))["runcmd"]
    assert runcmd[0] == ["systemctl", "enable", "--now", "dtrun-expiry.timer"]
    node = p.cloud_init(":VirtualMachineScaleSet")
    assert "dtrun-expiry" not in node


def test_the_group_carries_the_deadline_ttl_hours_from_now_and_the_idle_rule():
    before = datetime.datetime.now(datetime.UTC)
    p = run(cluster(ttlHours=5, idleMinutes=30))
    tags = group_tags(p)
    deadline = parse_iso(tags[TAG_EXPIRES_AT], "tag")
    assert before + datetime.timedelta(hours=5) - datetime.timedelta(seconds=1) <= deadline
    assert deadline <= datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=5)
    assert (tags[TAG_IDLE_MINUTES], tags[TAG_ACTION]) == ("30", "scaleset")
    assert p.outputs["expires_at"] == tags[TAG_EXPIRES_AT]
    assert (p.outputs["idle_minutes"], p.outputs["expiry_action"]) == (30, "scaleset")


def test_the_deadline_dtrun_wrote_is_the_tag_and_only_the_group_has_it():
    p = program(cluster(expiresAt="2026-11-24T02:00:00+00:00"))
    assert group_tags(p)[TAG_EXPIRES_AT] == "2026-11-24T02:00:00Z"
    others = [
        r for r in p.resources if "tags" in r.inputs and r.type != p.one(":ResourceGroup").type
    ]
    assert others
    assert not [r.name for r in others if TAG_EXPIRES_AT in r.inputs["tags"]]


def test_ttl_0_drops_the_deadline_but_keeps_the_idle_rule():
    p = program(cluster(ttlHours=0, expiresAt="2026-11-24T02:00:00Z"))
    assert TAG_EXPIRES_AT not in group_tags(p)
    assert group_tags(p)[TAG_IDLE_MINUTES] == "60"
    assert p.outputs["expires_at"] is None
    assert len(p.of_type(":RoleAssignment")) == 1


def test_with_both_rules_off_there_is_no_identity_no_role_no_timer_and_no_tag():
    p = program(cluster(ttlHours=0, idleMinutes=0))
    assert not p.of_type(":UserAssignedIdentity")
    assert not p.of_type(":RoleAssignment")
    assert "identity" not in p.one(":VirtualMachine").inputs
    assert "/usr/local/sbin/dtrun-expiry" not in head_files(p)
    assert not {TAG_EXPIRES_AT, TAG_IDLE_MINUTES, TAG_ACTION} & set(group_tags(p))
    assert (p.outputs["expires_at"], p.outputs["expiry_action"]) == (None, None)


def test_expiry_adds_three_resources_whatever_the_node_count():
    added = {
        nodes: len(program(cluster(nodeCount=nodes)).resources)
        - len(program(cluster(nodeCount=nodes, ttlHours=0, idleMinutes=0)).resources)
        for nodes in (2, 100)
    }
    assert added == {2: 3, 100: 3}  # the identity, its role and the role's assignment
