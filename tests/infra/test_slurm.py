"""dtrun:scheduler slurm: the rendered slurm.conf and gres.conf, the cloud-init that joins each
machine, and (under Pulumi mocks) the ports, the munge key and the outputs."""

from __future__ import annotations

import base64
import datetime
import fnmatch
import ipaddress
import os
import subprocess
from functools import cache

import pytest
import yaml

from dtrun.azure.catalog import SIZES
from dtrun.azure.config import cluster_spec
from dtrun.azure.settingcheck import ConfigError
from dtrun.infra.cloudinit import (
    MAX_CUSTOM_DATA_BYTES,
    SLURM_PACKAGES,
    SLURM_STAGED,
    Boot,
    render_cloud_init,
)
from dtrun.infra.slurm import MAX_NODE_COUNT, MUNGE_KEY_BYTES, PARTITION, munge_key, slurm_files
from dtrun.spec.cluster import ClusterSpec, Scheduler
from tests.conftest import require_tool
from tests.infra.harness import Program, run

TODAY = datetime.date(2026, 11, 23)
ADMIN = "203.0.113.4/32"
PUBLIC = "ssh-ed25519 AAAATESTONLY dtrun-host"
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nTEST-ONLY\n-----END OPENSSH PRIVATE KEY-----\n"
MUNGE = base64.b64encode(b"TEST-ONLY-MUNGE-KEY-" * 52).decode()
GOLDEN_SIZES = {"h100": "Standard_ND96isr_H100_v5", "a100": "Standard_ND96asr_v4"}


def slurm_cluster(**settings: object) -> ClusterSpec:
    return cluster_spec({"adminCidrs": [ADMIN], "scheduler": "slurm", **settings}, today=TODAY)


def conf_lines(text: str) -> list[dict[str, str]]:
    """slurm.conf as one dict of KEY=VALUE pairs per line, comments left out."""
    lines = (line for line in text.splitlines() if line and not line.startswith("#"))
    return [dict(pair.split("=", 1) for pair in line.split()) for line in lines]


def setting(text: str, key: str) -> str:
    return next(line[key] for line in conf_lines(text) if key in line)


def boot(role: str, cluster: ClusterSpec) -> Boot:
    return Boot(role, cluster, "10.42.2.4:/shared", PRIVATE, PUBLIC, munge_key=MUNGE)


def written(text: str) -> dict[str, dict[str, str]]:
    return {item["path"]: item for item in yaml.safe_load(text)["write_files"]}


def test_the_scheduler_is_none_unless_set_and_a_bad_one_is_one_message():
    assert cluster_spec({"adminCidrs": [ADMIN]}).scheduler is Scheduler.NONE
    assert slurm_cluster().scheduler is Scheduler.SLURM
    with pytest.raises(ConfigError, match="dtrun:scheduler is 'pbs'") as caught:
        cluster_spec({"adminCidrs": [ADMIN], "scheduler": "pbs"})
    assert caught.value.fix == "use one of none, slurm"


@pytest.mark.parametrize("size", ["Standard_ND96isr_H100_v5", "Standard_HB176rs_v4"])
def test_the_conf_names_no_node_and_is_the_same_for_any_node_count(size):
    """Nodes join as dynamic nodes: a `pulumi up` that scales them leaves slurm.conf as it was."""
    files = slurm_files(slurm_cluster(vmSize=size, nodeCount=1))
    for nodes in (4, 37, 100):
        assert slurm_files(slurm_cluster(vmSize=size, nodeCount=nodes)) == files
    lines = conf_lines(files.slurm_conf)
    assert not [line for line in lines if "NodeName" in line]
    assert setting(files.slurm_conf, "MaxNodeCount") == str(MAX_NODE_COUNT)
    assert setting(files.slurm_conf, "SlurmctldParameters") == "enable_configless"
    assert setting(files.slurm_conf, "SelectType") == "select/cons_tres"  # dynamic nodes need it
    [partition] = [line for line in lines if "PartitionName" in line]
    assert partition == {
        "PartitionName": PARTITION, "Nodes": "ALL", "Default": "YES",
        "MaxTime": "INFINITE", "State": "UP",
    }  # fmt: skip
    assert setting(files.slurm_conf, "SlurmctldHost") == "dtrun-head"
    assert setting(files.slurm_conf, "ReturnToService") == "2"
    vm = SIZES[size]
    if vm.gpu_count:
        assert setting(files.slurm_conf, "GresTypes") == "gpu"
        assert files.gres_conf is not None
        assert f"File=/dev/nvidia[0-{vm.gpu_count - 1}]" in files.gres_conf
    else:
        assert "Gres" not in files.slurm_conf and files.gres_conf is None


