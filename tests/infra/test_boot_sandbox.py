"""The rendered cloud-init of a Slurm head and node, run as far as this machine allows
(tests/infra/sandbox.py says what is real and what is stubbed): what the boot scripts wrote,
with which owners and modes, what they would have run, and that the admin user can then write
where dtrun writes."""

from __future__ import annotations

import base64
import datetime
import json
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from dtrun.azure.config import cluster_spec
from dtrun.infra.cloudinit import SLURM_PACKAGES, SLURM_STAGED, Boot, ClusterKey, render_cloud_init
from tests.infra import sandbox

TODAY = datetime.date(2026, 11, 23)
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nTEST-ONLY\n-----END OPENSSH PRIVATE KEY-----\n"
PUBLIC = "ssh-ed25519 AAAATESTONLY dtrun-host"
CLUSTER_KEY = ClusterKey(PRIVATE, "ssh-ed25519 AAAACLUSTER dtrun-cluster", f"10.42.1.* {PUBLIC}")
MUNGE = b"TEST-ONLY-MUNGE-KEY-" * 52
SOURCE = "dtrunnfs1.file.core.windows.net:/dtrunnfs1/shared"


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))[2:].zfill(4)


def owner(path: Path) -> str:
    return f"{path.owner()}:{path.group()}"


@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    """A head, then a node, booted against one shared directory; the admin user a real non-root
    user made for the test."""
    if os.geteuid() != 0:
        pytest.skip("the sandbox needs root: a mount namespace, overlays and a new user")
    for tool in ("unshare", "useradd", "runuser"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (util-linux, passwd)")
    user = f"dtrunsbx{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", user], check=True)
    base = Path(tempfile.mkdtemp(prefix="dtrun-boot-"))
    base.chmod(0o755)  # the admin user must reach the shared directory inside it
    try:
        shared = base / "shared"
        shared.mkdir(mode=0o755)
        index = tmp_path_factory.mktemp("index")
        sandbox.stand_in_wheel(index, index / "simple", "torch", "2.9.0")
        cluster = cluster_spec(
            {"adminCidrs": ["203.0.113.4/32"], "adminUser": user, "mountPath": str(shared),
             "scheduler": "slurm", "pythonPackages": ["torch"]},
            today=TODAY,
        )  # fmt: skip
        munge = base64.b64encode(MUNGE).decode()
        pip = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": (index / "simple").as_uri(),
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}  # fmt: skip
        machines = {}
        for role in ("head", "node"):
            boot = Boot(role, cluster, SOURCE, PRIVATE, PUBLIC,
                        CLUSTER_KEY if role == "node" else None, munge_key=munge)  # fmt: skip
            machines[role] = sandbox.boot(
                base / "machines", role, render_cloud_init(boot), user, pip
            )
        yield user, shared, machines
    finally:
        shutil.rmtree(base)
        subprocess.run(["userdel", user], check=True)


def test_both_boots_run_to_the_end(booted):
    _, _, machines = booted
    for machine in machines.values():
        assert machine.returncode == 0, machine.log
        assert "runcmd: 0" in machine.log, machine.log
        assert "dtrun-bootstrap:" in machine.log and " done (" in machine.log, machine.log


def test_the_storage_is_put_in_fstab_and_mounted(booted):
    _, shared, machines = booted
    for machine in machines.values():
        fstab = machine.file("/etc/fstab").read_text()
        expected = (
            f"{SOURCE} {shared} nfs vers=4,minorversion=1,sec=sys,nconnect=4,_netdev,nofail 0 0"
        )
        assert fstab.endswith(expected + "\n")
        assert machine.ran("mount") == [[str(shared)]]


def test_the_head_installs_munge_and_slurmctld_and_the_node_the_heads_slurmd(booted):
    _, shared, machines = booted
    head, node = machines["head"], machines["node"]
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    assert head.ran("apt-get") == [
        [*lock, "update", "-q"],
        [*lock, "install", "-y", "-q", "munge"],
        [*lock, "install", "-y", "-q", *SLURM_PACKAGES["head"]],
    ]
    assert (shared / ".dtrun" / "slurm-version").read_text() == sandbox.SLURM_VERSION
    pinned = [f"{package}={sandbox.SLURM_VERSION}" for package in SLURM_PACKAGES["node"]]
    assert node.ran("apt-get")[-1] == [*lock, "install", "-y", "-q", *pinned]
    assert ["restart", "slurmctld"] in head.ran("systemctl")
    assert ["restart", "slurmd"] in node.ran("systemctl")  # InfiniBand is active
    assert ["enable", "--now", "dtrun-scheduled-events.timer"] in node.ran("systemctl")


