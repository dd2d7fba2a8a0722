"""cloud-init for head and nodes: valid YAML, scripts that pass shellcheck, the right mounts."""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from dtrun.azure.catalog import ROCM_TORCH, SIZES
from dtrun.azure.config import cluster_spec
from dtrun.infra.cloudinit import (
    MAX_CUSTOM_DATA_BYTES,
    MOUNTS,
    Boot,
    ClusterKey,
    HeadExpiry,
    render_cloud_init,
)
from dtrun.render import render
from dtrun.spec.cluster import StorageKind
from tests.conftest import require_tool
from tests.infra.harness import run
from tests.infra.sandbox import stand_in_wheel

TODAY = datetime.date(2026, 11, 23)
# Placeholder text, not a key: cloud-init only has to carry it verbatim.
PRIVATE = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nTEST-ONLY\nNOT-A-KEY\n-----END OPENSSH PRIVATE KEY-----\n"
)
PUBLIC = "ssh-ed25519 AAAATESTONLY dtrun-host"
CLUSTER_KEY = ClusterKey(
    "-----BEGIN OPENSSH PRIVATE KEY-----\nTEST-ONLY-CLUSTER\n-----END OPENSSH PRIVATE KEY-----\n",
    "ssh-ed25519 AAAACLUSTERTESTONLY dtrun-cluster",
    f"10.42.1.* {PUBLIC}",
)
SOURCES = {
    StorageKind.AZURE_FILES: "dtrunnfs1.file.core.windows.net:/dtrunnfs1/shared",
    StorageKind.NETAPP: "10.42.2.4:/shared",
    StorageKind.LUSTRE: "10.42.3.5@tcp:/lustrefs",
}
STORAGE = {
    StorageKind.AZURE_FILES: {},
    StorageKind.NETAPP: {"storageKind": "netapp", "storageSizeGib": 4096},
    StorageKind.LUSTRE: {"storageKind": "lustre", "storageSizeGib": 8192, "zone": "1"},
}


def boot(role="node", kind=StorageKind.AZURE_FILES, size="Standard_ND96isr_H100_v5", **extra):
    cluster = cluster_spec(
        {"adminCidrs": ["203.0.113.4/32"], "vmSize": size, **STORAGE[kind], **extra}, today=TODAY
    )
    return Boot(
        role, cluster, SOURCES[kind], PRIVATE, PUBLIC, CLUSTER_KEY if role == "node" else None
    )


CASES = {
    f"{role}-{kind.value}-{size}": boot(role, kind, size)
    for role in ("head", "node")
    for kind in StorageKind
    for size in ("Standard_ND96isr_H100_v5", "Standard_ND96asr_v4", "Standard_HB176rs_v4")
}
EXPIRY = HeadExpiry(
    "/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/dtrun-rg1a2b3c4d",
    "11111111-1111-4111-8111-111111111111",
)
CASES["head-expiry"] = replace(boot("head"), expiry=EXPIRY)


