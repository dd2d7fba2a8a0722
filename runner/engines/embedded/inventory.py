"""The embedded cluster's inventory: simulated nodes on 127.0.0.x sharing the cores dtrun may
use (and this machine's NVIDIA GPUs, where each node can have one), and when they oversubscribe
them."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from dtrun.engines.common.code import this_checkout, this_python
from dtrun.errors import InventoryError
from dtrun.spec.cluster import Accelerator, Inventory, Node, shares_cores, usable_cpus

# One machine can pretend to be this many nodes before the simulation says nothing useful.
MAX_LOCAL_NODES = 32


# The NVIDIA driver's entry for each GPU it drives (one folder per PCI address), and its
# device files where /proc has no such entry (a container given the devices alone).
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
DEVICES = Path("/dev")
# What CUDA_VISIBLE_DEVICES may name: indices or UUIDs (GPU-..., MIG-...), in order (NVIDIA's
# MPS guide, docs.nvidia.com/deploy/topics/topic_5_2_1.html). As PyTorch 2.13 reads it
# (torch/cuda/__init__.py _parse_visible_devices), the list ends at an entry naming no GPU,
# and an entry named twice (1 and 01 too) leaves none. ASCII digits: CUDA reads no other.
GPU_ENTRY = re.compile(r"\d+|(?:GPU|MIG)-[0-9A-Za-z/-]+", re.ASCII)


def visible_gpus(
    environ: Mapping[str, str] = os.environ, driver: Path = DRIVER_GPUS, devices: Path = DEVICES
) -> tuple[str, ...]:
    """The NVIDIA GPUs this machine shows dtrun's processes, as CUDA_VISIBLE_DEVICES names
    them: none where the driver lists none (whatever the variable says: a CPU machine with it
    set is still a CPU machine); else that variable's entries where it is set (empty or
    ``-1``: none; an index past the driver's GPUs ends the list), else an index for each GPU
    the driver lists. Reads no CUDA library (docs/bench.md "The embedded local cluster")."""
    try:
        count = sum(1 for _ in driver.iterdir())
    except OSError:
        count = 0
    if not count:
        count = sum(1 for path in devices.glob("nvidia*") if path.name[6:].isdigit())
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if not count or given is None:
        return tuple(str(index) for index in range(count))
    shown: list[str] = []
    for entry in (part.strip() for part in given.split(",")):
        if not GPU_ENTRY.fullmatch(entry) or (entry.isdigit() and int(entry) >= count):
            break
        entry = str(int(entry)) if entry.isdigit() else entry  # 01 is 1
        if entry in shown:
            return ()
        shown.append(entry)
    return tuple(shown)


def torch_cuda() -> str | None:
    """The CUDA version this interpreter's torch was built for (its torch/version.py's
    ``cuda``), read without importing torch (1.5 s); None for a CPU build, or no torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        return found.group(1) if found else None
    return None


def gpu_warning(nodes: int) -> str | None:
    """Why a machine with NVIDIA GPUs runs its embedded nodes on the CPU, or None."""
    gpus = visible_gpus()
    if not gpus:
        return None
    shown = f"this machine shows dtrun {len(gpus)} NVIDIA GPU{'' if len(gpus) == 1 else 's'}"
    if torch_cuda() is None:
        return (
            f"{shown}, but this Python's torch is a CPU build: the embedded nodes run on the "
            "CPU; install a CUDA build of torch to run them on the GPUs"
        )
    if len(gpus) < nodes:
        return (
            f"{shown} for {nodes} embedded nodes: they run on the CPU; ask for at most "
            f"{len(gpus)} nodes (--nodes) to give each its own"
        )
    return None


