"""How noisy each node was while a launch was timed: CPU steal, other load, a slow rank.

Each rank reads the node's aggregate CPU times (/proc/stat's ``cpu`` line) and its own CPU time
when the timed steps start and when they end, and /proc/loadavg at the end. Ranks whose
/proc/stat is the same kernel's (the same boot id: the embedded cluster's simulated nodes, or
containers on one host) share one machine, and the launch's CPU time on a machine is the sum of
its ranks'. What the machine was busy with beyond that is other load. Definitions and sources:
docs/facts.md §11; how the report judges them: docs/report.md "Noise".

Where there is no /proc (not Linux) the figures are null: measuring noise never fails a launch.

Standard library only: the report reads the same thresholds, and the nodes' Python may be 3.10.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Above these, the report calls a point unreliable (docs/report.md "Noise").
STEAL_SHARE = 0.05  # the hypervisor took more than 5% of the machine's CPU time
OTHER_CORES = 0.2  # work other than the launch's used more than a fifth of a core
STRAGGLER_RATIO = 1.25  # a rank computed 1.25x as long as the median of the other ranks
# ... where the rank's node shares its machine with another node of the launch (the embedded
# cluster, sshd nodes on one host): ranks on shared cores slow each other, and only a rank at
# half speed is a slow node there. Clean embedded 2-node sweeps on the 2-core dev VM read up to
# 1.49x; a node held to a tenth or a twentieth of a CPU 2.1x-5.5x (docs/report.md "Noise").
SHARED_STRAGGLER_RATIO = 2.0
# /proc/stat counts CPU time by sampling each CPU at every clock tick, so a window fewer ticks
# long than this reads the sampling, not the load: one tick is 0.05 cores of a window this long
# (OTHER_CORES is 0.2). A program of five sub-millisecond steps was timed over 19 ms, 3 ticks of
# 2 CPUs, and read 0.52 other cores; shorter windows give no figures (not measured).
MIN_WINDOW_TICKS = 20

# What a rank's probe time is, as findings say it after "took 1.6x as long as the median of
# the other ranks": dtrun's own workload computes a step on each rank alone; a program's step
# hook times each step from its start until the rank's last local gradient
# (docs/your-training.md "Which rank is slow").
ALONE = "to compute a step alone"
UNTIL_GRADIENTS = "from a step's start until its last local gradient"


@dataclass(frozen=True)
class CpuTimes:
    """The ``cpu`` line of /proc/stat: CPU time of all CPUs since boot, in clock ticks.

    guest and guest_nice are left out: the kernel already counts them in user and nice.
    """

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return (
            self.user + self.nice + self.system + self.idle + self.iowait
            + self.irq + self.softirq + self.steal
        )  # fmt: skip

    @property
    def busy(self) -> int:
        """Ticks this machine's CPUs ran something: neither idle, nor waiting, nor stolen."""
        return self.total - self.idle - self.iowait - self.steal

    def minus(self, earlier: CpuTimes) -> CpuTimes:
        return CpuTimes(
            *(getattr(self, name) - getattr(earlier, name) for name in self.__dataclass_fields__)
        )


def parse_proc_stat(text: str) -> CpuTimes | None:
    """The aggregate ``cpu`` line; None if there is none. Kernels before 2.6.11 have fewer
    fields: the missing ones read as 0."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            try:
                values = [int(value) for value in fields[1:9]]
            except ValueError:
                return None
            if len(values) < 4:
                return None
            return CpuTimes(*values, *[0] * (8 - len(values)))
    return None


def parse_loadavg(text: str) -> float | None:
    """/proc/loadavg's first figure: runnable (and disk-waiting) tasks, averaged over 1 minute."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def read_cpu_times(path: str = "/proc/stat") -> CpuTimes | None:
    text = _read(path)
    return None if text is None else parse_proc_stat(text)


def read_loadavg(path: str = "/proc/loadavg") -> float | None:
    text = _read(path)
    return None if text is None else parse_loadavg(text)


def machine_id() -> str:
    """Which kernel's /proc/stat this is: the boot id, else the hostname."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    return boot.strip() if boot else socket.gethostname()


def clock_ticks() -> int:
    """Clock ticks per second, the unit of /proc/stat (USER_HZ: 100 on most machines)."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100


