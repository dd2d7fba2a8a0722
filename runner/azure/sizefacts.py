"""What a known size should reach and how to launch on it (docs/facts.md §5, §6): its NCCL/UCX
settings and OpenMPI options, its GPUs' peak for MFU, its expected all-reduce busbw and its
health-check threshold. Unknown sizes and the embedded cluster get none."""

from __future__ import annotations

from dataclasses import dataclass

from dtrun.azure.catalog import SIZES, UNKNOWN_SIZE_MPI
from dtrun.spec.launchplan import CliArg, EnvVar


def size_env(size_name: str | None) -> tuple[EnvVar, ...]:
    """The NCCL/UCX settings of a known size; none for the embedded cluster or unknown machines."""
    size = SIZES.get(size_name or "")
    return size.env if size is not None else ()


def mpi_args_for(size_name: str | None) -> tuple[CliArg, ...]:
    """OpenMPI's binding and collective options for a size, with why."""
    size = SIZES.get(size_name or "")
    return size.mpi_args if size is not None else UNKNOWN_SIZE_MPI


def peak_tflops_for(size_name: str | None) -> float | None:
    """Per-GPU peak for MFU, when the size is known and its peak verified."""
    size = SIZES.get(size_name or "")
    if size is None or size.gpu is None or not size.gpu.peak_verified:
        return None
    return size.gpu.peak_bf16_tflops


@dataclass(frozen=True)
class ExpectedBusbw:
    """What all-reduce busbw a size should reach (docs/facts.md §6), and where the figure comes
    from."""

    low: float
    high: float
    source: str

    def describe(self) -> str:
        value = f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"
        return f"{value} GB/s ({self.source})"


def expected_busbw(size_name: str | None, nodes: int, procs_per_node: int) -> ExpectedBusbw | None:
    """The expected all-reduce busbw of a size: on one VM, or across VMs, with all its GPUs
    (each GPU has its own NIC on ND sizes: fewer processes per node move less)."""
    size = SIZES.get(size_name or "")
    if size is None or procs_per_node != size.gpu_count:
        return None
    short = size.name.removeprefix("Standard_")
    if nodes == 1 and size.busbw_single_node_gbs is not None:
        value = size.busbw_single_node_gbs
        return ExpectedBusbw(value, value, f"one {short}, {size.gpu_count} GPUs, 8 GB messages")
    if nodes > 1 and size.busbw_cross_node_gbs is not None:
        low, high = size.busbw_cross_node_gbs
        return ExpectedBusbw(low, high, f"{short} across nodes, ring over InfiniBand")
    return None


def no_busbw_because(size_name: str, procs_per_node: int) -> str:
    """Why ``expected_busbw`` has no figure across nodes for this size, as a prediction says it
    beside the busbw it used instead."""
    size = SIZES.get(size_name)
    short = size_name.removeprefix("Standard_")
    if size is not None and procs_per_node != size.gpu_count:
        return (
            f"--size {short}: its catalog busbw is for all its {size.gpu_count} GPUs per node, "
            f"and the run had {procs_per_node} processes per node, so it is not used"
        )
    return f"--size {short}: the catalog has no busbw across nodes for it, so none is used"


def health_threshold(size_name: str | None) -> tuple[float, str] | None:
    """The single-node busbw a healthy VM of this size passes (Azure's health check), and the
    message size it is measured at; None when the catalog has no such figure."""
    size = SIZES.get(size_name or "")
    if size is None or size.busbw_health_threshold_gbs is None:
        return None
    return size.busbw_health_threshold_gbs, size.busbw_health_size
