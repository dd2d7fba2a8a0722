"""Stack settings -> ClusterSpec: defaults from Pulumi.yaml, and a clear error for each bad one."""

from __future__ import annotations

import base64
import datetime
from functools import cache

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from dtrun.azure.catalog import CatalogError
from dtrun.azure.config import PROJECT_FILE, cluster_spec, schema
from dtrun.azure.settingcheck import ConfigError, subnets
from dtrun.spec.cluster import StorageKind

TODAY = datetime.date(2026, 11, 23)
MINIMAL = {"adminCidrs": ["203.0.113.4/32"]}


def spec(**settings):
    return cluster_spec({**MINIMAL, **settings}, today=TODAY)


def test_defaults_come_from_pulumi_yaml():
    cluster = spec()
    assert cluster.vm_size == "Standard_ND96isr_H100_v5"
    assert cluster.node_count == 2
    assert cluster.storage.kind is StorageKind.AZURE_FILES
    assert cluster.storage.mount_path == "/shared"
    assert cluster.image == "microsoft-dsvm:ubuntu-hpc:2204:latest"
    assert cluster.ssh_public_key is None
    assert cluster.spot is False


def test_every_setting_is_declared_with_type_and_description():
    declared = yaml.safe_load(PROJECT_FILE.read_text())["config"]
    assert all(key.startswith("dtrun:") for key in declared)
    for key, setting in declared.items():
        assert setting["type"] in {"string", "integer", "boolean", "array"}, key
        assert setting["description"], key
    assert set(schema()) >= {
        "location", "vmSize", "nodeCount", "adminCidrs", "sshPublicKey", "storageKind",
        "storageSizeGib", "spot", "spotMaxPrice", "image", "tags", "namePrefix",
    }  # fmt: skip


def test_the_example_stack_file_uses_only_declared_settings():
    example = yaml.safe_load((PROJECT_FILE.parent / "Pulumi.example.yaml").read_text())["config"]
    dtrun = {k: v for k, v in example.items() if k.startswith("dtrun:")}
    assert cluster_spec(dtrun, today=TODAY).vm_size


def test_stack_file_strings_are_read_as_their_declared_types():
    cluster = cluster_spec(
        {"dtrun:adminCidrs": '["198.51.100.0/24"]', "dtrun:nodeCount": "8", "dtrun:spot": "true"},
        today=TODAY,
    )
    assert (cluster.admin_cidrs, cluster.node_count, cluster.spot) == (
        ("198.51.100.0/24",),
        8,
        True,
    )


def test_the_image_override_replaces_the_catalog_image():
    urn = "microsoft-dsvm:ubuntu-hpc:2404:latest"
    assert spec(image=urn).image == urn


def test_the_catalog_image_follows_the_size_family():
    assert spec(vmSize="Standard_ND40rs_v2").image.endswith(":2204-v100:latest")
    assert spec(vmSize="Standard_ND96isr_MI300X_v5").image.endswith(":2204-rocm:latest")