def own_cpu_s() -> float:
    """This process's CPU time and its reaped children's, user and system, seconds (its live
    descendants: ``descendants``)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def descendants() -> dict[int, tuple[int, float]]:
    """Every live descendant of this process (a program's DataLoader workers: the launch's
    work, not other load): its parent's pid, and its CPU time and its reaped children's."""
    found: dict[int, tuple[int, float]] = {}
    todo = [(child, os.getpid()) for child in _children(os.getpid())]
    while todo:
        pid, parent = todo.pop()
        found[pid] = (parent, _process_cpu_s(pid))
        todo += [(child, pid) for child in _children(pid)]
    return found


def _children(pid: int) -> list[int]:
    """The live children of ``pid``, from each of its threads' /proc children list (Linux
    3.5+; none where there is no /proc)."""
    found: list[int] = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for thread in threads:
        text = _read(str(thread / "children")) or ""
        found += [int(child) for child in text.split()]
    return found


def _process_cpu_s(pid: int) -> float:
    """A live process's CPU time and its reaped children's (proc_pid_stat(5): utime, stime,
    cutime, cstime, fields 14-17, in clock ticks); 0 where it ended meanwhile."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()  # the name before it may hold spaces
    try:
        return sum(int(value) for value in fields[11:15]) / clock_ticks()
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class Snapshot:
    cpu: CpuTimes | None
    own_s: float  # own_cpu_s
    at: float  # time.perf_counter()
    tree: dict[int, tuple[int, float]] = field(default_factory=dict)  # descendants


def snapshot() -> Snapshot:
    return Snapshot(read_cpu_times(), own_cpu_s(), time.perf_counter(), descendants())


def window_own_s(start: Snapshot, end: Snapshot) -> float:
    """The CPU time this process and its descendants took between two snapshots, none counted
    twice or below nothing: a descendant alive at both counts its growth, one born since its
    whole time; one gone since counts nothing of its own, and its time before the window
    comes off where its parent, alive at the end, holds it among its reaped children's (this
    process's os.times, a descendant's cutime). One whose parent went too went to init: its
    time since the window began is lost (a double fork's daemon), never taken off."""
    took = end.own_s - start.own_s
    for pid, (_, cpu) in end.tree.items():
        took += cpu - start.tree.get(pid, (0, 0.0))[1]
    for pid, (parent, cpu) in start.tree.items():
        if pid not in end.tree and (parent == os.getpid() or parent in end.tree):
            took -= cpu  # its parent reaped it: its whole time is in the parent's count
    return max(0.0, took)


def rank_window(start: Snapshot, end: Snapshot) -> dict[str, Any]:
    """One rank's view of the timed steps, for gathering (plain JSON values)."""
    ticks = None
    if start.cpu is not None and end.cpu is not None:
        delta = end.cpu.minus(start.cpu)
        ticks = {"total": delta.total, "busy": delta.busy, "steal": delta.steal}
    return {
        "machine": machine_id(),
        "cpus": os.cpu_count(),
        "wall_s": end.at - start.at,
        "ticks": ticks,
        "own_cpu_s": window_own_s(start, end),
        "loadavg_1m": read_loadavg(),
    }


def machine_figures(
    ticks: dict[str, int] | None, clock: int, wall_s: float, launch_cpu_s: float
) -> dict[str, float | None]:
    """Shares of a machine's CPU time over a window, and the load other than the launch's.

    steal_share, busy_share and other_share are fractions of every CPU's time over the window
    (the ``cpu`` line's total); other_cores is the other work in cores (CPU seconds per second).
    None where there are no ticks or the window is under MIN_WINDOW_TICKS long.
    """
    if not ticks or ticks["total"] <= 0 or wall_s * clock < MIN_WINDOW_TICKS:
        return {"steal_share": None, "busy_share": None, "other_cores": None, "other_share": None}
    total_s = ticks["total"] / clock
    other_s = max(0.0, ticks["busy"] / clock - launch_cpu_s)
    return {
        "steal_share": ticks["steal"] / ticks["total"],
        "busy_share": ticks["busy"] / ticks["total"],
        "other_cores": other_s / wall_s,
        "other_share": other_s / total_s,
    }


