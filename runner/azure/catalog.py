"""The Azure InfiniBand size catalog, shared by the runner and the Pulumi program.

Every fact here comes from docs/facts.md: sizes and GPUs (section 1), images (2), placement
limits (3), NCCL/UCX settings (5) and expected all-reduce bus bandwidth (6).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, replace

from dtrun.errors import UsageError
from dtrun.spec.launchplan import CliArg, EnvVar

# A single-placement-group scale set holds at most 100 VMs, 300 by support request
# (docs/facts.md §3).
MAX_NODES = 100
MAX_NODES_BY_SUPPORT_REQUEST = 300


class CatalogError(UsageError):
    """A size or node count that cannot make an InfiniBand cluster."""


@dataclass(frozen=True)
class Gpu:
    model: str
    memory_gb: int
    peak_bf16_tflops: float  # dense BF16/FP16 tensor peak per GPU, for MFU
    peak_verified: bool
    vendor: str  # "nvidia" (NCCL) or "amd" (RCCL)


@dataclass(frozen=True)
class Image:
    publisher: str
    offer: str
    sku: str
    version: str = "latest"

    @property
    def urn(self) -> str:
        return f"{self.publisher}:{self.offer}:{self.sku}:{self.version}"

    @classmethod
    def parse(cls, urn: str) -> Image:
        parts = urn.split(":")
        if len(parts) != 4 or not all(parts):
            raise CatalogError(
                f"image {urn!r} is not an image URN",
                why="a URN has four parts, PUBLISHER:OFFER:SKU:VERSION",
                fix="pass e.g. microsoft-dsvm:ubuntu-hpc:2204:latest",
            )
        return cls(*parts)


@dataclass(frozen=True)
class TorchBuild:
    """Where pip finds the PyTorch build a size's GPUs need, when PyPI's is not it (docs/facts.md
    §14): the index, and the exact builds of one release, pinned so no other index's wins."""

    index_url: str
    pins: tuple[str, ...]  # pip requirements, each NAME==VERSION+LOCAL


# Images with OFED, drivers and NCCL (docs/facts.md §2); all Gen2.
HPC_IMAGE = Image("microsoft-dsvm", "ubuntu-hpc", "2204")
V100_IMAGE = Image("microsoft-dsvm", "ubuntu-hpc", "2204-v100")
ROCM_IMAGE = Image("microsoft-dsvm", "ubuntu-hpc", "2204-rocm")
# The ROCm image ships ROCm 6.2.4; torch 2.6 is the release PyTorch's compatibility matrix pairs
# with it, on PyTorch's rocm6.2.4 index (docs/facts.md §14). torchvision and torchaudio of the
# same release, so a package list that needs them does not pull PyPI's CUDA builds.
ROCM_TORCH = TorchBuild(
    "https://download.pytorch.org/whl/rocm6.2.4",
    ("torch==2.6.0+rocm6.2.4", "torchvision==0.21.0+rocm6.2.4", "torchaudio==2.6.0+rocm6.2.4"),
)


@dataclass(frozen=True)
class VmSize:
    name: str
    family: str
    vcpus: int
    memory_gb: int
    ib_name: str  # FDR, EDR, HDR, NDR
    ib_gbps: int  # per port
    ib_ports: int = 1
    gpu_count: int = 0
    gpu: Gpu | None = None
    sriov: bool = True
    accelerated_networking: bool = True
    image: Image = HPC_IMAGE
    torch: TorchBuild | None = None  # None: PyPI's torch, whose Linux wheels are CUDA builds
    topo_file: str | None = None  # NCCL topology file the image ships for this size
    busbw_single_node_gbs: float | None = None  # expected all-reduce busbw on one VM (GB/s)
    busbw_health_threshold_gbs: float | None = None  # Azure node health check pass mark
    busbw_health_size: str = "8G"  # the message size that pass mark is measured at
    busbw_cross_node_gbs: tuple[float, float] | None = None  # expected range across nodes
    env: tuple[EnvVar, ...] = ()  # NCCL/UCX settings for this size, each with why
    mpi_args: tuple[CliArg, ...] = ()  # OpenMPI binding and collectives for this size, with why
    retired_on: datetime.date | None = None
    retires_on: datetime.date | None = None  # announced retirement
    successors: tuple[str, ...] = ()

    @property
    def has_infiniband(self) -> bool:
        return self.ib_ports > 0 and self.sriov

    @property
    def ib_total_gbps(self) -> int:
        return self.ib_gbps * self.ib_ports


# Eight NDR ports, 8 x 400 Gb/s = 400 GB/s: a ring all-reduce across nodes crosses each node's
# NICs, so its busbw cannot pass that line rate (docs/facts.md §6, §7, §10). Runs reach ~370.
NDR_CROSS_NODE = (370.0, 400.0)


