"""What a node of a known size should reach in `dtrun check` (docs/check.md, "Thresholds"):
its GPUs' dense peak, Azure's single-node all-reduce pass mark and the busbw across nodes, from
the catalog (docs/facts.md §6). Unknown sizes and CPUs get none: the fleet is their yardstick."""

from __future__ import annotations

from dataclasses import dataclass

from dtrun.azure.sizefacts import expected_busbw, health_threshold, peak_tflops_for

# A GPU whose matrix multiply reaches less than this share of its dense peak is slow whatever
# the fleet does: a healthy H100 reaches ~0.75 with a large bfloat16 multiply (docs/check.md).
GPU_PEAK_FLOOR = 0.5


@dataclass(frozen=True)
class Thresholds:
    """The minimum effect a figure must fall below its peers by, per kind (docs/check.md)."""

    compute: float
    memory: float
    network: float

    @classmethod
    def for_device(cls, device: str) -> Thresholds:
        if device == "cuda":  # dedicated machines: Azure's GEMM GHR line is 7% (docs/facts.md §15)
            return cls(compute=0.10, memory=0.10, network=0.15)
        # CPUs, possibly sharing cores with other work (the embedded cluster, loopback sshd
        # nodes): only a large effect, seen again on a second look, is a slow node
        return cls(compute=0.35, memory=0.40, network=0.50)


@dataclass(frozen=True)
class Expected:
    gpu_peak_tflops: float | None = None
    inside_gbs: float | None = None  # the single-node pass mark
    inside_source: str = ""
    pair_gbs: float | None = None  # the low end of the busbw expected across nodes
    pair_source: str = ""


def expected_for(size: str | None, procs_per_node: int) -> Expected:
    peak = peak_tflops_for(size)
    gate = health_threshold(size)
    across = expected_busbw(size, 2, procs_per_node)
    short = (size or "").removeprefix("Standard_")
    return Expected(
        gpu_peak_tflops=peak,
        inside_gbs=gate[0] if gate is not None else None,
        inside_source=f"Azure's health-check pass mark for {short} at {gate[1]}" if gate else "",
        pair_gbs=across.low if across is not None else None,
        pair_source=across.source if across is not None else "",
    )