def test_vnet_is_carved_into_four_24s():
    assert subnets("10.42.0.0/16") == {
        "head": "10.42.0.0/24",
        "nodes": "10.42.1.0/24",
        "netapp": "10.42.2.0/24",
        "lustre": "10.42.3.0/24",
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"vmSize": "Standard_ND96is_H100_v5"}, "use Standard_ND96isr_H100_v5"),
        ({"vmSize": "Standard_NC24rs_v3"}, "retired on 2025-09-30"),
        ({"nodeCount": 0}, "300 after a support request"),
        ({"nodeCount": 101}, "300 after a support request"),
    ],
)
def test_sizes_and_node_counts_the_catalog_refuses(settings, message):
    with pytest.raises(CatalogError, match=message):
        spec(**settings)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"adminCidrs": []}, "dtrun:adminCidrs is empty"),
        ({"adminCidrs": ["0.0.0.0/0"]}, "opens SSH to the whole internet"),
        ({"adminCidrs": ["::/0"]}, "opens SSH to the whole internet"),
        ({"adminCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}, "opens SSH to the whole internet"),
        ({"adminCidrs": ["10.0.0.5/24"]}, "did you mean 10.0.0.0/24"),
        ({"adminCidrs": ["my laptop"]}, "is not a CIDR"),
        ({"vnetCidr": "172.16.0.0/12"}, "overlaps 172.16.0.0/16"),
        ({"vnetCidr": "172.16.128.0/20"}, "overlaps 172.16.0.0/16"),
        ({"vnetCidr": "10.0.0.0/24"}, "needs four /24 subnets"),
        ({"storageKind": "s3"}, "use one of azurefiles, netapp, lustre"),
        ({"storageSizeGib": 50}, "100 to 102400 GiB"),
        ({"storageKind": "netapp", "storageSizeGib": 1500}, "use 2048"),
        ({"storageKind": "lustre", "lustreSku": "AMLFS-Durable-Premium-999"}, "use one of"),
        (
            {
                "storageKind": "lustre",
                "lustreSku": "AMLFS-Durable-Premium-40",
                "storageSizeGib": 16 * 1024,
            },
            "steps of 48 TiB",
        ),
        (
            {"storageKind": "lustre", "storageSizeGib": 136 * 1024, "zone": "1"},
            "AMLFS-Durable-Premium-250 holds at most 128 TiB",
        ),
        (
            {
                "storageKind": "lustre",
                "lustreSku": "AMLFS-Durable-Premium-40",
                "storageSizeGib": 240 * 1024,
                "zone": "1",
            },
            "Lustre subnet fits a file system of at most 196 TiB",
        ),
        ({"storageKind": "lustre", "storageSizeGib": 8192}, "dtrun:zone is empty"),
        ({"zone": "4"}, "dtrun:zone is '4'"),
        ({"zone": "eastus-1"}, "use 1, 2 or 3"),
        ({"spotMaxPrice": "cheap"}, "dtrun:spotMaxPrice"),
        ({"spotMaxPrice": "0"}, "dtrun:spotMaxPrice"),
        ({"adminUser": "root"}, "does not accept as a login"),
        ({"sshPublicKey": "-----BEGIN OPENSSH PRIVATE KEY-----"}, "not an OpenSSH public key"),
        ({"namePrefix": "Dtrun-Cluster"}, "2 to 12 lowercase letters"),
        ({"tags": ["team"]}, "not KEY=VALUE"),
        ({"headVmSize": "x; rm -rf /"}, "dtrun:headVmSize is 'x; rm -rf /', not an Azure VM size"),
        ({"headVmSize": "Standard_D4s_v5\n"}, "not an Azure VM size name"),
        # dtrun's own tags name the cluster to `dtrun down` and the head's timer; Azure's limits
        ({"tags": ["dtrun-cluster=other"]}, "'dtrun-cluster', a tag dtrun sets itself"),
        ({"tags": ["Managed-By=me"]}, "'Managed-By', a tag dtrun sets itself"),
        ({"tags": ["team=a", "Team=b"]}, "names 'Team' twice"),
        ({"tags": ["a/b=c"]}, "which Azure refuses as a tag"),
        ({"tags": ["team=" + "x" * 257]}, "which Azure refuses as a tag"),
        ({"tags": [f"t{i}=x" for i in range(46)]}, "holds 46 tags"),
        ({"image": "ubuntu-hpc"}, "is not an image URN"),
        ({"image": "almalinux:almalinux-hpc:8_10-hpc-gen2:latest"}, "not an Ubuntu image"),
        ({"nodeCount": "many"}, "not an integer"),
        # int() reads other scripts' digits, spaces and '_': what a stack file says is ASCII
        ({"nodeCount": "\u0664"}, "dtrun:nodeCount is '\u0664', not an integer"),
        ({"nodeCount": "\uff19"}, "not an integer"),
        ({"nodeCount": " 4"}, "dtrun:nodeCount is ' 4', not an integer"),
        ({"storageSizeGib": "1_024"}, "dtrun:storageSizeGib is '1_024', not an integer"),
        ({"vmsize": "Standard_ND96isr_H100_v5"}, "did you mean dtrun:vmSize"),
        ({"mountPath": "shared dir"}, "dtrun:mountPath"),
    ],
)
def test_bad_settings_are_refused_with_the_key_named(settings, message):
    with pytest.raises((ConfigError, CatalogError), match=message.replace("(", r"\(")) as caught:
        spec(**settings)
    assert caught.value.exit_code == 2


def test_admin_cidrs_are_required():
    with pytest.raises(ConfigError, match="dtrun:adminCidrs must be set"):
        cluster_spec({}, today=TODAY)


def test_internet_wide_ssh_needs_the_explicit_flag():
    cluster = spec(adminCidrs=["0.0.0.0/0"], allowSshFromInternet=True)
    assert cluster.admin_cidrs == ("0.0.0.0/0",)


def test_valid_lustre_sizes_follow_the_step_table():
    for sku, step in (("AMLFS-Durable-Premium-40", 48), ("AMLFS-Durable-Premium-500", 4)):
        cluster = spec(storageKind="lustre", lustreSku=sku, storageSizeGib=step * 1024, zone="1")
        assert cluster.storage.size_gib == step * 1024


