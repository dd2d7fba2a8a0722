"""Slurm on the cluster (dtrun:scheduler slurm): slurm.conf and gres.conf rendered from
templates/slurm/, and the munge key derived from a secret kept in Pulumi state. Pure.

The head runs slurmctld, every node slurmd (docs/azure.md "Slurm"). Slurm's node names are the
scale set's computer names, which Azure's DNS resolves inside the VNet (docs/facts.md §12).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from runner.azure.catalog import SIZES, VmSize
from runner.render import render
from runner.spec.cluster import ClusterSpec

SLURMCTLD_PORT = 6817  # Slurm's defaults (docs/facts.md §12)
SLURMD_PORT = 6818
PARTITION = "nodes"
# munge accepts keys of 32 to 1024 bytes; 1024, its maximum (docs/facts.md §12).
MUNGE_KEY_BYTES = 1024
# RealMemory this far under the size's memory: a node that reports less than RealMemory is
# drained, and the kernel sees a few percent less than the size's GiB (docs/facts.md §12).
MEMORY_HEADROOM = 0.05
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class SlurmFiles:
    """The files every machine of a Slurm cluster gets, the same on head and nodes."""

    slurm_conf: str
    gres_conf: str | None  # None: no GPUs Slurm can hand out (CPU sizes, AMD: see docs)
    node_names: tuple[str, ...]  # every node's name in slurm.conf, in instance-ID order


def computer_name(prefix: str, instance_id: int) -> str:
    """A scale set VM's computer name: the prefix and the instance ID in base 36, six digits
    (docs/facts.md §12): instance 85 of dtrunnode is dtrunnode00002D."""
    digits = ""
    while True:
        instance_id, digit = divmod(instance_id, 36)
        digits = _DIGITS[digit] + digits
        if not instance_id:
            return prefix + digits.rjust(6, "0")


def node_names(cluster: ClusterSpec) -> tuple[str, ...]:
    """The nodes' names for instance IDs 0 to nodeCount-1, those a new scale set gets."""
    prefix = f"{cluster.name_prefix}node"
    return tuple(computer_name(prefix, index) for index in range(cluster.node_count))


def hostlists(names: tuple[str, ...], prefix: str) -> list[str]:
    """The names as Slurm hostlist expressions: runs of decimal suffixes become one range
    (dtrunnode[000000-000009]); names with letters in their suffix stand alone."""
    groups: list[list[str]] = []
    for name in names:
        suffix = name.removeprefix(prefix)
        last = groups[-1][-1].removeprefix(prefix) if groups else ""
        if suffix.isdigit() and last.isdigit() and int(suffix) == int(last) + 1:
            groups[-1].append(name)
        else:
            groups.append([name])
    return [
        group[0]
        if len(group) == 1
        else f"{prefix}[{group[0].removeprefix(prefix)}-{group[-1].removeprefix(prefix)}]"
        for group in groups
    ]


def real_memory_mib(size: VmSize) -> int:
    return int(size.memory_gb * 1024 * (1 - MEMORY_HEADROOM))


def slurm_gpus(size: VmSize) -> int:
    """GPUs Slurm hands out as gres: NVIDIA's, by their /dev/nvidiaN files. AMD GPUs are left
    out: Ubuntu 22.04's Slurm has no ROCm detection and their device files are unverified."""
    return size.gpu_count if size.gpu is not None and size.gpu.vendor == "nvidia" else 0


def slurm_files(cluster: ClusterSpec) -> SlurmFiles:
    size = SIZES[cluster.vm_size]
    names = node_names(cluster)
    gpus = slurm_gpus(size)
    context = {
        "cluster_name": cluster.name_prefix,
        "controller": f"{cluster.name_prefix}-head",
        "vm_size": size.name,
        "ctld_port": SLURMCTLD_PORT,
        "slurmd_port": SLURMD_PORT,
        "cpus": size.vcpus,
        "memory_gib": size.memory_gb,
        "real_memory": real_memory_mib(size),
        "headroom_percent": round(MEMORY_HEADROOM * 100),
        "gpus": gpus,
        "gpu_vendor": size.gpu.vendor if size.gpu else None,
        "node_lists": hostlists(names, f"{cluster.name_prefix}node"),
        "node_count": len(names),
        "partition": PARTITION,
    }
    return SlurmFiles(
        slurm_conf=render("slurm/slurm.conf.j2", context),
        gres_conf=render("slurm/gres.conf.j2", context) if gpus else None,
        node_names=names,
    )


def munge_key(seed: str) -> str:
    """The cluster's munge key, base64: 1024 bytes expanded with SHAKE-256 from a secret that
    Pulumi keeps in state (an ed25519 private key: 256 random bits, munge's minimum key length).
    The same seed gives the same key, so an update does not change it."""
    key = hashlib.shake_256(b"dtrun munge key\n" + seed.encode()).digest(MUNGE_KEY_BYTES)
    return base64.b64encode(key).decode()