def node_noise(windows: Sequence[dict[str, Any]], nodes: Sequence[str]) -> list[dict[str, Any]]:
    """Every rank's window (by rank) and node name -> one entry per node, in order of first rank.

    A machine's figures come from its lowest rank's window; its launch CPU time is the sum over
    every rank on it, whichever node they belong to.
    """
    by_machine: dict[str, list[int]] = {}
    for rank, window in enumerate(windows):
        by_machine.setdefault(str(window["machine"]), []).append(rank)
    clock = clock_ticks()
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for rank, node in enumerate(nodes):
        if node in seen:
            continue
        seen.add(node)
        machine = str(windows[rank]["machine"])
        ranks = by_machine[machine]
        first = windows[ranks[0]]
        launch_cpu_s = sum(float(windows[r]["own_cpu_s"]) for r in ranks)
        entries.append(
            {
                "node": node,
                "machine": machine,
                "nodes_on_machine": sorted({nodes[r] for r in ranks}),
                "cpus": first["cpus"],
                "loadavg_1m": first["loadavg_1m"],
                "wall_s": round(float(first["wall_s"]), 6),
                "ticks": first["ticks"],
                "clock_ticks": clock,
                "launch_cpu_s": round(launch_cpu_s, 6),
                **{
                    key: None if value is None else round(value, 6)
                    for key, value in machine_figures(
                        first["ticks"], clock, float(first["wall_s"]), launch_cpu_s
                    ).items()
                },
            }
        )
    return entries


def probe_turns(machines: Sequence[str], rank: int, device: str) -> tuple[int, int]:
    """The straggler probe's turn of ``rank`` and the number of turns, from every rank's
    machine id (``machine_id``, by rank) and the device type the ranks compute on.

    Ranks on one machine's CPU cores take turns, one rank per machine at a time, so that no
    rank is timed while a neighbour computes on the same cores: the embedded cluster's nodes,
    or several processes per node on CPUs. Ranks on different machines compute at the same
    time, as before; so do ranks on accelerators (each has its own). docs/report.md "Noise".
    """
    if device != "cpu":
        return 0, 1
    mine = machines[rank]
    turn = sum(1 for other in machines[:rank] if other == mine)
    return turn, max(Counter(machines).values())


def straggler_ratios(medians: Sequence[float]) -> list[float]:
    """Each rank's compute time over the median of the other ranks' (1.0 for a lone rank).

    The median of the others, not of all: with two ranks the median of all is their mean, and
    a rank 1.6x slower than its peer would read as 1.23x.
    """
    if len(medians) < 2:
        return [1.0] * len(medians)
    ratios = []
    for rank, mine in enumerate(medians):
        others = statistics.median(m for r, m in enumerate(medians) if r != rank)
        ratios.append(mine / others if others > 0 else 1.0)
    return ratios


def stragglers(
    medians: Sequence[float], nodes: Sequence[str], ratio: float = STRAGGLER_RATIO
) -> list[dict[str, Any]]:
    """The ranks whose probe median is above ``ratio`` times the median of the other ranks'."""
    return [
        {"rank": rank, "node": nodes[rank], "median_s": medians[rank], "ratio": value}
        for rank, value in enumerate(straggler_ratios(medians))
        if value > ratio
    ]


def launch_noise(
    gathered: Sequence[dict[str, Any]], nodes: Sequence[str], probe_steps: int
) -> dict[str, Any]:
    """The result's ``noise``: each rank's window and probe median (by rank), and the node
    each rank ran on -> the per-node figures and the probe's per-rank medians."""
    why = next((str(g["alone_why"]) for g in gathered if g.get("alone_why")), None)
    medians = [g.get("alone_s") for g in gathered]
    complete = why is None and all(m is not None for m in medians)
    return {
        "window_s": round(float(gathered[0]["wall_s"]), 6),
        "nodes": node_noise(gathered, nodes),
        "probe": {
            "steps": probe_steps if complete else 0,
            "rank_s": [round(float(m), 7) for m in medians if m is not None] if complete else None,
            "why": why,
        },
    }
