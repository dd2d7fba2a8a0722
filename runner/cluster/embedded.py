"""Inventories: which nodes a benchmark may use. The embedded local cluster lives here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from runner.errors import InventoryError
from runner.spec.cluster import Accelerator, Inventory, Node

# One machine can pretend to be this many nodes before the simulation says nothing useful.
MAX_LOCAL_NODES = 32


def local_cluster(size: int, *, python_bin: str, code_dir: str, cpu_count: int) -> Inventory:
    """``size`` simulated nodes on 127.0.0.2, 127.0.0.3, ... sharing this machine's cores."""
    if not 1 <= size <= MAX_LOCAL_NODES:
        raise InventoryError(
            f"the embedded cluster cannot simulate {size} nodes",
            why=f"it runs 1 to {MAX_LOCAL_NODES} nodes on this machine",
            fix=f"pass --nodes with counts up to {MAX_LOCAL_NODES}, or use a real cluster",
        )
    cpus = max(1, cpu_count // size)
    nodes = tuple(
        Node(name=f"node-{i}", address=f"127.0.0.{i + 2}", slots=1, cpus=cpus) for i in range(size)
    )
    return Inventory(
        source="embedded",
        nodes=nodes,
        python_bin=python_bin,
        code_dir=code_dir,
        accelerator=Accelerator.CPU,
        ssh=None,  # no sshd on the simulated nodes yet: launchers use their no-SSH modes
        interface="lo",  # every simulated node's address is on the loopback interface
    )


def embedded_inventory(size: int) -> Inventory:
    """The embedded cluster for this machine: this interpreter, this checkout, these cores."""
    import runner

    return local_cluster(
        size,
        python_bin=str(Path(sys.executable).parent),
        code_dir=str(Path(runner.__file__).resolve().parent.parent),
        cpu_count=os.cpu_count() or 1,
    )