@pytest.mark.parametrize(
    ("sku", "step_tib", "largest_tib"),
    [
        ("AMLFS-Durable-Premium-500", 4, 128),
        ("AMLFS-Durable-Premium-250", 8, 128),
        ("AMLFS-Durable-Premium-125", 16, 128),
        # 768 TiB for the SKU, but the /24 subnet fits 196 TiB: the last 48 TiB step under it
        ("AMLFS-Durable-Premium-40", 48, 192),
    ],
)
def test_lustre_takes_its_largest_size_and_refuses_one_step_more(sku, step_tib, largest_tib):
    def lustre(tib: int):
        return spec(storageKind="lustre", lustreSku=sku, storageSizeGib=tib * 1024, zone="1")

    assert lustre(largest_tib).storage.size_gib == largest_tib * 1024
    with pytest.raises(ConfigError, match=f"use at most {largest_tib * 1024} "):
        lustre(largest_tib + step_tib)


def test_the_zone_is_one_of_azures_three_or_none():
    assert spec().zone == ""
    assert spec(zone="2").zone == "2"
    assert spec(storageKind="lustre", storageSizeGib=8192, zone="3").zone == "3"


def test_a_bare_address_becomes_a_host_cidr():
    assert spec(adminCidrs=["203.0.113.4"]).admin_cidrs == ("203.0.113.4/32",)


def openssh(public_key) -> str:
    line = public_key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    return f"{line} user@laptop"


@cache
def rsa_key(bits: int) -> str:
    return openssh(rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: openssh(ec.generate_private_key(ec.SECP256R1()).public_key()),
         "is a key of type ecdsa-sha2-nistp256; Azure accepts only RSA"),
        (lambda: openssh(ec.generate_private_key(ec.SECP384R1()).public_key()),
         "is a key of type ecdsa-sha2-nistp384"),
        (lambda: openssh(ec.generate_private_key(ec.SECP521R1()).public_key()),
         "is a key of type ecdsa-sha2-nistp521"),
        (lambda: rsa_key(1024), "is a 1024-bit RSA key; Azure refuses RSA keys under 2048 bits"),
        (lambda: rsa_key(2040), "is a 2040-bit RSA key"),
        (lambda: "ssh-ed25519 AAAAnotbase64!! user@laptop", "not an OpenSSH public key"),
        (lambda: "ssh-ed25519 " + base64.b64encode(b"short").decode(), "not an OpenSSH public key"),
    ],
)  # fmt: skip
def test_ssh_keys_azure_refuses_are_refused_at_config_with_exit_2(make, message):
    with pytest.raises(ConfigError, match=message) as caught:
        spec(sshPublicKey=make())
    assert caught.value.exit_code == 2
    assert "dtrun:sshPublicKey" in str(caught.value)
    assert "~/.ssh/id_ed25519.pub" in caught.value.fix


@pytest.mark.parametrize(
    "make",
    [
        lambda: openssh(ed25519.Ed25519PrivateKey.generate().public_key()),
        lambda: rsa_key(2048),
        lambda: rsa_key(4096),
    ],
)
def test_ssh_keys_azure_accepts_are_kept_as_given(make):
    key = make()
    assert spec(sshPublicKey=key).ssh_public_key == key


@pytest.mark.parametrize("size_gib", [0, -8192])
def test_a_lustre_size_of_zero_or_less_is_refused(size_gib):
    # 0 and -8192 are whole multiples of the step: they passed, and Azure refused the file
    # system only after the group, the network and the rest were made.
    with pytest.raises(ConfigError, match="dtrun:storageSizeGib") as caught:
        spec(storageKind="lustre", storageSizeGib=size_gib, zone="1")
    assert "use a multiple of 8192, e.g. 8192" in caught.value.fix


@pytest.mark.parametrize(
    "path",
    ["/shared/..", "/.", "/shared/./x", "/home", "/home/azureuser", "/etc", "/usr/local", "/var"],
)
def test_a_mount_path_that_would_hide_the_machine_s_own_files_is_refused(path):
    # Mounted there, the share would cover / itself, the admin's authorized_keys (no login),
    # /usr/local/sbin's boot scripts or /etc: each was accepted before.
    with pytest.raises(ConfigError, match="dtrun:mountPath") as caught:
        spec(mountPath=path)
    assert caught.value.exit_code == 2
    assert "e.g. /shared" in caught.value.fix


@pytest.mark.parametrize("path", ["/shared", "/mnt/shared", "/home/shared", "/var/shared", "/data"])
def test_a_mount_path_beside_the_machine_s_own_files_is_kept(path):
    assert spec(mountPath=path).storage.mount_path == path


