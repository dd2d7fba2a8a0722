"""The Pulumi program under mocks: the properties that make InfiniBand work and keep it safe."""

from __future__ import annotations

import datetime
import ipaddress
from functools import cache

import pytest
import yaml

from dtrun.azure.catalog import SIZES, known_sizes
from dtrun.azure.config import cluster_spec
from dtrun.azure.settingcheck import RDMA_NETWORK, ConfigError
from dtrun.infra.cloudinit import MOUNTS
from dtrun.spec.cluster import ClusterSpec, StorageKind
from tests.infra.harness import SCALE_SET_CREATED, Program, run

TODAY = datetime.date(2026, 11, 23)
ADMIN = "203.0.113.4/32"
OPEN_TO_ALL = {"*", "0.0.0.0/0", "::/0", "internet", "any"}
STORAGE = {
    StorageKind.AZURE_FILES: {},
    StorageKind.NETAPP: {"storageKind": "netapp", "storageSizeGib": 4096},
    StorageKind.LUSTRE: {"storageKind": "lustre", "storageSizeGib": 8192, "zone": "1"},
}


def cluster(**settings: object) -> ClusterSpec:
    return cluster_spec({"adminCidrs": [ADMIN], **settings}, today=TODAY)


@cache
def program(spec: ClusterSpec) -> Program:
    return run(spec)


def scale_set(p: Program):
    return p.one(":VirtualMachineScaleSet").inputs


def node_cloud_init(p: Program):
    return yaml.safe_load(p.cloud_init(":VirtualMachineScaleSet"))


def written(document, path):
    return next(item["content"] for item in document["write_files"] if item["path"] == path)


