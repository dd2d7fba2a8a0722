"""Stack outputs (contract versions 1 to 4) and node registry entries -> Inventory."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest

from dtrun.azure.config import cluster_spec
from dtrun.cluster.outputs import (
    OUTPUTS_VERSION,
    OutputsError,
    inventory_from_stack,
    parse_outputs,
    parse_registry_entry,
)
from dtrun.spec.cluster import Accelerator
from tests.paths import TESTS

DATA = TESTS / "data"
RECORDED = sorted((DATA / "outputs").glob("v*.json"))
# Keys each version added; a version N file has every key of the program's outputs but those
# added after N.
ADDED = {
    2: {"scheduler", "slurm_partition"},
    3: {"expires_at", "idle_minutes", "expiry_action"},
    4: {"nodes_created_at"},
}


def load(name):
    return json.loads((DATA / "outputs" / name).read_text())


def registry():
    return [
        parse_registry_entry(json.loads(path.read_text()), path.name)
        for path in sorted((DATA / "registry").glob("*.json"))
    ]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_every_recorded_file_parses_as_its_version(path):
    data = json.loads(path.read_text())
    outputs = parse_outputs(data, path.name)
    assert outputs.version == data["version"] == int(path.name[1])
    assert outputs.known_hosts


def test_a_version_1_stack_has_no_scheduler_and_a_version_2_stack_says_slurm():
    old = parse_outputs(load("v1-h100-azurefiles-generated-key.json"), "v1")
    assert (old.scheduler, old.slurm_partition) == ("none", None)
    new = parse_outputs(load("v2-h100-azurefiles-slurm.json"), "v2")
    assert (new.version, new.scheduler, new.slurm_partition) == (2, "slurm", "nodes")
    assert inventory_from_stack("dev", new, registry()).nodes == (
        inventory_from_stack("dev", old, registry()).nodes
    )


def test_a_version_4_stack_says_when_its_nodes_were_created_and_the_inventory_keeps_it():
    outputs = parse_outputs(load("v4-h100-azurefiles-created.json"), "v4")
    assert outputs.nodes_created_at == "2026-11-23T09:58:41.4632871+00:00"
    inventory = inventory_from_stack("bench", outputs, registry())
    assert inventory.nodes_created_at == outputs.nodes_created_at
    # older stacks do not know it; nor does a v4 file whose provider left it null
    assert parse_outputs(load("v3-h100-azurefiles-expiry.json"), "v3").nodes_created_at is None
    unknown = load("v4-h100-azurefiles-created.json") | {"nodes_created_at": None}
    assert parse_outputs(unknown, "v4").nodes_created_at is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", "nodes_created_at is 'yesterday', not an ISO 8601 time with its zone"),
        ("2026-11-23T09:58:41", "not an ISO 8601 time with its zone"),
        (1732355921, "'nodes_created_at' is 1732355921, not a time or null"),
    ],
)
def test_a_bad_version_4_creation_time_is_named(value, message):
    data = load("v4-h100-azurefiles-created.json") | {"nodes_created_at": value}
    with pytest.raises(OutputsError, match=message):
        parse_outputs(data, "outputs.json")
    del data["nodes_created_at"]
    with pytest.raises(OutputsError, match="has no 'nodes_created_at'"):
        parse_outputs(data, "outputs.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scheduler": "pbs"}, "'scheduler' is 'pbs', not one of none, slurm"),
        ({"slurm_partition": None}, "Slurm stack's 'slurm_partition' is None"),
        ({"scheduler": "none"}, "'slurm_partition' is 'nodes' without Slurm"),
    ],
)
def test_a_bad_version_2_scheduler_is_named(change, message):
    with pytest.raises(OutputsError, match=message):
        parse_outputs(load("v2-h100-azurefiles-slurm.json") | change, "outputs.json")
    data = load("v2-h100-azurefiles-slurm.json")
    del data["scheduler"]
    with pytest.raises(OutputsError, match="has no 'scheduler'"):
        parse_outputs(data, "outputs.json")


def test_the_program_exports_exactly_the_recorded_contract():
    """Guards the contract: a key dropped or changed in infra/ must be a new version; one added
    must be optional for readers (like ssh_port and image) and recorded here."""
    from tests.infra.harness import SCALE_SET_CREATED, run

    exported = run(
        cluster_spec({"adminCidrs": ["203.0.113.4/32"]}, today=datetime.date(2026, 11, 23))
    ).outputs
    assert exported["version"] == OUTPUTS_VERSION == 4
    for path in RECORDED:
        recorded = json.loads(path.read_text())
        later = [keys for version, keys in ADDED.items() if version > recorded["version"]]
        assert set(recorded) == set(exported).difference(*later), path.name
    parsed = parse_outputs(exported, "program")
    assert parsed.python_bin == "/shared/.dtrun/venv/bin"
    assert (parsed.scheduler, parsed.slurm_partition) == ("none", None)
    assert (parsed.idle_minutes, parsed.expiry_action) == (60, "scaleset")
    assert parsed.expires_at is not None and parsed.expires_at.endswith("Z")
    # the scale set's own timeCreated, as Azure answers it (the mock's), not the program's clock
    assert parsed.nodes_created_at == SCALE_SET_CREATED


def test_a_version_3_stack_says_when_it_expires_and_older_ones_have_no_expiry():
    new = parse_outputs(load("v3-h100-azurefiles-expiry.json"), "v3")
    assert (new.expires_at, new.idle_minutes, new.expiry_action) == (
        "2026-11-23T22:05:00Z", 60, "scaleset",
    )  # fmt: skip
    old = parse_outputs(load("v2-h100-azurefiles-slurm.json"), "v2")
    assert (old.expires_at, old.idle_minutes, old.expiry_action) == (None, 0, None)
    off = parse_outputs(
        load("v3-h100-azurefiles-expiry.json")
        | {"expires_at": None, "idle_minutes": 0, "expiry_action": None},
        "v3",
    )
    assert off.expires_at is None and off.expiry_action is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expires_at": "tomorrow"}, "'tomorrow', not an ISO 8601 time"),
        ({"expires_at": 5}, "'expires_at' is 5, not a time or null"),
        ({"idle_minutes": "60"}, "'idle_minutes' is '60', not a whole number"),
        # printed as "after -1 min without a launch"; `dtrun up` sets 0 (none) to 30 days
        ({"idle_minutes": -1}, "'idle_minutes' is -1, not a count from 0 to 43200"),
        ({"idle_minutes": 10**9}, "'idle_minutes' is 1,000,000,000, not a count from 0 to"),
        ({"expiry_action": "vm"}, "'expiry_action' is 'vm', not one of scaleset, group"),
    ],
)
def test_a_bad_version_3_expiry_is_named(change, message):
    with pytest.raises(OutputsError, match=message):
        parse_outputs(load("v3-h100-azurefiles-expiry.json") | change, "outputs.json")


def test_outputs_without_the_optional_keys_still_parse():
    data = load("v1-h100-azurefiles-generated-key.json")
    del data["image"], data["ssh_port"]
    outputs = parse_outputs(data, "older")
    assert outputs.image is None and outputs.ssh_port == 22
    assert inventory_from_stack("dev", outputs, registry()).image is None
    data["image"] = 7
    with pytest.raises(OutputsError, match="'image' is 7, not an image URN"):
        parse_outputs(data, "bad")


def test_an_inventory_holds_the_registered_nodes_in_address_order():
    outputs = parse_outputs(load("v1-h100-azurefiles-generated-key.json"), "recorded")
    inventory = inventory_from_stack("dev", outputs, registry())
    assert inventory.source == "stack:dev"
    assert [(n.name, n.address) for n in inventory.nodes] == [
        ("node-0", "10.42.1.4"),
        ("node-1", "10.42.1.5"),
        ("node-2", "10.42.1.6"),
        ("node-3", "10.42.1.10"),
    ]
    assert {n.slots for n in inventory.nodes} == {8}
    assert {n.cpus for n in inventory.nodes} == {96}
    assert inventory.accelerator is Accelerator.CUDA
    assert inventory.size == "Standard_ND96isr_H100_v5"
    assert inventory.python_bin == "/shared/.dtrun/venv/bin"
    assert inventory.code_dir == "/shared/.dtrun/code"
    assert inventory.shared_dir == "/shared"


def test_nodes_are_reached_through_the_head_with_strict_host_keys():
    outputs = parse_outputs(load("v1-h100-azurefiles-generated-key.json"), "recorded")
    ssh = inventory_from_stack("dev", outputs, registry()).ssh
    assert ssh is not None
    assert (ssh.user, ssh.jump_host) == ("azureuser", "20.0.113.10")
    assert ssh.known_hosts[1].startswith("10.42.1.* ssh-ed25519 ")
    assert ssh.private_key and ssh.private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY")
    assert "PRIVATE KEY" not in repr(ssh)
    assert "PRIVATE KEY" not in repr(inventory_from_stack("dev", outputs).redacted())


def test_a_cluster_with_its_own_key_has_no_private_key_and_cpu_nodes_run_on_cpu():
    outputs = parse_outputs(load("v1-hb176-lustre-own-key.json"), "recorded")
    inventory = inventory_from_stack("hpc", outputs)
    assert outputs.ssh_private_key is None
    assert inventory.accelerator is Accelerator.CPU
    assert inventory.nodes == ()
    assert outputs.storage_kind == "lustre"


def test_registry_entries_say_when_a_node_is_ready():
    entry = registry()[1]
    assert entry.ready
    degraded = json.loads((DATA / "registry" / "dtrunnode000000.json").read_text())
    degraded["infiniband"] = "degraded"
    assert not parse_registry_entry(degraded, "x").ready


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 5}, "made by a newer dtrun"),
        ({"version": None}, "it has no 'version' field"),
        ({"node_count": "four"}, "'node_count' is 'four', not a whole number"),
        ({"node_count": True}, "not a whole number"),
        ({"ssh_private_key": "[secret]"}, "masked as [secret]"),
        ({"known_hosts": ["10.42.1.*"]}, "not 'HOSTS TYPE KEY'"),
        ({"node_count": 0}, "'node_count' is 0, not a count from 1 to 300"),
        ({"node_count": -3}, "'node_count' is -3, not a count from 1 to 300"),
        ({"node_count": 10**30}, "'node_count' is 1,000,000,000,000,000,000,000,000,000,000"),
        ({"gpus_per_node": -8}, "'gpus_per_node' is -8, not a count from 0 to 64"),
    ],
)
def test_bad_outputs_name_the_field(change, message):
    data = load("v1-h100-azurefiles-generated-key.json") | change
    with pytest.raises(OutputsError, match=message.replace("[", r"\[")):
        parse_outputs(data, "outputs.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mount_path": "shared"}, "'mount_path' is not an absolute path"),
        ({"python_bin": "venv/bin"}, "'python_bin' is not an absolute path"),
        ({"mount_path": "/shared:lib"}, "'mount_path' holds ':', which splits PYTHONPATH"),
        ({"python_bin": "/opt/a:b/bin"}, "'python_bin' holds ':', which splits PYTHONPATH"),
    ],
)
def test_a_node_directory_the_hosts_file_refuses_is_refused_in_outputs_too(change, message):
    """The inventory's code directory, shared directory and Python, as a hosts file's `shared`
    and `python`: a relative one, or one whose ':' splits the nodes' PYTHONPATH, would have the
    nodes import from whatever folder their scripts run in."""
    data = load("v4-h100-azurefiles-created.json") | change
    with pytest.raises(OutputsError, match=message):
        parse_outputs(data, "outputs.json")


def test_a_missing_field_is_named_with_the_command_to_fix_it():
    data = load("v1-h100-azurefiles-generated-key.json")
    del data["python_bin"]
    with pytest.raises(OutputsError, match="has no 'python_bin'") as caught:
        parse_outputs(data, "outputs.json")
    assert "dtrun outputs --stack NAME --save FILE" in caught.value.message


def test_registry_entries_of_another_schema_or_with_bad_addresses_are_refused():
    entry = json.loads((DATA / "registry" / "dtrunnode000000.json").read_text())
    with pytest.raises(OutputsError, match="not a dtrun node registry entry"):
        parse_registry_entry(entry | {"schema": "other"}, "n.json")
    with pytest.raises(OutputsError, match="not an IP address"):
        parse_registry_entry(entry | {"address": "node-0"}, "n.json")
    with pytest.raises(OutputsError, match="'gpus' is -1, not a count from 0 to 64"):
        parse_registry_entry(entry | {"gpus": -1}, "n.json")


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1"])
def test_a_registry_address_no_single_node_can_have_is_refused(address):
    entry = json.loads((DATA / "registry" / "dtrunnode000000.json").read_text())
    with pytest.raises(OutputsError, match="which no single node can have"):
        parse_registry_entry(entry | {"address": address}, "n.json")


def test_two_registry_entries_with_one_address_are_refused_naming_both():
    outputs = parse_outputs(load("v1-h100-azurefiles-generated-key.json"), "recorded")
    first = next(entry for entry in registry() if entry.role == "node")
    stale = dataclasses.replace(first, hostname="dtrunnode00000z")
    with pytest.raises(OutputsError, match="both registered the address") as caught:
        inventory_from_stack("dev", outputs, [*registry(), stale])
    assert {first.hostname, "dtrunnode00000z"} <= set(caught.value.message.split())


@pytest.mark.parametrize("version", [True, False])
def test_a_version_of_true_or_false_is_no_version(version):
    """true == 1 to Python: `"version": true` was read as a version 1 stack."""
    with pytest.raises(OutputsError, match=f"holds stack outputs version {version!r}"):
        parse_outputs(load("v1-h100-azurefiles-generated-key.json") | {"version": version}, "o")