def local_cluster(
    size: int, *, python_bin: str, code_dir: str, cpu_count: int, gpus: Sequence[str] = ()
) -> Inventory:
    """``size`` simulated nodes on 127.0.0.2, 127.0.0.3, ... sharing this machine's cores.
    Where ``gpus`` has one for each node, the nodes are CUDA nodes: each is given an equal
    share of them, in order, and its slots are its GPUs (the rest, if they do not divide
    evenly, stay unused); else the nodes run on the CPU."""
    if not 1 <= size <= MAX_LOCAL_NODES:
        raise InventoryError(
            f"the embedded cluster cannot simulate {size} nodes",
            why=f"it runs 1 to {MAX_LOCAL_NODES} nodes on this machine",
            fix=f"ask for at most {MAX_LOCAL_NODES} nodes (--nodes, or --local-nodes for "
            "`dtrun exec` and `check`), or use a real cluster",
        )
    cpus = max(1, cpu_count // size)
    each = len(gpus) // size
    nodes = tuple(
        Node(
            name=f"node-{i}",
            address=f"127.0.0.{i + 2}",
            slots=each or 1,
            cpus=cpus,
            gpus=tuple(gpus[i * each : (i + 1) * each]) if each else None,
        )
        for i in range(size)
    )
    return Inventory(
        source="embedded",
        nodes=nodes,
        python_bin=python_bin,
        code_dir=code_dir,
        accelerator=Accelerator.CUDA if each else Accelerator.CPU,
        ssh=None,  # no sshd on the simulated nodes yet: launchers use their no-SSH modes
        interface="lo",  # every simulated node's address is on the loopback interface
    )


def embedded_inventory(size: int) -> Inventory:
    """The embedded cluster for this machine: this interpreter, this checkout, the cores this
    process may use (its affinity, not every core of the machine), the GPUs it is shown."""
    return local_cluster(
        size,
        python_bin=this_python(),
        code_dir=this_checkout(),
        cpu_count=usable_cpus(),
        gpus=visible_gpus() if torch_cuda() else (),  # a CPU build of torch cannot use them
    )


def node_cores(inventory: Inventory, allowed: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """The cores each simulated node runs on (docs/bench.md "The embedded local cluster"): node i
    its own ``cpus`` of the cores this process may use, in order, wrapping round where the
    nodes outnumber them. A node kept to its cores is one machine's share, as a container's
    cpuset is; ranks floating over every core time a different machine from launch to launch
    (docs/benchmarks.md: the 2-node efficiency interval of five launches was half as wide
    with the nodes on a core each, median 3.7 points against 6.6 floating)."""
    cores = sorted(set(allowed))
    if not cores:
        return {}
    taken = {}
    for index, node in enumerate(inventory.nodes):
        start = index * node.cpus
        width = min(node.cpus, len(cores))
        taken[node.name] = tuple(sorted({cores[(start + j) % len(cores)] for j in range(width)}))
    return taken


def _nodes(count: int) -> str:
    return f"{count} node{'' if count == 1 else 's'}"


def oversubscription(
    node_counts: Sequence[int],
    procs_per_node: int,
    cores: int,
    kept_to: Sequence[Sequence[int] | None] | None = None,
) -> str | None:
    """A warning where the embedded cluster's processes would share cores (the report's rule,
    runner/spec/cluster.py shares_cores): ``cores`` the cores dtrun may use, ``kept_to`` each
    node's own cores where taskset keeps it to them; None where they would not."""
    kept = list(kept_to) if kept_to is not None else [None] * max(node_counts, default=0)
    over = sorted(
        n for n in set(node_counts) if shares_cores(kept[:n] or [None] * n, procs_per_node, cores)
    )
    if not over:
        return None
    widest = max(over)
    processes = widest * procs_per_node
    per_node = f"{procs_per_node} process{'' if procs_per_node == 1 else 'es'} per node"
    points = f"{', '.join(map(str, over[:-1]))} and {widest}" if len(over) > 1 else str(widest)
    own = [len(node) for node in kept[:widest] if node is not None]
    keep = f"nodes x processes per node at most {cores}"
    if own and procs_per_node > min(own):
        keep = (
            f"processes per node within each node's {min(own)} core{'' if min(own) == 1 else 's'}"
        )
    return (
        f"the embedded cluster runs {processes} processes at {_nodes(widest)} ({per_node}) "
        f"on the {cores} core{'' if cores == 1 else 's'} dtrun may use: at {points} "
        f"node{'' if over == [1] else 's'} the processes share cores, so the figures measure "
        f"the shared CPU, not the launcher or the communication; keep {keep} for figures that "
        "mean more"
    )
