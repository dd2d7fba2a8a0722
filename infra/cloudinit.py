"""cloud-init for the head VM and the GPU nodes, rendered from templates/cloud-init/. Pure.

Every machine mounts the shared storage, hands dtrun's directories there to the admin user,
(nodes) waits for its InfiniBand ports, installs the
Python environment on the shared storage once for the cluster, and registers itself there; with
dtrun:scheduler slurm it then joins Slurm (the head as controller, the nodes as slurmd).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dtrun.azure.catalog import SIZES
from dtrun.infra.slurm import slurm_files, slurmd_options
from dtrun.render import render
from dtrun.spec.cluster import ClusterSpec, Scheduler, StorageKind

MAX_CUSTOM_DATA_BYTES = 64 * 1024  # Azure's limit on decoded custom data (docs/facts.md §4)
BOOTSTRAP_LOG = "/var/log/dtrun-bootstrap.log"
IB_STATE_FILE = "/run/dtrun/ib-state"
SLURM_STAGED = "/etc/dtrun/slurm"  # root's copies until the packages are in (dtrun-slurm)
# The Ubuntu 22.04 HPC image pins Ubuntu's slurm* packages to -1 and adds Microsoft's Slurm
# repository, whose SchedMD-built slurm-smd packages are the only Slurm apt can install there;
# munge comes from Ubuntu (docs/facts.md §12, azhpc-images components/slurm-repo/slurm-u.pin).
SLURM_PACKAGES = {
    "head": ("slurm-smd", "slurm-smd-client", "slurm-smd-slurmctld"),
    "node": ("slurm-smd", "slurm-smd-client", "slurm-smd-slurmd"),
}
SLURM_UID = 11100  # SlurmUser's uid and gid on every machine: CycleCloud's (docs/facts.md §12)
EXPIRY_SCRIPT = Path(__file__).with_name("expiry_script.py")  # shipped verbatim to the head
EXPIRY_CONFIG = "/etc/dtrun/expiry.json"
EXPIRY_TIMER = "dtrun-expiry.timer"
SCHEDULED_EVENTS_TIMER = "dtrun-scheduled-events.timer"
# sshd probes a silent client every minute and drops it after three unanswered probes.
CLIENT_ALIVE = {"alive_interval_s": 60, "alive_count": 3}


@dataclass(frozen=True)
class Mount:
    fstype: str
    options: str
    why: str


# Each storage kind's recommended client options (docs/facts.md §4).
MOUNTS: dict[StorageKind, Mount] = {
    StorageKind.AZURE_FILES: Mount(
        "nfs",
        "vers=4,minorversion=1,sec=sys,nconnect=4",
        "Azure Files NFS 4.1; nconnect=4 spreads the traffic over four TCP connections.",
    ),
    StorageKind.NETAPP: Mount(
        "nfs",
        "rw,hard,rsize=262144,wsize=262144,vers=4.1,tcp",
        "NetApp Files NFS 4.1: hard mounts and 256 KiB transfers, as NetApp recommends.",
    ),
    StorageKind.LUSTRE: Mount(
        "lustre",
        "noatime,flock",
        "Lustre over TCP: no access-time writes; flock for the cluster-wide install lock.",
    ),
}


@dataclass(frozen=True)
class CloudFile:
    path: str
    mode: str
    content: str
    owner: str = "root:root"
    append: bool = False
    defer: bool = False  # written in the final stage, once the admin user exists


@dataclass(frozen=True)
class ClusterKey:
    """The key pair the nodes use to reach each other (head-only launchers: mpirun, pdsh)."""

    private: str
    public: str
    known_hosts_line: str  # "10.42.1.* ssh-ed25519 ...": every node's host key, checked strictly


@dataclass(frozen=True)
class HeadExpiry:
    """What the head's expiry timer needs that only Azure knows (Outputs resolved). The rules
    themselves are the resource group's tags, read at every run."""

    group_id: str  # /subscriptions/S/resourceGroups/G: the only scope the identity has
    client_id: str  # the head's user-assigned identity, named in the IMDS token request


@dataclass(frozen=True)
class Boot:
    """What one machine's cloud-init needs, as plain values (Outputs already resolved)."""

    role: str  # "head" or "node"
    cluster: ClusterSpec
    mount_source: str  # e.g. ACCOUNT.file.core.windows.net:/ACCOUNT/SHARE
    host_key_private: str  # OpenSSH ed25519 private key
    host_key_public: str
    cluster_key: ClusterKey | None = None  # nodes only
    munge_key: str | None = field(default=None, repr=False)  # base64; with scheduler slurm
    expiry: HeadExpiry | None = None  # the head, when dtrun:ttlHours or idleMinutes is on


def _slurm(boot: Boot, machine: Mapping[str, object]) -> list[CloudFile]:
    """The munge key and (head) Slurm's configuration, staged for dtrun-slurm, and the script
    itself. Nothing here depends on nodeCount: the nodes join as dynamic nodes."""
    if boot.munge_key is None:
        raise ValueError("a Slurm cluster's machines need the munge key")
    confs: dict[str, str] = {}
    if boot.role == "head":
        conf = slurm_files(boot.cluster)
        confs["slurm.conf"] = conf.slurm_conf
        if conf.gres_conf is not None:
            confs["gres.conf"] = conf.gres_conf
    context = {
        **machine,
        "slurm_staged": SLURM_STAGED,
        "slurm_daemon": "slurmctld" if boot.role == "head" else "slurmd",
        "slurm_packages": SLURM_PACKAGES[boot.role],
        "slurm_probe": SLURM_PACKAGES[boot.role][0],
        "slurm_uid": SLURM_UID,
        "slurm_version_file": f"{boot.cluster.storage.dtrun_dir}/slurm-version",
        "slurm_confs": list(confs),
        "slurmd_options": slurmd_options(boot.cluster),
    }
    files = [CloudFile(f"{SLURM_STAGED}/{name}", "0644", text) for name, text in confs.items()]
    files += [
        CloudFile(f"{SLURM_STAGED}/munge.key.b64", "0400", boot.munge_key + "\n"),
        CloudFile(
            "/usr/local/sbin/dtrun-slurm", "0755", render("cloud-init/dtrun-slurm.sh.j2", context)
        ),
    ]
    if boot.role == "node":
        files.append(
            CloudFile(
                "/etc/systemd/system/slurmd.service.d/dtrun-infiniband.conf",
                "0644",
                render("cloud-init/slurmd-infiniband.conf.j2", context),
            )
        )
    return files