def files(document):
    return {item["path"]: item["content"] for item in document["write_files"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cloud_init_is_yaml_that_carries_every_file_verbatim(name):
    text = render_cloud_init(CASES[name])
    assert text.startswith("#cloud-config\n")
    assert len(text.encode()) <= MAX_CUSTOM_DATA_BYTES
    document = yaml.safe_load(text)
    assert document["ssh_keys"] == {"ed25519_private": PRIVATE, "ed25519_public": PUBLIC}
    assert document["ssh_pwauth"] is False
    timers = ["dtrun-expiry.timer"] if "expiry" in name else []
    timers += ["dtrun-scheduled-events.timer"] if name.startswith("node") else []
    enable = [["systemctl", "enable", "--now", timer] for timer in timers]
    assert document["runcmd"] == [*enable, ["/usr/local/sbin/dtrun-bootstrap"]]
    assert "/usr/local/sbin/dtrun-mount" in files(document)


def test_every_script_passes_bash_n_and_shellcheck():
    shellcheck = require_tool("shellcheck")
    for name, case in CASES.items():
        for path, content in files(yaml.safe_load(render_cloud_init(case))).items():
            if not path.startswith(("/usr/local/sbin/", "/etc/profile.d/")):
                continue  # keys and known_hosts, not shell
            if content.startswith("#!/usr/bin/env python3"):
                continue  # dtrun-expiry: Python, run for real in tests/unit/test_expiry_script.py
            parsed = subprocess.run(["bash", "-n"], input=content, text=True, capture_output=True)
            assert parsed.returncode == 0, f"{name} {path}: {parsed.stderr}"
            checked = subprocess.run(
                [shellcheck, "--shell=bash", "--severity=style", "-"],
                input=content, text=True, capture_output=True,
            )  # fmt: skip
            assert checked.returncode == 0, f"{name} {path}:\n{checked.stdout}"


@pytest.mark.parametrize("kind", list(StorageKind))
def test_the_mount_uses_the_kinds_recommended_options(kind):
    mount = files(yaml.safe_load(render_cloud_init(boot(kind=kind))))["/usr/local/sbin/dtrun-mount"]
    assert f"source={SOURCES[kind]}" in mount.replace("'", "")
    assert f"fstype={MOUNTS[kind].fstype}" in mount
    assert f"options={MOUNTS[kind].options}" in mount
    assert "target=/shared" in mount
    assert "_netdev,nofail" in mount


def test_azure_files_mounts_nfs_4_1_with_nconnect():
    assert MOUNTS[StorageKind.AZURE_FILES].options == "vers=4,minorversion=1,sec=sys,nconnect=4"
    assert MOUNTS[StorageKind.LUSTRE].options == "noatime,flock"


def test_nodes_check_infiniband_and_get_the_size_nccl_settings_the_head_does_not():
    node = files(yaml.safe_load(render_cloud_init(boot("node"))))
    head = files(yaml.safe_load(render_cloud_init(boot("head"))))
    assert "expected=8" in node["/usr/local/sbin/dtrun-ib-check"]
    assert (
        "export NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml" in node["/etc/profile.d/dtrun-nccl.sh"]
    )
    assert "/usr/local/sbin/dtrun-ib-check" not in head
    assert "/etc/profile.d/dtrun-nccl.sh" not in head
    assert "dtrun-ib-check" not in head["/usr/local/sbin/dtrun-bootstrap"]


def test_the_python_environment_is_installed_once_under_a_lock_on_the_shared_storage():
    env = files(yaml.safe_load(render_cloud_init(boot(pythonPackages=["torch==2.6.0", "numpy"]))))
    script = env["/usr/local/sbin/dtrun-python-env"]
    assert "venv=/shared/.dtrun/venv" in script
    assert "flock 9" in script
    assert "/.dtrun-ready" in script
    assert "install --quiet torch==2.6.0 numpy" in script


def test_mi300x_nodes_take_torch_built_for_rocm_and_cuda_sizes_take_pypis():
    """PyPI's Linux torch is a CUDA build: on AMD's MI300X it finds no GPU. The MI300X nodes pin
    the ROCm 6.2.4 builds (the image's ROCm) from PyTorch's index; the CUDA sizes are unchanged."""
    script = "/usr/local/sbin/dtrun-python-env"
    amd = files(yaml.safe_load(render_cloud_init(boot(size="Standard_ND96isr_MI300X_v5"))))[script]
    assert "--extra-index-url https://download.pytorch.org/whl/rocm6.2.4" in amd
    assert (
        "printf '%s\\n' torch==2.6.0+rocm6.2.4 torchvision==0.21.0+rocm6.2.4"
        ' torchaudio==2.6.0+rocm6.2.4 >"$constraints"'
    ) in amd
    assert '--constraint "$constraints" torch numpy' in amd
    for size in ("Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96asr_v4",
                 "Standard_ND40rs_v2", "Standard_HB176rs_v4"):  # fmt: skip
        cuda = files(yaml.safe_load(render_cloud_init(boot(size=size))))[script]
        assert "rocm" not in cuda and "index-url" not in cuda and "--constraint" not in cuda
        assert '"${venv}/bin/pip" install --quiet torch numpy\n' in cuda
    assert [size.name for size in SIZES.values() if size.torch is not None] == [
        "Standard_ND96isr_MI300X_v5"
    ]
    assert all(
        (size.torch is not None) == (size.gpu is not None and size.gpu.vendor == "amd")
        for size in SIZES.values()
    )


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """A stand-in PyPI with a newer (CUDA) torch and a trainer that needs torch, and a stand-in
    for PyTorch's ROCm index."""
    tmp = tmp_path_factory.mktemp("indexes")
    pypi, rocm_index = tmp / "pypi", tmp / "rocm"
    stand_in_wheel(tmp, pypi, "torch", "2.9.0")
    stand_in_wheel(tmp, pypi, "torch", "2.6.0")
    stand_in_wheel(tmp, pypi, "trainer", "1.0", "torch>=2")
    stand_in_wheel(tmp, rocm_index, "torch", "2.6.0+rocm6.2.4")
    return pypi, rocm_index


@pytest.mark.parametrize(
    ("packages", "rocm", "expected"),
    [("torch", True, "2.6.0+rocm6.2.4"), ("trainer", True, "2.6.0+rocm6.2.4"),
     ("trainer", False, "2.9.0")],
)  # fmt: skip
def test_pip_takes_the_pinned_rocm_torch_over_a_newer_pypi_one_named_or_pulled_in(
    tmp_path, indexes, packages, rocm, expected
):
    """The rendered install step, run with a real venv and pip against the two local indexes:
    without the pins (the CUDA sizes' script) pip takes PyPI's newer torch; with them, the ROCm
    build, for a named torch and for one another package pulls in."""
    pypi, rocm_index = indexes
    build = replace(ROCM_TORCH, index_url=rocm_index.as_uri())
    dtrun = tmp_path / ".dtrun"
    script = render(
        "cloud-init/dtrun-python-env.sh.j2",
        {"dtrun_dir": str(dtrun), "venv": str(dtrun / "venv"), "packages": [packages],
         "torch": build if rocm else None, "vm_size": "Standard_ND96isr_MI300X_v5"},
    )  # fmt: skip
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": pypi.as_uri(),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}  # fmt: skip
    ran = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert (dtrun / "venv" / ".dtrun-ready").exists()
    [installed] = (dtrun / "venv").glob("lib/python*/site-packages/torch-*.dist-info")
    assert installed.name == f"torch-{expected}.dist-info"


def test_nodes_register_in_the_registry_on_the_shared_storage():
    script = files(yaml.safe_load(render_cloud_init(boot())))["/usr/local/sbin/dtrun-register"]
    assert "registry=/shared/.dtrun/nodes" in script
    assert '"schema": "dtrun.node/1"' in script


def test_golden_cloud_init(golden):
    for name in ("node-azurefiles-Standard_ND96isr_H100_v5", "head-netapp-Standard_ND96asr_v4",
                 "node-lustre-Standard_HB176rs_v4", "head-expiry"):  # fmt: skip
        golden(f"cloud-init/{name}.yaml", render_cloud_init(CASES[name]))


def test_the_registry_entry_written_at_boot_is_valid_json(tmp_path):
    """Run the register script for real, with a fake registry path."""
    cluster = boot().cluster
    script = render(
        "cloud-init/dtrun-register.sh.j2",
        {"registry": str(tmp_path / "nodes"), "ib_state_file": str(tmp_path / "ib"),
         "role": "node", "vm_size": cluster.vm_size},
    )  # fmt: skip
    (tmp_path / "ib").write_text("8/8\n")
    subprocess.run(["bash", "-c", script, "register", "active", "ready"], check=True)
    [entry] = list((tmp_path / "nodes").glob("*.json"))
    data = yaml.safe_load(entry.read_text())
    assert data["schema"] == "dtrun.node/1"
    assert (data["ib_ports_active"], data["ib_ports_expected"]) == (8, 8)
    assert (data["infiniband"], data["python"]) == ("active", "ready")
    assert data["vm_size"] == "Standard_ND96isr_H100_v5"


def test_nodes_can_ssh_to_each_other_with_host_keys_checked_and_the_head_cannot():
    node = yaml.safe_load(render_cloud_init(boot("node")))["write_files"]
    by_path = {item["path"]: item for item in node}
    key = by_path["/home/azureuser/.ssh/id_ed25519"]
    assert (key["permissions"], key["owner"], key["defer"]) == ("0600", "azureuser:azureuser", True)
    assert key["content"] == CLUSTER_KEY.private
    authorized = by_path["/home/azureuser/.ssh/authorized_keys"]
    assert authorized["append"] is True
    assert authorized["content"] == CLUSTER_KEY.public + "\n"
    assert by_path["/etc/ssh/ssh_known_hosts"]["content"] == f"10.42.1.* {PUBLIC}\n"
    head = {item["path"] for item in yaml.safe_load(render_cloud_init(boot("head")))["write_files"]}
    assert not any(path.startswith("/home/") for path in head)


# What the storage presents as its root before any machine writes to it: root's, with this mode.
# NetApp: the volume's unixPermissions as the program sends it, Azure's 0770 when it sends none
# (Azure NetApp Files, "Configure Unix permissions"). Azure Files NFS and Lustre: 0755, assumed.
def storage_root_mode(kind: StorageKind) -> int:
    if kind is not StorageKind.NETAPP:
        return 0o755
    volume = run(cluster_spec({"adminCidrs": ["203.0.113.4/32"], **STORAGE[kind]}, today=TODAY))
    return int(volume.one(":CapacityPoolVolume").inputs.get("unixPermissions", "0770"), 8)


@pytest.fixture
def admin_user():
    """A real non-root user to play the admin user; root is needed to make one."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create a non-root user")
    name = f"dtrunsbx{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    yield name
    subprocess.run(["userdel", name], check=True)


@pytest.mark.parametrize("kind", list(StorageKind))
def test_the_admin_user_can_write_where_dtrun_writes_after_boot(kind, admin_user):
    """The boot's directory step, run for real as root on a stand-in for the mounted storage,
    then the admin user stages code and writes a run there as dtrun does (mkdir -p, files)."""
    base = Path(tempfile.mkdtemp(prefix="dtrun-sandbox-"))
    try:
        base.chmod(0o755)
        mount = base / "shared"
        mount.mkdir(mode=storage_root_mode(kind))
        mount.chmod(storage_root_mode(kind))  # past the umask
        spec = cluster_spec(
            {"adminCidrs": ["203.0.113.4/32"], "adminUser": admin_user,
             "mountPath": str(mount), **STORAGE[kind]},
            today=TODAY,
        )  # fmt: skip
        document = yaml.safe_load(render_cloud_init(replace(boot(kind=kind), cluster=spec)))
        bootstrap = files(document)["/usr/local/sbin/dtrun-bootstrap"]
        assert bootstrap.index("dtrun-mount\n") < bootstrap.index("dtrun-shared-dirs\n")
        step = files(document)["/usr/local/sbin/dtrun-shared-dirs"]
        subprocess.run(["bash", "-c", step], check=True)  # as root, as cloud-init runs it
        # The Python env and the registry are root's, in the same directory: root still writes.
        (mount / ".dtrun" / "venv.lock").touch()
        dtrun = f"{mount}/.dtrun"
        as_admin = subprocess.run(
            ["runuser", "-u", admin_user, "--", "sh", "-c",
             f"set -e; mkdir -p {dtrun}/code/runner/workloads; echo x >{dtrun}/code/runner/a.py;"
             f" mkdir -p {dtrun}/runs/r1/n2/r0; echo ok >{dtrun}/runs/r1/n2/r0/stdout.log"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert as_admin.returncode == 0, as_admin.stderr
        # A second boot (another node, a reboot) keeps the ownership.
        subprocess.run(["bash", "-c", step], check=True)
        assert (mount / ".dtrun" / "code").owner() == admin_user
    finally:
        shutil.rmtree(base)


def test_nodes_ask_scheduled_events_at_boot_and_hourly_and_wait_for_its_first_answer():
    """Azure enables Scheduled Events at the first request, answers it up to two minutes late
    and disables it after 24 hours without one: the nodes keep it on, so a Preempt is seen."""
    node = files(yaml.safe_load(render_cloud_init(boot("node"))))
    service = node["/etc/systemd/system/dtrun-scheduled-events.service"]
    timer = node["/etc/systemd/system/dtrun-scheduled-events.timer"]
    assert "/metadata/scheduledevents?api-version=" in service
    assert "--max-time 130" in service
    assert "OnBootSec=30s" in timer and "OnUnitActiveSec=1h" in timer
    head = files(yaml.safe_load(render_cloud_init(boot("head"))))
    assert "/etc/systemd/system/dtrun-scheduled-events.timer" not in head
    remote = render("remote/scheduled-events.sh.j2", {"version": "0", "imds": "http://x"})
    [events] = [line for line in remote.splitlines() if "/metadata/scheduledevents" in line]
    assert int(events.split("--max-time ")[1].split()[0]) >= 120