def test_slurm_and_munge_files_have_their_owners_and_modes(booted):
    _, _, machines = booted
    for machine in machines.values():
        key = machine.file("/etc/munge/munge.key")
        assert key.read_bytes() == MUNGE
        assert (owner(key), mode(key)) == ("munge:munge", "0400")
        assert not machine.file(f"{SLURM_STAGED}/munge.key.b64").exists()  # removed once used
        assert not machine.file(f"{SLURM_STAGED}/munge.key").exists()
        logs = machine.seen("/var/log/slurm")  # this machine's, where Debian's Slurm made it
        assert (owner(logs), mode(logs)) == ("slurm:slurm", "0755")
    head = machines["head"]
    conf = head.file("/etc/slurm/slurm.conf")
    assert (owner(conf), mode(conf)) == ("root:root", "0644")
    assert "SlurmctldParameters=enable_configless" in conf.read_text()
    spool = head.file("/var/spool/slurmctld")
    assert (owner(spool), mode(spool)) == ("slurm:slurm", "0700")
    dropin = machines["node"].file("/etc/systemd/system/slurmd.service.d/dtrun-infiniband.conf")
    assert "ExecStartPre=/usr/local/sbin/dtrun-ib-check" in dropin.read_text()
    assert not machines["node"].file("/etc/slurm/slurm.conf").exists()  # configless


def test_the_node_finds_infiniband_installs_the_environment_and_registers(booted):
    _, shared, _ = booted
    registry = shared / ".dtrun" / "nodes"
    entries = {path.name: json.loads(path.read_text()) for path in registry.glob("*.json")}
    assert sorted(entries) == ["head.json", "node.json"]
    head, node = entries["head.json"], entries["node.json"]
    assert (head["role"], head["infiniband"], head["python"]) == ("head", "none", "none")
    assert (node["role"], node["infiniband"], node["python"]) == ("node", "active", "ready")
    assert (node["ib_ports_active"], node["ib_ports_expected"], node["gpus"]) == (8, 8, 8)
    assert node["vm_size"] == "Standard_ND96isr_H100_v5"
    venv = shared / ".dtrun" / "venv"
    assert (venv / ".dtrun-ready").exists()
    assert list(venv.glob("lib/python*/site-packages/torch-2.9.0.dist-info"))
    assert owner(venv) == "root:root"  # root's, beside the admin user's code and runs


def test_the_nodes_cluster_key_is_the_admin_users_and_the_heads_has_none(booted):
    user, _, machines = booted
    ssh = machines["node"].file(f"/home/{user}/.ssh")
    assert (owner(ssh / "id_ed25519"), mode(ssh / "id_ed25519")) == (f"{user}:{user}", "0600")
    assert (ssh / "authorized_keys").read_text() == CLUSTER_KEY.public + "\n"
    assert machines["node"].file("/etc/ssh/ssh_known_hosts").read_text().startswith("10.42.1.* ")
    assert not machines["head"].file(f"/home/{user}/.ssh/id_ed25519").exists()


def test_the_admin_user_writes_where_dtrun_writes_after_both_boots(booted):
    user, shared, _ = booted
    dtrun = shared / ".dtrun"
    for name in ("", "code", "runs"):
        assert (owner(dtrun / name), mode(dtrun / name)) == (f"{user}:{user}", "0755")
    as_admin = subprocess.run(
        ["runuser", "-u", user, "--", "sh", "-c",
         f"set -e; mkdir -p {dtrun}/code/runner; echo x >{dtrun}/code/runner/a.py;"
         f" mkdir -p {dtrun}/runs/r1/n2/r0; echo ok >{dtrun}/runs/r1/n2/r0/stdout.log"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert as_admin.returncode == 0, as_admin.stderr


def test_the_boots_left_this_machines_system_files_alone(booted):
    _, _, machines = booted
    for machine in machines.values():
        assert machine.file("/etc/fstab").exists()  # written in the overlay ...
    assert f" {booted[1]} " not in Path("/etc/fstab").read_text()  # ... not here