V100_PCIE = Gpu("V100 16GB PCIe", 16, 112.0, peak_verified=False, vendor="nvidia")
V100_SXM = Gpu("V100 32GB SXM", 32, 125.0, peak_verified=True, vendor="nvidia")
A100_40 = Gpu("A100 40GB", 40, 312.0, peak_verified=True, vendor="nvidia")
A100_80 = Gpu("A100 80GB", 80, 312.0, peak_verified=True, vendor="nvidia")
H100 = Gpu("H100 80GB", 80, 989.0, peak_verified=True, vendor="nvidia")
H200 = Gpu("H200 141GB", 141, 989.0, peak_verified=True, vendor="nvidia")
MI300X = Gpu("MI300X 192GB", 192, 1307.0, peak_verified=True, vendor="amd")
K80 = Gpu("K80", 12, 0.0, peak_verified=False, vendor="nvidia")

IB_SUCCESSORS = ("Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4", "Standard_ND96isr_H100_v5")

# NCCL/UCX settings (docs/facts.md §5). The image writes the first three to /etc/nccl.conf on
# NDv4/NDv5; dtrun exports them too, so they hold for every launcher and survive a missing
# nccl.conf.
_BOOTSTRAP = (
    EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "GPU indices in PCI order, as the topology file"),
    EnvVar("NCCL_SOCKET_IFNAME", "eth0", "NCCL bootstrap over the Ethernet NIC, not ib0/docker0"),
)
_UCX = (
    EnvVar("UCX_IB_PCI_RELAXED_ORDERING", "on", "relaxed PCIe ordering for UCX over IB on Azure"),
    EnvVar("UCX_TLS", "tcp", "MPI's own traffic over TCP, leaving InfiniBand to NCCL"),
    EnvVar("UCX_NET_DEVICES", "eth0", "that TCP on the Ethernet NIC (Azure's NCCL health check)"),
)


def _nd_env(topo: str) -> tuple[EnvVar, ...]:
    return (
        EnvVar(
            "NCCL_IB_PCI_RELAXED_ORDERING", "1", "relaxed PCIe ordering, as the image's nccl.conf"
        ),
        EnvVar("NCCL_TOPO_FILE", topo, "the host's PCIe/NVLink topology, hidden from the VM"),
        EnvVar("NCCL_IGNORE_CPU_AFFINITY", "1", "the topology file's NUMA affinity wins"),
        EnvVar("NCCL_NET_GDR_LEVEL", "5", "GPUDirect RDMA across CPU sockets (Azure IB tests)"),
        *_BOOTSTRAP,
        *_UCX,
    )


# OpenMPI options of Azure's NCCL health check for the 8-GPU ND sizes (docs/facts.md §5). Ranks
# are placed with --map-by ppr:N:node by the mpirun launcher, N being the processes per node.
_ND_MPI = (
    CliArg(("--bind-to", "numa"), "each rank on the NUMA domain of its GPU (Azure NCCL check)"),
    CliArg(
        ("--mca", "coll_hcoll_enable", "0"),
        "no HCOLL collectives: NCCL does the collectives, MPI only starts ranks (Azure check)",
    ),
)
# With no size known (the embedded cluster, whose simulated nodes share this machine's cores),
# binding would pin every node's first rank to the same core.
UNKNOWN_SIZE_MPI = (
    CliArg(("--bind-to", "none"), "no size known: simulated nodes share this machine's cores"),
)

_NDV4_ENV = _nd_env("/opt/microsoft/ndv4/topo.xml")
_NDV5_ENV = (
    *_nd_env("/opt/microsoft/ndv5/topo.xml"),
    # Multi-node NDv5 tuning from Azure's validation configs (docs/facts.md §5).
    EnvVar("NCCL_MIN_NCHANNELS", "32", "enough channels to fill 8 NDR links (Azure NDv5 tuning)"),
    EnvVar("NCCL_IB_QPS_PER_CONNECTION", "4", "spread each connection over 4 queue pairs"),
    EnvVar("NCCL_P2P_NET_CHUNKSIZE", "2097152", "2 MiB network chunks (Azure NDv5 tuning)"),
    EnvVar("NCCL_PXN_DISABLE", "1", "no PXN rail relaying through NVLink (Azure NDv5 tuning)"),
)
_H200_ENV = (
    *_NDV5_ENV,
    EnvVar(
        "NCCL_IB_HCA",
        "mlx5_ib",
        "skip the Ethernet RDMA device mlx5_an0 (inferred, unverified: override with --env)",
    ),
)
_NDV2_ENV = (
    EnvVar("NCCL_TOPO_FILE", "/opt/microsoft/ndv2-topo.xml", "NDv2's NVLink/PCIe topology"),
    *_BOOTSTRAP,
    *_UCX,
)
_NCV3_ENV = _BOOTSTRAP  # no topology file for NCv3 (docs/facts.md §5)
_ROCM_ENV = (EnvVar("NCCL_SOCKET_IFNAME", "eth0", "RCCL bootstrap over the Ethernet NIC, not ib0"),)