@pytest.mark.parametrize("user", ["adm", "backup", "console", "owner", "sql", "a", "user1"])
def test_an_admin_user_azure_reserves_is_refused_before_anything_is_made(user):
    # Azure refuses these names only when it creates the head VM: after the group, the
    # network and the shared storage.
    with pytest.raises(ConfigError, match=f"dtrun:adminUser is '{user}'") as caught:
        spec(adminUser=user)
    assert "e.g. azureuser" in caught.value.fix


@pytest.mark.parametrize("user", ["slurm", "munge", "daemon", "sshd", "nobody", "systemd-network"])
def test_an_admin_user_the_machines_already_have_is_refused(user):
    # The image's own accounts, and Slurm's and munge's that dtrun-slurm makes.
    with pytest.raises(ConfigError, match="already has an account of that name"):
        spec(adminUser=user)


@pytest.mark.parametrize("user", ["azureuser", "alice", "ml_ops", "dtrun-admin"])
def test_an_ordinary_admin_user_is_kept(user):
    assert spec(adminUser=user).admin_user == user


@pytest.mark.parametrize("price", ["1_2.5", " 12.5", "\u0661\u0662", "+12.5", "12.5 "])
def test_a_spot_price_in_other_than_plain_ascii_digits_is_refused(price):
    with pytest.raises(ConfigError, match="dtrun:spotMaxPrice is") as caught:
        spec(spotMaxPrice=price)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("price", ["-1", "12.5", "0.75", "1e2"])
def test_a_plain_spot_price_or_minus_one_is_kept(price):
    assert spec(spotMaxPrice=price).spot_max_price == float(price)


@pytest.mark.parametrize("price", ["-1.0", "-1.00", "-1."])
def test_minus_one_written_as_a_decimal_is_kept_as_up_to_on_demand(price):
    """`dtrun:spotMaxPrice: -1.0` was taken before prices took plain digits only; its message
    said "use -1", the same number."""
    assert spec(spotMaxPrice=price).spot_max_price == -1


@pytest.mark.parametrize("price", ["nan", "inf", "-inf", "NaN", "Infinity"])
def test_a_spot_price_that_is_not_a_finite_number_is_refused(price):
    with pytest.raises(ConfigError, match="dtrun:spotMaxPrice") as caught:
        spec(spotMaxPrice=price)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("cidr", "kind"),
    [
        ("224.0.0.0/16", "multicast"),
        ("127.0.0.0/16", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("169.0.0.0/8", "link-local"),
        ("0.0.0.0/8", "this network"),
        ("0.42.0.0/16", "this network"),
        ("240.0.0.0/4", "reserved"),
        ("192.0.0.0/2", "multicast"),
        ("168.63.0.0/16", "platform address 168.63.129.16"),
        ("168.0.0.0/8", "platform address 168.63.129.16"),
        ("168.63.128.0/22", "platform address 168.63.129.16"),
    ],
)
def test_a_vnet_in_a_range_azure_refuses_is_refused(cidr, kind):
    with pytest.raises(ConfigError, match=f"dtrun:vnetCidr is {cidr}.*{kind}") as caught:
        spec(vnetCidr=cidr)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    "cidr", ["10.42.0.0/16", "10.0.0.0/8", "192.168.0.0/16", "100.64.0.0/16", "20.30.0.0/16"]
)
def test_a_private_or_public_unicast_vnet_is_kept(cidr):
    assert spec(vnetCidr=cidr).vnet_cidr == cidr


@pytest.mark.parametrize("entry", ["--index-url=https://evil.example/", "-r", " -e .", "--pre"])
def test_a_python_package_that_pip_would_read_as_an_option_is_refused(entry):
    with pytest.raises(ConfigError, match="dtrun:pythonPackages holds") as caught:
        spec(pythonPackages=["numpy", entry])
    assert entry in caught.value.message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    "entry", ["", " ", "numpy\x1b", "numpy\n", "torch==", "a b", "numpy\uffff"]
)
def test_a_python_package_that_is_no_requirement_is_refused_before_the_nodes_boot(entry):
    with pytest.raises(ConfigError, match=r"dtrun:pythonPackages holds .*which is no requirement"):
        spec(pythonPackages=["numpy", entry])


def test_python_packages_and_requirement_specifiers_are_kept():
    packages = [
        "torch", "numpy>=1.26", "transformers[torch]==4.46.0", "torch==2.6.0+cu124",
        "numpy; python_version < '3.12'", "pkg @ https://example.org/pkg-1.0-py3-none-any.whl",
    ]  # fmt: skip
    assert spec(pythonPackages=packages).python_packages == tuple(packages)


@pytest.mark.parametrize("size", ["Standard_D4s_v5", "Standard_M416-208s_v2", "Basic_A1"])
def test_head_sizes_as_azure_spells_them_are_kept(size):
    assert spec(headVmSize=size).head_vm_size == size
