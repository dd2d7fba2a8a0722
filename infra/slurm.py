"""Slurm on the cluster (dtrun:scheduler slurm): slurm.conf and gres.conf rendered from
templates/slurm/, and the munge key derived from a secret kept in Pulumi state. Pure.

The head runs slurmctld, every node slurmd (docs/azure.md "Slurm"). The nodes register as
Slurm's dynamic nodes under their hostnames, the scale set's computer names, and fetch the
configuration from slurmctld (configless): slurm.conf names no node and no node count.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from dtrun.azure.catalog import MAX_NODES_BY_SUPPORT_REQUEST, SIZES, VmSize
from dtrun.render import render
from dtrun.spec.cluster import ClusterSpec

SLURMCTLD_PORT = 6817  # Slurm's defaults (docs/facts.md §12)
SLURMD_PORT = 6818
PARTITION = "nodes"
# munge accepts keys of 32 to 1024 bytes; 1024, its maximum (docs/facts.md §12).
MUNGE_KEY_BYTES = 1024
# Nodes join as dynamic nodes, so slurm.conf lists none; slurmctld holds at most this many.
# Scale-ins and reimages bring new computer names, and a node removed stays in slurmctld until
# `scontrol delete`: room for three times the scale set's usual ceiling (docs/azure.md "Slurm").
MAX_NODE_COUNT = MAX_NODES_BY_SUPPORT_REQUEST


@dataclass(frozen=True)
class SlurmFiles:
    """The controller's configuration. The nodes fetch it from slurmctld when slurmd starts
    (configless), so no node carries a copy that a later `pulumi up` would leave stale."""

    slurm_conf: str
    gres_conf: str | None  # None: no GPUs Slurm can hand out (CPU sizes, AMD: see docs)


def slurm_gpus(size: VmSize) -> int:
    """GPUs Slurm hands out as gres: NVIDIA's, by their /dev/nvidiaN files. AMD GPUs are left
    out: their device files and Slurm's ROCm detection on the image are unverified."""
    return size.gpu_count if size.gpu is not None and size.gpu.vendor == "nvidia" else 0


def slurmd_options(cluster: ClusterSpec) -> tuple[str, ...]:
    """slurmd's arguments on a node: register itself as a dynamic node (-Z) with the GPUs it
    offers, and fetch slurm.conf and gres.conf from the controller (docs/facts.md §12). Each
    argument is one word: systemd splits $SLURMD_OPTIONS at whitespace, quotes or not."""
    gpus = slurm_gpus(SIZES[cluster.vm_size])
    options = ["-Z", "--conf-server", f"{cluster.name_prefix}-head:{SLURMCTLD_PORT}"]
    if gpus:
        options += ["--conf", f"Gres=gpu:{gpus}"]
    return tuple(options)


def slurm_files(cluster: ClusterSpec) -> SlurmFiles:
    """slurm.conf and gres.conf: the same for any nodeCount, so a `pulumi up` that scales the
    nodes leaves the head's cloud-init as it was (docs/azure.md "What an update changes")."""
    size = SIZES[cluster.vm_size]
    gpus = slurm_gpus(size)
    context = {
        "cluster_name": cluster.name_prefix,
        "controller": f"{cluster.name_prefix}-head",
        "vm_size": size.name,
        "ctld_port": SLURMCTLD_PORT,
        "slurmd_port": SLURMD_PORT,
        "gpus": gpus,
        "gpu_vendor": size.gpu.vendor if size.gpu else None,
        "max_nodes": MAX_NODE_COUNT,
        "partition": PARTITION,
    }
    return SlurmFiles(
        slurm_conf=render("slurm/slurm.conf.j2", context),
        gres_conf=render("slurm/gres.conf.j2", context) if gpus else None,
    )


def munge_key(seed: str) -> str:
    """The cluster's munge key, base64: 1024 bytes expanded with SHAKE-256 from a secret that
    Pulumi keeps in state (an ed25519 private key: 256 random bits, munge's minimum key length).
    The same seed gives the same key, so an update does not change it."""
    key = hashlib.shake_256(b"dtrun munge key\n" + seed.encode()).digest(MUNGE_KEY_BYTES)
    return base64.b64encode(key).decode()