# An 8-GPU ND size: 96 vCPUs, one InfiniBand port per GPU.
_ND = VmSize(
    name="", family="", vcpus=96, memory_gb=0, ib_name="", ib_gbps=0, ib_ports=8, gpu_count=8
)

_SIZES = (
    VmSize(
        name="Standard_NC24rs_v3", family="NCv3", vcpus=24, memory_gb=448, ib_name="FDR",
        ib_gbps=56, gpu_count=4, gpu=V100_PCIE, accelerated_networking=False, image=V100_IMAGE,
        env=_NCV3_ENV, retired_on=datetime.date(2025, 9, 30), successors=IB_SUCCESSORS,
    ),
    VmSize(
        name="Standard_ND40rs_v2", family="NDv2", vcpus=40, memory_gb=672, ib_name="EDR",
        ib_gbps=100, gpu_count=8, gpu=V100_SXM, image=V100_IMAGE,
        topo_file="/opt/microsoft/ndv2-topo.xml", busbw_health_threshold_gbs=110.0, env=_NDV2_ENV,
        mpi_args=_ND_MPI, busbw_cross_node_gbs=(12.0, 12.5),  # ~12; EDR line rate 12.5
    ),
    replace(
        _ND, name="Standard_ND96asr_v4", family="NDv4", memory_gb=900, gpu=A100_40,
        ib_name="HDR", ib_gbps=200, topo_file="/opt/microsoft/ndv4/topo.xml",
        busbw_single_node_gbs=231.0, busbw_health_threshold_gbs=228.0, env=_NDV4_ENV,
        mpi_args=_ND_MPI, busbw_cross_node_gbs=(185.0, 190.0),
    ),
    replace(
        _ND, name="Standard_ND96amsr_A100_v4", family="NDv4", memory_gb=1900, gpu=A100_80,
        ib_name="HDR", ib_gbps=200, topo_file="/opt/microsoft/ndv4/topo.xml",
        busbw_single_node_gbs=231.0, busbw_health_threshold_gbs=228.0, env=_NDV4_ENV,
        mpi_args=_ND_MPI, busbw_health_size="16G", busbw_cross_node_gbs=(185.0, 190.0),
    ),
    replace(
        _ND, name="Standard_ND96isr_H100_v5", family="NDv5", memory_gb=1900, gpu=H100,
        ib_name="NDR", ib_gbps=400, topo_file="/opt/microsoft/ndv5/topo.xml",
        busbw_single_node_gbs=479.0, busbw_health_threshold_gbs=460.0, env=_NDV5_ENV,
        mpi_args=_ND_MPI, busbw_health_size="16G", busbw_cross_node_gbs=NDR_CROSS_NODE,
    ),
    replace(
        _ND, name="Standard_ND96isr_H200_v5", family="NDv5", memory_gb=1850, gpu=H200,
        ib_name="NDR", ib_gbps=400, topo_file="/opt/microsoft/ndv5/topo.xml",
        busbw_single_node_gbs=480.0, busbw_health_threshold_gbs=431.0, env=_H200_ENV,
        mpi_args=_ND_MPI, busbw_health_size="16G", busbw_cross_node_gbs=NDR_CROSS_NODE,
    ),
    replace(
        _ND, name="Standard_ND96isr_MI300X_v5", family="NDv5-MI300X", memory_gb=1850,
        gpu=MI300X, ib_name="NDR", ib_gbps=400, image=ROCM_IMAGE, torch=ROCM_TORCH,
        env=_ROCM_ENV,
    ),
    VmSize(
        name="Standard_HB120rs_v2", family="HBv2", vcpus=120, memory_gb=456, ib_name="HDR",
        ib_gbps=200, env=_UCX[:1], retires_on=datetime.date(2027, 5, 31),
        successors=("Standard_HB120rs_v3",),
    ),
    VmSize(
        name="Standard_HB120rs_v3", family="HBv3", vcpus=120, memory_gb=448, ib_name="HDR",
        ib_gbps=200, env=_UCX[:1],
    ),
    VmSize(
        name="Standard_HB176rs_v4", family="HBv4", vcpus=176, memory_gb=768, ib_name="NDR",
        ib_gbps=400, env=_UCX[:1],
    ),
    VmSize(
        name="Standard_HC44rs", family="HC", vcpus=44, memory_gb=352, ib_name="EDR",
        ib_gbps=100, env=_UCX[:1], retires_on=datetime.date(2027, 5, 31),
        successors=("Standard_HX176rs",),
    ),
    VmSize(
        name="Standard_HX176rs", family="HX", vcpus=176, memory_gb=1408, ib_name="NDR",
        ib_gbps=400, env=_UCX[:1],
    ),
    VmSize(
        name="Standard_NC24r", family="NC", vcpus=24, memory_gb=224, ib_name="FDR", ib_gbps=56,
        gpu_count=4, gpu=K80, sriov=False, accelerated_networking=False, image=V100_IMAGE,
        retired_on=datetime.date(2023, 9, 6), successors=IB_SUCCESSORS,
    ),
)  # fmt: skip

