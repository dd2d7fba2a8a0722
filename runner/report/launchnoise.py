"""One launch's noise figures as the report reads them, and whether the launch was disturbed.

A launch's ``noise`` (runner/workloads/noise.py writes it: CPU steal and other load on each node
over the timed steps, each rank's compute alone) parsed into ``LaunchNoise``. A launch timed in
steal or other load above its threshold is *disturbed*: it is left out of its point's interval
while at least two launches of the point were quiet (``kept_launches``), so one disturbed launch
costs that launch, not the point's verdict; with fewer the point keeps them all and the Noise
section calls it unreliable (runner/report/noise.py; docs/report.md "Noise").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtrun.spec.request import MIN_LAUNCHES
from dtrun.spec.text import host_label
from dtrun.workloads.noise import ALONE, MIN_WINDOW_TICKS, OTHER_CORES, STEAL_SHARE


@dataclass(frozen=True)
class NodeNoise:
    """One node over one launch's timed steps (its machine's figures, shared by the nodes on
    that machine)."""

    node: str
    nodes_on_machine: tuple[str, ...]
    cpus: int | None
    loadavg_1m: float | None
    steal_share: float | None  # of the machine's CPU time
    other_cores: float | None  # CPU seconds per second of work other than the launch's
    other_share: float | None  # ... as a share of the machine's CPU time
    # why there are no steal and other-load figures ("window too short: ..."); None with them
    load_why: str | None = None


@dataclass(frozen=True)
class LaunchNoise:
    window_s: float  # the timed steps, seconds (rank 0)
    nodes: tuple[NodeNoise, ...]
    probe_steps: int  # forward and backward passes each rank timed alone (0: none)
    probe_rank_s: tuple[float, ...] | None  # each rank's median, by rank
    probe_why: str | None  # why there is no probe
    rank_nodes: tuple[str, ...]  # the node each rank ran on, by rank
    # each rank's node as reports name it, with its host: "node-1 (127.0.0.3)" (host_label)
    rank_hosts: tuple[str, ...] = ()
    # what each rank's probe time is: ALONE (a step computed alone, dtrun's own workload) or
    # UNTIL_GRADIENTS (a program's step until its last local gradient; runner/workloads/noise.py)
    probe_what: str = ALONE
    step_s: float | None = None  # the launch's step time (p50): a program's straggler's scale

    def host(self, rank: int) -> str:
        return self.rank_hosts[rank] if self.rank_hosts else self.rank_nodes[rank]


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def load_why(node: Mapping[str, Any]) -> str | None:
    """Why a node's entry has no steal and other-load figures (runner/workloads/noise.py
    machine_figures gives none), or None where it has them."""
    if node["steal_share"] is not None or node["other_cores"] is not None:
        return None
    wall_s, clock, ticks = node.get("wall_s"), node.get("clock_ticks"), node.get("ticks")
    if not ticks:
        return "no /proc/stat on the node"
    if wall_s is not None and clock and float(wall_s) * int(clock) < MIN_WINDOW_TICKS:
        return (
            f"window too short: {float(wall_s) * 1000:.0f} ms, under {MIN_WINDOW_TICKS} clock ticks"
        )
    return "no CPU time counted over the window"


def parse_noise(
    data: Mapping[str, Any] | None,
    rank_nodes: Sequence[str],
    rank_addresses: Sequence[str | None] = (),
    step_s: float | None = None,
) -> LaunchNoise | None:
    """A result's ``noise``; None for results written before it was recorded.
    ``rank_addresses``: each rank's node's host (results before they were recorded: none)."""
    if data is None:
        return None
    probe = data["probe"]
    if probe["rank_s"] is not None and len(probe["rank_s"]) != len(rank_nodes):
        raise ValueError(f"'noise.probe.rank_s' has {len(probe['rank_s'])} ranks, not "
                         f"{len(rank_nodes)}")  # fmt: skip
    return LaunchNoise(
        window_s=float(data["window_s"]),
        nodes=tuple(
            NodeNoise(
                node=str(node["node"]),
                nodes_on_machine=tuple(str(n) for n in node["nodes_on_machine"]),
                cpus=None if node["cpus"] is None else int(node["cpus"]),
                loadavg_1m=_opt_float(node["loadavg_1m"]),
                steal_share=_opt_float(node["steal_share"]),
                other_cores=_opt_float(node["other_cores"]),
                other_share=_opt_float(node["other_share"]),
                load_why=load_why(node),
            )
            for node in data["nodes"]
        ),
        probe_steps=int(probe["steps"]),
        probe_rank_s=None if probe["rank_s"] is None else tuple(float(t) for t in probe["rank_s"]),
        probe_why=None if probe["why"] is None else str(probe["why"]),
        rank_nodes=tuple(rank_nodes),
        rank_hosts=tuple(
            host_label(node, rank_addresses[rank] if rank < len(rank_addresses) else None)
            for rank, node in enumerate(rank_nodes)
        ),
        probe_what=str(probe.get("what") or ALONE),
        step_s=step_s,
    )


def where(node: NodeNoise) -> tuple[str, str]:
    """Who a machine's figures belong to, and the pronoun: ('node-1', 'its') or
    ('node-0 and node-1 (one machine)', 'their')."""
    names = node.nodes_on_machine
    if len(names) > 1:
        return f"{', '.join(names[:-1])} and {names[-1]} (one machine)", "their"
    return node.node, "its"


def worst(launches: Sequence[tuple[int, LaunchNoise]], key: str) -> tuple[int, NodeNoise] | None:
    """(launch, node) with the highest figure ``key`` over every launch and node."""
    found = [
        (launch, node)
        for launch, noise in launches
        for node in noise.nodes
        if getattr(node, key) is not None
    ]
    return max(found, key=lambda pair: getattr(pair[1], key), default=None)


def noisy(node: NodeNoise) -> bool:
    return (node.steal_share or 0) > STEAL_SHARE or (node.other_cores or 0) > OTHER_CORES


def disturbed(noise: LaunchNoise | None) -> bool:
    """A launch timed while steal or other load crossed its threshold on any of its nodes."""
    return noise is not None and any(noisy(node) for node in noise.nodes)


def kept_launches(launches: Sequence[LaunchNoise | None], leave_out: bool = True) -> list[int]:
    """The launches (0-based) a point's interval is built from: the quiet ones where at least
    MIN_LAUNCHES were quiet, else (or without ``leave_out``) all of them."""
    quiet = [k for k, noise in enumerate(launches) if not (leave_out and disturbed(noise))]
    return quiet if len(quiet) >= MIN_LAUNCHES else list(range(len(launches)))


def _disturbance(noise: LaunchNoise) -> str:
    """What disturbed a launch, at its worst node: 'node-1 lost 7% of its CPU time to steal'."""
    launch = [(0, noise)]
    steal, other = worst(launch, "steal_share"), worst(launch, "other_cores")
    if steal and (steal[1].steal_share or 0) > STEAL_SHARE:
        who, whose = where(steal[1])
        return f"{who} lost {steal[1].steal_share:.0%} of {whose} CPU time to steal"
    assert other is not None  # disturbed: one of the two crossed its threshold
    who, whose = where(other[1])
    return f"{who} spent {other[1].other_share or 0:.0%} of {whose} CPU on other work"


def left_out_note(nodes: int, left: Sequence[tuple[int, LaunchNoise]], launches: int) -> str:
    """'Launch 7 of 12 is left out of the 2-node point's interval: node-0 lost 6% ...'"""
    which = " and ".join(
        part for part in (", ".join(str(k) for k, _ in left[:-1]), str(left[-1][0])) if part
    )
    said = (
        f"{'Launches' if len(left) > 1 else 'Launch'} {which} of {launches} "
        f"{'are' if len(left) > 1 else 'is'} left out of the {nodes}-node point's interval: "
    )
    said += "; ".join(
        f"{'in launch ' + str(k) + ' ' if len(left) > 1 else ''}{_disturbance(noise)}"
        for k, noise in left
    )
    return said