@pytest.mark.parametrize("size", known_sizes(TODAY))
def test_every_size_family_gets_an_infiniband_scale_set(size):
    p = program(cluster(vmSize=size, nodeCount=4))
    vmss = scale_set(p)
    assert vmss["orchestrationMode"] == "Uniform"
    assert vmss["singlePlacementGroup"] is True
    assert vmss["overprovision"] is False
    assert vmss["platformFaultDomainCount"] == 1
    assert vmss["proximityPlacementGroup"]["id"].endswith("ProximityPlacementGroup/gpu-ppg")
    assert vmss["upgradePolicy"] == {"mode": "Manual"}
    assert vmss["sku"] == {"name": size, "tier": "Standard", "capacity": 4}
    image = vmss["virtualMachineProfile"]["storageProfile"]["imageReference"]
    expected = SIZES[size].image
    assert (image["publisher"], image["offer"], image["sku"], image["version"]) == (
        expected.publisher, expected.offer, expected.sku, expected.version,
    )  # fmt: skip
    nic = vmss["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]
    assert nic["enableAcceleratedNetworking"] is SIZES[size].accelerated_networking


def test_images_follow_the_family():
    skus = {
        size: scale_set(program(cluster(vmSize=size)))["virtualMachineProfile"]["storageProfile"][
            "imageReference"
        ]["sku"]
        for size in ("Standard_ND40rs_v2", "Standard_ND96isr_H100_v5", "Standard_ND96isr_MI300X_v5")
    }
    assert skus == {
        "Standard_ND40rs_v2": "2204-v100",
        "Standard_ND96isr_H100_v5": "2204",
        "Standard_ND96isr_MI300X_v5": "2204-rocm",
    }


def test_capacity_equals_the_node_count():
    for nodes in (1, 2, 37, 100):
        assert scale_set(program(cluster(nodeCount=nodes)))["sku"]["capacity"] == nodes


def test_the_number_of_resources_does_not_grow_with_the_node_count():
    counts = {n: len(program(cluster(nodeCount=n)).resources) for n in (2, 100)}
    assert counts[2] == counts[100]


def test_nodes_have_no_public_ip_and_the_head_has_the_only_one_that_takes_connections():
    p = program(cluster())
    nic = scale_set(p)["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
    for config in nic:
        for ip in config["ipConfigurations"]:
            assert "publicIPAddressConfiguration" not in ip
    # The other public IP is the NAT gateway's, which is outbound only.
    addresses = {ip.name for ip in p.of_type(":PublicIPAddress")}
    assert addresses == {"head-ip", "net-nat-ip"}
    [nat] = p.of_type(":NatGateway")
    assert [ip["id"] for ip in nat.inputs["publicIpAddresses"]] == [
        "/mock/azure-native:network:PublicIPAddress/net-nat-ip"
    ]
    [head_nic] = p.of_type(":NetworkInterface")
    assert head_nic.inputs["ipConfigurations"][0]["publicIPAddress"]["id"].endswith("head-ip")


def test_no_rule_opens_anything_to_the_internet():
    """(What reaches what, rule order included, is tests/infra/test_reachability.py.)"""
    p = program(cluster())
    for nsg in p.of_type(":NetworkSecurityGroup"):
        for rule in nsg.inputs["securityRules"]:
            if rule["access"] == "Allow" and rule["direction"] == "Inbound":
                assert rule["sourceAddressPrefix"].lower() not in OPEN_TO_ALL, (nsg.name, rule)


def test_ssh_to_the_head_is_allowed_from_the_admin_cidrs_and_denied_from_the_rest():
    p = program(cluster(adminCidrs=[ADMIN, "198.51.100.0/24"]))
    head = next(n for n in p.of_type(":NetworkSecurityGroup") if n.name == "net-head-nsg")
    allows = [
        r["sourceAddressPrefix"] for r in head.inputs["securityRules"] if r["access"] == "Allow"
    ]
    assert allows == [ADMIN, "198.51.100.0/24"]
    deny = [r for r in head.inputs["securityRules"] if r["access"] == "Deny"]
    assert (
        deny and deny[0]["sourceAddressPrefix"] == "*" and deny[0]["destinationPortRange"] == "22"
    )


def test_nodes_accept_ssh_from_the_head_subnet_and_everything_from_the_nodes_only():
    p = program(cluster())
    nodes = next(n for n in p.of_type(":NetworkSecurityGroup") if n.name == "net-nodes-nsg")
    allows = [
        (r["sourceAddressPrefix"], r["destinationAddressPrefix"], r["destinationPortRange"])
        for r in nodes.inputs["securityRules"]
        if r["access"] == "Allow"
    ]
    assert allows == [("10.42.0.0/24", "*", "22"), ("10.42.1.0/24", "10.42.1.0/24", "*")]


def test_the_internet_is_opened_only_with_the_explicit_flag():
    p = program(cluster(adminCidrs=["0.0.0.0/0"], allowSshFromInternet=True))
    head = next(n for n in p.of_type(":NetworkSecurityGroup") if n.name == "net-head-nsg")
    assert head.inputs["securityRules"][0]["sourceAddressPrefix"] == "0.0.0.0/0"


def test_the_vnet_and_subnets_stay_clear_of_the_rdma_network():
    p = program(cluster())
    [vnet] = p.of_type(":VirtualNetwork")
    space = [ipaddress.ip_network(c) for c in vnet.inputs["addressSpace"]["addressPrefixes"]]
    assert not any(net.overlaps(RDMA_NETWORK) for net in space)
    for subnet in p.of_type(":Subnet"):
        prefix = ipaddress.ip_network(subnet.inputs["addressPrefix"])
        assert any(prefix.subnet_of(net) for net in space)  # type: ignore[arg-type]


def test_machines_take_ssh_keys_only_and_custom_data_is_secret():
    p = program(cluster())
    head = p.one(":VirtualMachine")
    vmss = p.one(":VirtualMachineScaleSet")
    for linux in (
        head.inputs["osProfile"]["linuxConfiguration"],
        vmss.inputs["virtualMachineProfile"]["osProfile"]["linuxConfiguration"],
    ):
        assert linux["disablePasswordAuthentication"] is True
        assert linux["ssh"]["publicKeys"][0]["keyData"].startswith("ssh-ed25519 ")
    assert "osProfile" in head.secret_inputs
    assert "virtualMachineProfile" in vmss.secret_inputs


@pytest.mark.parametrize("kind", list(StorageKind))
def test_every_storage_kind_is_mounted_with_its_options_on_every_machine(kind):
    p = program(cluster(**STORAGE[kind]))
    for suffix in (":VirtualMachineScaleSet", ":VirtualMachine"):
        mount = written(yaml.safe_load(p.cloud_init(suffix)), "/usr/local/sbin/dtrun-mount")
        assert f"options={MOUNTS[kind].options}" in mount
        assert f"fstype={MOUNTS[kind].fstype}" in mount
    assert p.outputs["storage_kind"] == kind.value


def test_azure_files_is_a_premium_nfs_share_reachable_from_the_cluster_subnets_only():
    p = program(cluster(storageSizeGib=2048))
    account = p.one(":StorageAccount").inputs
    assert (account["kind"], account["sku"]["name"]) == ("FileStorage", "Premium_LRS")
    assert account["enableHttpsTrafficOnly"] is False
    rules = account["networkRuleSet"]
    assert rules["defaultAction"] == "Deny"
    allowed = {
        r["virtualNetworkResourceId"].rsplit("/", 1)[1] for r in rules["virtualNetworkRules"]
    }
    assert allowed == {"net-head", "net-nodes"}
    share = p.one(":FileShare").inputs
    assert (share["enabledProtocols"], share["shareQuota"]) == ("NFS", 2048)
    mount = written(node_cloud_init(p), "/usr/local/sbin/dtrun-mount")
    assert "source=dtrunnfsmock.file.core.windows.net:/dtrunnfsmock/shared" in mount
    for subnet in p.of_type(":Subnet"):
        assert subnet.inputs["serviceEndpoints"] == [{"service": "Microsoft.Storage"}]


def test_netapp_has_a_delegated_subnet_and_an_nfs41_volume_for_the_vnet():
    p = program(cluster(**STORAGE[StorageKind.NETAPP]))
    [delegated] = [s for s in p.of_type(":Subnet") if "delegations" in s.inputs]
    assert delegated.inputs["delegations"][0]["serviceName"] == "Microsoft.NetApp/volumes"
    assert p.one(":CapacityPool").inputs["size"] == 4 * 1024**4
    volume = p.one(":CapacityPoolVolume").inputs
    assert volume["subnetId"].endswith(delegated.name)
    assert volume["protocolTypes"] == ["NFSv4.1"]
    assert volume["usageThreshold"] == 4096 * 1024**3
    assert volume["exportPolicy"]["rules"][0]["allowedClients"] == "10.42.0.0/16"
    assert "source=10.42.2.4:/shared" in written(node_cloud_init(p), "/usr/local/sbin/dtrun-mount")


def test_lustre_has_its_own_subnet_sku_and_size():
    p = program(cluster(**STORAGE[StorageKind.LUSTRE]))
    lustre = p.one(":AmlFilesystem").inputs
    assert lustre["sku"] == {"name": "AMLFS-Durable-Premium-250"}
    assert lustre["storageCapacityTiB"] == 8
    [own] = [s for s in p.of_type(":Subnet") if s.name == "net-lustre"]
    assert lustre["filesystemSubnet"].endswith(own.name)
    assert own.inputs["addressPrefix"] == "10.42.3.0/24"
    mount = written(node_cloud_init(p), "/usr/local/sbin/dtrun-mount")
    assert "source=10.42.3.5@tcp:/lustrefs" in mount


def test_spot_nodes_are_evicted_not_stopped_and_capped_in_price():
    spot = scale_set(program(cluster(spot=True, spotMaxPrice="12.5")))["virtualMachineProfile"]
    assert (spot["priority"], spot["evictionPolicy"]) == ("Spot", "Delete")
    assert spot["billingProfile"] == {"maxPrice": 12.5}
    regular = scale_set(program(cluster()))["virtualMachineProfile"]
    assert regular["priority"] == "Regular"
    assert "billingProfile" not in regular


def test_host_keys_reach_cloud_init_and_known_hosts():
    p = program(cluster())
    node_key = node_cloud_init(p)["ssh_keys"]["ed25519_public"]
    head_key = yaml.safe_load(p.cloud_init(":VirtualMachine"))["ssh_keys"]["ed25519_public"]
    assert p.outputs["known_hosts"] == [
        f"20.0.113.10,10.42.0.4 {head_key}",
        f"10.42.1.* {node_key}",
    ]
    assert node_key != head_key


def test_outputs_follow_the_version_4_contract():
    outputs = program(cluster(nodeCount=3)).outputs
    assert outputs["version"] == 4
    assert outputs["nodes_created_at"] == SCALE_SET_CREATED  # the scale set's, from Azure
    assert (outputs["scheduler"], outputs["slurm_partition"]) == ("none", None)
    assert outputs["head_public_address"] == "20.0.113.10"
    assert outputs["ssh_user"] == "azureuser"
    assert outputs["ssh_private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert (outputs["node_count"], outputs["gpus_per_node"]) == (3, 8)
    assert outputs["vm_size"] == "Standard_ND96isr_H100_v5"
    assert outputs["mount_path"] == "/shared"
    assert outputs["registry_path"] == "/shared/.dtrun/nodes"
    assert outputs["python_bin"] == "/shared/.dtrun/venv/bin"
    assert outputs["resource_group"] == "dtrun-rgmock"


def test_a_configured_public_key_is_used_and_no_private_key_is_exported():
    key = (  # a real ed25519 public key: dtrun:sshPublicKey is parsed
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF6tGqJ0o1kFkt0n/1uAPuHmOgsJ7IFBRxXRRE5bLgRR"
        " user@laptop"
    )
    p = program(cluster(sshPublicKey=key))
    assert p.outputs["ssh_private_key"] is None
    assert not [d for d in p.of_type(":PrivateKey") if d.name == "admin-key"]
    linux = p.one(":VirtualMachine").inputs["osProfile"]["linuxConfiguration"]
    assert linux["ssh"]["publicKeys"][0]["keyData"] == key


def test_every_resource_carries_the_cluster_tags():
    p = program(cluster(tags=["team=ml-infra"]))
    for resource in p.resources:
        if resource.type.startswith("azure-native:") and "tags" in resource.inputs:
            assert resource.inputs["tags"]["team"] == "ml-infra", resource.name
            assert resource.inputs["tags"]["dtrun-cluster"] == "dtrun"


@pytest.mark.parametrize(
    ("tag", "said"),
    [("team=ml\ninfra", "value has a control character (\\n): team=ml\\ninfra"),
     ("owner=a\tb", "value has a control character (\\t)"),
     ("te\x1b[2Jam=x", "name has a control character (\\x1b)"),
     ("team=a\u2028b", "value has a control character (\\u2028)")],
)  # fmt: skip
def test_a_tag_with_a_control_character_is_refused_before_any_resource(tag, said):
    """Each resource carries the tags (above): a newline or an escape reached every one."""
    with pytest.raises(ConfigError) as caught:
        program(cluster(tags=[tag]))
    assert f"dtrun:tags holds a tag whose {said}" in caught.value.what
    assert caught.value.exit_code == 2


def test_a_tag_value_with_spaces_and_punctuation_reaches_every_resource_as_written():
    p = program(cluster(tags=["team=ML infra (east) #4"]))
    tagged = [r for r in p.resources if r.type.startswith("azure-native:") and "tags" in r.inputs]
    assert tagged and all(r.inputs["tags"]["team"] == "ML infra (east) #4" for r in tagged)


def test_nodes_get_the_cluster_key_and_the_node_host_key_for_strict_checks():
    p = program(cluster())
    assert [d.name for d in p.of_type(":PrivateKey")].count("cluster-key") == 1
    files = {i["path"]: i["content"] for i in node_cloud_init(p)["write_files"]}
    node_line = p.outputs["known_hosts"][1]
    assert files["/etc/ssh/ssh_known_hosts"] == node_line + "\n"
    assert files["/home/azureuser/.ssh/id_ed25519"].startswith("-----BEGIN OPENSSH PRIVATE KEY")


def test_lustre_and_the_nodes_share_the_zone_the_settings_name():
    p = program(cluster(**{**STORAGE[StorageKind.LUSTRE], "zone": "2"}))
    assert p.one(":AmlFilesystem").inputs["zones"] == ["2"]
    assert scale_set(p)["zones"] == ["2"]
    assert p.one(":ProximityPlacementGroup").inputs["zones"] == ["2"]


def test_without_a_zone_the_nodes_are_regional():
    p = program(cluster())
    assert "zones" not in scale_set(p)
    assert "zones" not in p.one(":ProximityPlacementGroup").inputs


def test_the_head_stays_regional_and_out_of_the_nodes_proximity_placement_group():
    """The head carries SSH, Slurm's controller and its own NFS traffic, none of it NCCL: a
    proximity placement group pins a data center at its first VM, and a small head VM placed
    first could leave the GPU size no room there (docs/azure.md "The head's placement")."""
    p = program(cluster(**{**STORAGE[StorageKind.LUSTRE], "zone": "2"}))
    head = p.one(":VirtualMachine").inputs
    assert "zones" not in head
    assert "proximityPlacementGroup" not in head
    assert scale_set(p)["proximityPlacementGroup"]["id"]