SIZES: dict[str, VmSize] = {size.name: size for size in _SIZES}

_SIZE_PART = re.compile(r"^([A-Z]+)(\d+)([a-z]*)$")


def without_rdma(name: str) -> str:
    """The same size without the RDMA ``r``: Standard_ND96isr_H100_v5 -> Standard_ND96is_H100_v5."""
    parts = name.split("_")
    match = _SIZE_PART.match(parts[1])
    if match is None:
        return name
    letters, digits, features = match.groups()
    parts[1] = letters + digits + features.replace("r", "", 1)
    return "_".join(parts)


_BY_LOWER = {name.lower(): size for name, size in SIZES.items()}
_WITHOUT_R = {without_rdma(name).lower(): size for name, size in SIZES.items()}


def _retired(size: VmSize, on: datetime.date) -> CatalogError:
    return CatalogError(
        f"{size.name} was retired on {on.isoformat()}",
        why="Azure no longer allocates it",
        fix=f"use one of its successors: {', '.join(size.successors)}",
    )


def get_size(
    name: str, *, today: datetime.date | None = None, setting: str = "the vmSize setting"
) -> VmSize:
    """The catalog entry for ``name``, or an error that says which size to use instead;
    ``setting``: where the name was given (predict's --size)."""
    today = today or datetime.date.today()
    key = name if name.lower().startswith("standard_") else f"Standard_{name}"
    size = _BY_LOWER.get(key.lower())
    if size is not None:
        if size.retired_on is not None and size.retired_on <= today:
            raise _retired(size, size.retired_on)
        if not size.has_infiniband:
            raise CatalogError(
                f"{size.name} has no SR-IOV InfiniBand",
                why="its RDMA network cannot run current OFED, NCCL or MPI images",
                fix=f"use one of {', '.join(size.successors or IB_SUCCESSORS)}",
            )
        return size
    rdma = _WITHOUT_R.get(key.lower())
    if rdma is not None:
        why = "the 'r' in a size name marks the RDMA-capable variant; without it there is no IB"
        if rdma.retired_on is not None and rdma.retired_on <= today:
            raise CatalogError(
                f"{key} has no InfiniBand",
                why=f"{why}, and {rdma.name} was retired on {rdma.retired_on.isoformat()}",
                fix=f"use one of {', '.join(rdma.successors)}",
            )
        raise CatalogError(
            f"{key} has no InfiniBand, so its nodes cannot train together over it",
            why=why,
            fix=f"use {rdma.name}",
        )
    import difflib  # only for a "did you mean"

    close = difflib.get_close_matches(key, list(SIZES), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    raise CatalogError(
        f"{name!r} is not an InfiniBand size dtrun knows",
        why=f"{hint}known sizes: {', '.join(known_sizes(today))}",
        fix=f"pick one of those for {setting}",
    )


def known_sizes(today: datetime.date | None = None) -> list[str]:
    """Sizes that can be provisioned today."""
    today = today or datetime.date.today()
    return [
        s.name
        for s in _SIZES
        if s.has_infiniband and (s.retired_on is None or s.retired_on > today)
    ]


def retirement_warning(size: VmSize, today: datetime.date | None = None) -> str | None:
    today = today or datetime.date.today()
    if size.retires_on is None or size.retires_on <= today:
        return None
    return (
        f"{size.name} retires on {size.retires_on.isoformat()}; "
        f"plan a move to {', '.join(size.successors)}"
    )


def check_node_count(nodes: int) -> int:
    if 1 <= nodes <= MAX_NODES:
        return nodes
    raise CatalogError(
        f"a cluster of {nodes} nodes cannot be made",
        why=(
            f"InfiniBand needs one scale set in a single placement group, which holds 1 to "
            f"{MAX_NODES} VMs ({MAX_NODES_BY_SUPPORT_REQUEST} after a support request to Azure)"
        ),
        fix=f"set nodeCount between 1 and {MAX_NODES}",
    )