def _expiry(cluster: ClusterSpec, expiry: HeadExpiry) -> list[CloudFile]:
    """The expiry script, its settings, its systemd service and timer; sshd's liveness probes."""
    config = {"group_id": expiry.group_id, "client_id": expiry.client_id}
    script = "/usr/local/sbin/dtrun-expiry"
    # The action is read from the group's tags at every run: the unit does not name it, so a
    # change of dtrun:expiryAction leaves the head's custom data as it was.
    context = {"script": script, "config": EXPIRY_CONFIG}
    unit = "/etc/systemd/system/dtrun-expiry"
    return [
        CloudFile(EXPIRY_CONFIG, "0644", json.dumps(config, indent=2) + "\n"),
        CloudFile(script, "0755", EXPIRY_SCRIPT.read_text()),
        CloudFile(f"{unit}.service", "0644", render("cloud-init/dtrun-expiry.service.j2", context)),
        CloudFile(f"{unit}.timer", "0644", render("cloud-init/dtrun-expiry.timer.j2", context)),
        CloudFile(
            "/etc/ssh/sshd_config.d/dtrun-client-alive.conf",
            "0644",
            render("cloud-init/sshd-client-alive.conf.j2", CLIENT_ALIVE),
        ),
    ]


def _node_to_node_ssh(user: str, key: ClusterKey) -> list[CloudFile]:
    """ssh from any node to any other as the admin user, host keys checked (not trusted blindly)."""
    home, owner = f"/home/{user}/.ssh", f"{user}:{user}"
    return [
        CloudFile(f"{home}/id_ed25519", "0600", key.private, owner, defer=True),
        CloudFile(f"{home}/id_ed25519.pub", "0644", key.public + "\n", owner, defer=True),
        CloudFile(f"{home}/authorized_keys", "0600", key.public + "\n", owner, True, True),
        CloudFile("/etc/ssh/ssh_known_hosts", "0644", key.known_hosts_line + "\n"),
    ]


def render_cloud_init(boot: Boot) -> str:
    cluster = boot.cluster
    storage = cluster.storage
    size = SIZES[cluster.vm_size]
    mount = MOUNTS[storage.kind]
    context: dict[str, object] = {
        "role": boot.role,
        "vm_size": cluster.vm_size if boot.role == "node" else cluster.head_vm_size,
        "storage_kind": storage.kind.value,
        "mount_path": storage.mount_path,
        "mount_source": boot.mount_source,
        "mount_fstype": mount.fstype,
        "mount_options": mount.options,
        "mount_why": mount.why,
        "dtrun_dir": storage.dtrun_dir,
        "admin_user": cluster.admin_user,
        "registry": storage.registry_dir,
        "venv": storage.venv_dir,
        "packages": cluster.python_packages,
        "torch": size.torch,  # where the nodes' GPUs need a torch PyPI lacks (ROCm)
        "ib_ports": size.ib_ports,
        "ib_state_file": IB_STATE_FILE,
        "log": BOOTSTRAP_LOG,
        "env": size.env,
        "slurm": cluster.scheduler is Scheduler.SLURM,
    }
    scripts = ["dtrun-bootstrap", "dtrun-mount", "dtrun-shared-dirs", "dtrun-register"]
    if boot.role == "node":
        # The nodes install the Python environment, not the head: the package list then stays
        # out of the head's custom data, which Azure cannot update (docs/azure.md).
        scripts[3:3] = ["dtrun-ib-check", "dtrun-python-env"]
    files = [
        CloudFile(f"/usr/local/sbin/{name}", "0755", render(f"cloud-init/{name}.sh.j2", context))
        for name in scripts
    ]
    if boot.role == "node":
        files.append(
            CloudFile(
                "/etc/profile.d/dtrun-nccl.sh", "0644", render("cloud-init/nccl-env.sh.j2", context)
            )
        )
        for unit in ("service", "timer"):
            files.append(
                CloudFile(
                    f"/etc/systemd/system/dtrun-scheduled-events.{unit}",
                    "0644",
                    render(f"cloud-init/dtrun-scheduled-events.{unit}.j2", {}),
                )
            )
    if boot.cluster_key is not None:
        files.extend(_node_to_node_ssh(cluster.admin_user, boot.cluster_key))
    if cluster.scheduler is Scheduler.SLURM:
        files.extend(_slurm(boot, context))
    if boot.expiry is not None:
        files.extend(_expiry(cluster, boot.expiry))
    return render(
        "cloud-init/cloud-config.yaml.j2",
        {
            **context,
            "host_key_private": boot.host_key_private,
            "host_key_public": boot.host_key_public,
            "files": files,
            "timers": [
                *([EXPIRY_TIMER] if boot.expiry is not None else []),
                *([SCHEDULED_EVENTS_TIMER] if boot.role == "node" else []),
            ],
        },
    )