def test_amd_gpus_are_not_declared_to_slurm():
    files = slurm_files(slurm_cluster(vmSize="Standard_ND96isr_MI300X_v5"))
    assert "Gres=" not in files.slurm_conf and files.gres_conf is None


@pytest.mark.parametrize("name", sorted(GOLDEN_SIZES))
def test_golden_slurm_conf_and_gres_conf(golden, name):
    files = slurm_files(slurm_cluster(vmSize=GOLDEN_SIZES[name]))
    assert files.gres_conf is not None
    golden(f"slurm/{name}-slurm.conf", files.slurm_conf)
    golden(f"slurm/{name}-gres.conf", files.gres_conf)


def test_slurms_own_parser_accepts_the_conf(tmp_path):
    """scontrol reads the whole file before it answers, and stops at a bad key."""
    scontrol = require_tool("scontrol")
    files = slurm_files(slurm_cluster())
    (tmp_path / "slurm.conf").write_text(files.slurm_conf)
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    expanded = subprocess.run(
        [scontrol, "show", "hostnames", "dtrunnode[000000-000002]"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert expanded.returncode == 0, expanded.stderr
    assert expanded.stdout.split() == ["dtrunnode000000", "dtrunnode000001", "dtrunnode000002"]
    (tmp_path / "slurm.conf").write_text(files.slurm_conf + "NotASlurmKey=1\n")
    refused = subprocess.run(
        [scontrol, "show", "hostnames", "x"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0


def test_the_munge_key_is_1024_bytes_of_base64_and_stable_for_a_seed():
    key = munge_key(PRIVATE)
    assert len(base64.b64decode(key, validate=True)) == MUNGE_KEY_BYTES == 1024
    assert munge_key(PRIVATE) == key
    assert munge_key(PRIVATE + "x") != key


def test_the_head_stages_the_conf_and_the_nodes_fetch_it_from_slurmctld():
    cluster = slurm_cluster(nodeCount=100)
    head = written(render_cloud_init(boot("head", cluster)))
    node = written(render_cloud_init(boot("node", cluster)))
    conf = slurm_files(cluster)
    assert head[f"{SLURM_STAGED}/slurm.conf"]["content"] == conf.slurm_conf
    assert head[f"{SLURM_STAGED}/gres.conf"]["content"] == conf.gres_conf
    assert not [p for p in node if p.startswith(f"{SLURM_STAGED}/") and "munge" not in p]
    drop_in = node["/etc/systemd/system/slurmd.service.d/dtrun-infiniband.conf"]["content"]
    assert (
        'Environment="SLURMD_OPTIONS=-Z --conf-server dtrun-head:6817 --conf Gres=gpu:8"'
        in drop_in.splitlines()
    )
    assert "ConditionPathExists=\n" in drop_in  # no slurm.conf on a node: the condition cleared


@pytest.mark.parametrize("role", ["head", "node"])
def test_each_machine_installs_munge_and_its_slurm_and_joins_after_registering(role):
    text = render_cloud_init(boot(role, slurm_cluster(nodeCount=100)))
    assert len(text.encode()) <= MAX_CUSTOM_DATA_BYTES
    files = written(text)
    key = files[f"{SLURM_STAGED}/munge.key.b64"]
    assert (key["content"], key["permissions"]) == (MUNGE + "\n", "0400")
    script = files["/usr/local/sbin/dtrun-slurm"]["content"]
    assert "install -m 0400 -o munge -g munge" in script
    assert 'rm -f "${staged}/munge.key" "${staged}/munge.key.b64"' in script
    daemon = "slurmctld" if role == "head" else "slurmd"
    assert f"systemctl restart {daemon}" in script
    # munge is configured before the Slurm packages go in: their daemons authenticate with it.
    assert script.index("install -y -q munge") < script.index('install -y -q "${packages[@]}"')
    assert script.index("systemctl restart munge") < script.index(f"systemctl restart {daemon}")
    bootstrap = files["/usr/local/sbin/dtrun-bootstrap"]["content"]
    assert bootstrap.index("dtrun-register") < bootstrap.index('dtrun-slurm "$ib_state"')


# What the Ubuntu 22.04 HPC image does (docs/facts.md §12): its apt pin gives Ubuntu's slurm*
# packages priority -1 and Microsoft's slurm-smd* 990. The pin file as azhpc-images ships it.
HPC_IMAGE_SLURM_PIN = """Package: slurm-smd*
Pin:  origin "packages.microsoft.com"
Pin-Priority: 990

Package: pmix
Pin: origin "packages.microsoft.com"
Pin-Priority: 990

Package: slurm*
Pin: origin *ubuntu.com*
Pin-Priority: -1

Package: pmix
Pin: origin *ubuntu.com*
Pin-Priority: -1
"""


UBUNTU_MIRROR = "azure.archive.ubuntu.com"  # where Azure's Ubuntu images take Ubuntu's packages
MICROSOFT = "packages.microsoft.com"


def pin_priority(package: str, origin: str) -> int:
    """apt's priority for a package version from an origin under the image's pin file: the
    first record whose Package and Pin match (both globs, as apt_preferences(5) reads them);
    500 when none does, apt's default for a version to be installed."""
    for block in HPC_IMAGE_SLURM_PIN.strip().split("\n\n"):
        record = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in block.splitlines())}
        pattern = record["Pin"].removeprefix("origin").strip().strip('"')
        if fnmatch.fnmatchcase(package, record["Package"]) and fnmatch.fnmatchcase(origin, pattern):
            return int(record["Pin-Priority"])
    return 500


def slurm_install_line(script: str) -> list[str]:
    """The Slurm packages dtrun-slurm installs, as the script lists them."""
    [line] = [ln for ln in script.splitlines() if "slurm-smd-client" in ln]
    words = line.replace("(", " ").replace(")", " ").replace(";", " ").split()
    return [word for word in words if word.startswith("slurm")]


@pytest.mark.parametrize("role", ["head", "node"])
def test_every_package_the_script_installs_is_installable_on_the_hpc_image(role):
    script = written(render_cloud_init(boot(role, slurm_cluster())))["/usr/local/sbin/dtrun-slurm"]
    names = slurm_install_line(script["content"])
    assert tuple(names) == SLURM_PACKAGES[role]
    daemon = "slurm-smd-slurmctld" if role == "head" else "slurm-smd-slurmd"
    assert daemon in names and "slurm-smd-client" in names
    # Microsoft's repository ships them, and the image's pin prefers them there.
    assert all(pin_priority(name, MICROSOFT) == 990 for name in names)
    # munge is Ubuntu's, and the pin leaves it alone.
    assert pin_priority("munge", UBUNTU_MIRROR) == 500
    assert "install -y -q munge" in script["content"]
    # What the script installed on main: Ubuntu's own packages, which the image pins out.
    installs = [ln.split() for ln in script["content"].splitlines() if "install -y" in ln]
    for ubuntu in ("slurmctld", "slurmd", "slurm-client"):
        assert pin_priority(ubuntu, UBUNTU_MIRROR) == -1
        assert not [words for words in installs if ubuntu in words]
    # Off the image, the script stops with a message, not apt's "no installation candidate".
    assert "apt-cache policy slurm-smd" in script["content"]


def test_the_nodes_install_the_slurm_version_the_head_installed():
    head = written(render_cloud_init(boot("head", slurm_cluster())))["/usr/local/sbin/dtrun-slurm"]
    node = written(render_cloud_init(boot("node", slurm_cluster())))["/usr/local/sbin/dtrun-slurm"]
    assert "version_file=/shared/.dtrun/slurm-version" in head["content"]
    assert "dpkg-query -W -f='${Version}' slurm-smd >\"${version_file}.partial\"" in head["content"]
    assert 'packages+=("${package}=${version}")' in node["content"]
    assert "getent passwd slurm >/dev/null || useradd --system --uid 11100" in node["content"]


def test_a_node_starts_slurmd_only_with_infiniband_active_at_every_boot():
    files = written(render_cloud_init(boot("node", slurm_cluster())))
    script = files["/usr/local/sbin/dtrun-slurm"]["content"]
    gate = script.index('if [ "$1" != active ]')
    assert gate < script.index("systemctl restart slurmd")
    drop_in = files["/etc/systemd/system/slurmd.service.d/dtrun-infiniband.conf"]["content"]
    assert "ExecStartPre=/usr/local/sbin/dtrun-ib-check" in drop_in


def test_the_slurm_scripts_pass_bash_n_and_shellcheck():
    shellcheck = require_tool("shellcheck")
    for role in ("head", "node"):
        files = written(render_cloud_init(boot(role, slurm_cluster())))
        for path in ("/usr/local/sbin/dtrun-slurm", "/usr/local/sbin/dtrun-bootstrap"):
            content = files[path]["content"]
            parsed = subprocess.run(["bash", "-n"], input=content, text=True, capture_output=True)
            assert parsed.returncode == 0, f"{role} {path}: {parsed.stderr}"
            checked = subprocess.run(
                [shellcheck, "--shell=bash", "--severity=style", "-"],
                input=content, text=True, capture_output=True,
            )  # fmt: skip
            assert checked.returncode == 0, f"{role} {path}:\n{checked.stdout}"


def test_without_slurm_no_machine_gets_slurm():
    text = render_cloud_init(boot("node", cluster_spec({"adminCidrs": [ADMIN]}, today=TODAY)))
    assert "slurm" not in text.lower()


def test_golden_slurm_cloud_init(golden):
    for role in ("head", "node"):
        golden(f"cloud-init/{role}-slurm.yaml", render_cloud_init(boot(role, slurm_cluster())))


# The program under mocks.


@cache
def program(spec: ClusterSpec) -> Program:
    return run(spec)


def rules(p: Program, nsg: str) -> list[dict[str, object]]:
    found = next(n for n in p.of_type(":NetworkSecurityGroup") if n.name == f"net-{nsg}-nsg")
    return list(found.inputs["securityRules"])


@pytest.mark.parametrize("nsg", ["head", "nodes"])
def test_slurm_ports_open_to_the_cluster_subnets_only(nsg):
    p = program(slurm_cluster(adminCidrs=[ADMIN, "198.51.100.0/24"]))
    slurm = [r for r in rules(p, nsg) if r["destinationPortRange"] == "6817-6818"]
    allowed = {r["sourceAddressPrefix"] for r in slurm if r["access"] == "Allow"}
    assert allowed == {"10.42.0.0/24", "10.42.1.0/24"}
    vnet = ipaddress.IPv4Network("10.42.0.0/16")
    assert all(ipaddress.IPv4Network(str(cidr)).subnet_of(vnet) for cidr in allowed)
    [deny] = [r for r in slurm if r["access"] == "Deny"]
    assert deny["sourceAddressPrefix"] == "*"
    assert all(float(str(r["priority"])) < float(str(deny["priority"])) for r in slurm if r != deny)
    for rule in rules(p, nsg):
        if rule["access"] == "Allow" and rule["sourceAddressPrefix"] in (ADMIN, "198.51.100.0/24"):
            assert rule["destinationPortRange"] == "22"


def test_without_slurm_no_rule_names_its_ports():
    p = program(cluster_spec({"adminCidrs": [ADMIN]}, today=TODAY))
    for nsg in ("head", "nodes"):
        # SSH, and on the nodes everything between nodes (all-within-nodes): no Slurm range.
        assert {r["destinationPortRange"] for r in rules(p, nsg)} <= {"22", "*"}
    assert not [d for d in p.of_type(":PrivateKey") if d.name == "munge-key-seed"]


def test_the_munge_key_reaches_the_machines_only_as_a_secret():
    p = program(slurm_cluster())
    [seed] = [d for d in p.of_type(":PrivateKey") if d.name == "munge-key-seed"]
    head, vmss = p.one(":VirtualMachine"), p.one(":VirtualMachineScaleSet")
    keys = set()
    for machine, suffix in ((head, ":VirtualMachine"), (vmss, ":VirtualMachineScaleSet")):
        keys.add(written(p.cloud_init(suffix))[f"{SLURM_STAGED}/munge.key.b64"]["content"])
        assert {"osProfile", "virtualMachineProfile"} & machine.secret_inputs
    [key] = keys  # one key for the whole cluster
    assert len(base64.b64decode(key)) == 1024
    for declared in p.declared:
        public = {k: v for k, v in declared.inputs.items() if k not in declared.secret_inputs}
        assert key.strip() not in str(public), declared.name
    assert key.strip() not in str(p.outputs)
    assert seed.type == "tls:index/privateKey:PrivateKey"


def test_the_head_carries_the_conf_of_the_stack_and_the_outputs_say_slurm():
    cluster = slurm_cluster(nodeCount=6)
    p = program(cluster)
    conf = written(p.cloud_init(":VirtualMachine"))[f"{SLURM_STAGED}/slurm.conf"]
    assert conf["content"] == slurm_files(cluster).slurm_conf
    assert f"{SLURM_STAGED}/slurm.conf" not in written(p.cloud_init(":VirtualMachineScaleSet"))
    assert (p.outputs["version"], p.outputs["scheduler"]) == (4, "slurm")
    assert p.outputs["slurm_partition"] == PARTITION
    counts = {n: len(program(slurm_cluster(nodeCount=n)).resources) for n in (2, 100)}
    assert counts[2] == counts[100]
