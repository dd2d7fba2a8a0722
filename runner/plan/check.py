"""`dtrun check`'s launch: the check workload (runner/workloads/check.py) once over every node
given, with its settings for the accelerator and the size (docs/check.md). Pure."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dtrun.azure.sizefacts import health_threshold
from dtrun.plan.launchfiles import What, plan_launch
from dtrun.plan.resolve import ResolvedRun
from dtrun.spec.cluster import Accelerator, Inventory, Node
from dtrun.spec.launchplan import RESULT_FILE, LaunchPlan
from dtrun.spec.request import Program, ProgramKind
from dtrun.workloads.sizes import parse_size

CHECK_MODULE = "dtrun.workloads.check"
CHECK_DIR = "check"  # the launch's directory under the run directory


@dataclass(frozen=True)
class CheckSettings:
    """What the workload measures with (its arguments)."""

    matrix: int  # n of the n x n multiply
    memory: int  # bytes copied
    message: int  # all-reduce bytes
    window: float = 0.15  # seconds a timing lasts at least (a CPU quota's 100 ms period shows)
    repeats: int = 2  # timings per figure per cycle; the best is kept
    cycles: int = 5  # every figure this often, each set beside its peers of the same cycle
    more_cycles: int = 5  # this many more when one looks slow after ``cycles``

    @classmethod
    def for_inventory(cls, inventory: Inventory) -> CheckSettings:
        if inventory.accelerator is Accelerator.CUDA:
            # Azure's pass mark is measured at its own message size (docs/facts.md §6): the
            # check uses the same, so the figure compares; 1 GiB where the catalog has none.
            gate = health_threshold(inventory.size)
            message = parse_size(gate[1]) if gate is not None else 1 << 30
            return cls(matrix=8192, memory=4 << 30, message=message)
        # CPUs: a multiply and a copy of a few milliseconds each, 4 MiB all-reduces (gloo moves
        # them in about 2 ms over loopback); docs/check.md "How long it takes"
        return cls(matrix=512, memory=64 << 20, message=4 << 20)

    def args(self, device: str, timeout_s: int) -> tuple[str, ...]:
        return (
            "--device", device, "--matrix", str(self.matrix), "--memory", str(self.memory),
            "--message", str(self.message), "--window", str(self.window),
            "--repeats", str(self.repeats), "--cycles", str(self.cycles),
            "--more-cycles", str(self.more_cycles),
            "--timeout", str(timeout_s), "--out", RESULT_FILE,
        )  # fmt: skip


def plan_check(
    resolved: ResolvedRun, inventory: Inventory, nodes: tuple[Node, ...], settings: CheckSettings
) -> LaunchPlan:
    """The check over ``nodes`` (those that answered), every process of each."""
    timeout = resolved.join_timeout_s
    program = Program(
        ProgramKind.MODULE, CHECK_MODULE, settings.args(inventory.accelerator.value, timeout)
    )
    alone = replace(inventory, nodes=nodes)
    return plan_launch(alone, resolved.launch, len(nodes), What(program, "check", timeout))
