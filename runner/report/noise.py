"""The report's "Noise" section: was the machine quiet while each point was timed?

Reads each launch's ``noise`` (runner/workloads/noise.py writes it: CPU steal and other load on
each node over the timed steps, each rank's compute alone) and the manifest's sample of this
machine before the sweep, and says plainly where a point is unreliable: steal above 5% of a
node's CPU time, other load above a fifth of a core, or a straggler (docs/report.md "Noise").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dtrun.spec.text import host_label
from dtrun.workloads.noise import (
    ALONE,
    OTHER_CORES,
    SHARED_STRAGGLER_RATIO,
    STEAL_SHARE,
    STRAGGLER_RATIO,
    UNTIL_GRADIENTS,
    straggler_ratios,
)

# A program's slow rank counts only where its extra time to its last gradient is at least
# this share of the step: a few milliseconds of scheduling jitter in a short local part of a
# long step (a sleep, data loading, the all-reduce's wait) make ratios that cost nothing.
MIN_STEP_SHARE = 0.1

THRESHOLDS = {
    "steal_share": STEAL_SHARE,
    "other_cores": OTHER_CORES,
    "straggler_ratio": STRAGGLER_RATIO,
    "shared_straggler_ratio": SHARED_STRAGGLER_RATIO,
}


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


@dataclass(frozen=True)
class Straggler:
    rank: int
    node: str
    ratio: float  # its compute time over the median of the other ranks'
    launch: int  # 1-based, among the point's launches
    host: str = ""  # its node as reports name it, with the host: "node-1 (127.0.0.3)"
    what: str = ALONE  # what was timed: runner/workloads/noise.py ALONE or UNTIL_GRADIENTS

    @property
    def where(self) -> str:
        return self.host or self.node

    def computes(self) -> str:
        """'computes 1.60x as long as the median of the other ranks to compute a step alone'"""
        return f"took {self.ratio:.2f}x as long as the median of the other ranks {self.what}"


@dataclass(frozen=True)
class PointNoise:
    """One node count: the worst of its launches, and what the report says about it."""

    nodes: int
    launches: int
    measured: int  # launches whose results carry noise figures
    shared_machine: bool  # every node on one machine (the embedded cluster)
    cpus: int | None
    steal_share: float | None  # worst node, worst launch
    steal_where: str | None
    other_cores: float | None  # worst node, worst launch
    other_share: float | None  # of the same node and launch
    other_where: str | None
    loadavg_1m: float | None  # highest
    probe_steps: int
    probe_ratio: float | None  # the slowest rank's, worst launch
    probe_rank: str | None  # "rank 1 on node-1"
    probe_why: str | None
    stragglers: tuple[Straggler, ...]
    findings: tuple[str, ...]  # what the report says, plainly; empty when quiet

    @property
    def unreliable(self) -> bool:
        return bool(self.findings)

    @property
    def slowest(self) -> Straggler | None:
        """The straggler with the highest ratio in any launch of the point, if any."""
        return max(self.stragglers, key=lambda s: s.ratio, default=None)

    @property
    def verdict(self) -> str:
        """unreliable (a threshold crossed), quiet, or not measured (older results, no /proc
        and no probe)."""
        if self.findings:
            return "unreliable"
        if self.steal_share is None and self.other_cores is None and self.probe_ratio is None:
            return "not measured"
        return "quiet"


@dataclass(frozen=True)
class NoiseReport:
    points: tuple[PointNoise, ...]
    before: dict[str, Any] | None  # the manifest's sample of this machine before the sweep
    before_finding: str | None

    @property
    def thresholds(self) -> dict[str, float]:
        return THRESHOLDS

    @property
    def stragglers(self) -> dict[int, Straggler]:
        """Each node count's slowest straggler, where it has one."""
        return {p.nodes: p.slowest for p in self.points if p.slowest is not None}

    def summary(self) -> dict[str, Any]:
        """summary.json's ``noise``."""
        return {
            "thresholds": THRESHOLDS,
            "before": self.before,
            "before_finding": self.before_finding,
            "points": [{**asdict(point), "verdict": point.verdict} for point in self.points],
        }


def _where(node: NodeNoise) -> tuple[str, str]:
    """Who a machine's figures belong to, and the pronoun: ('node-1', 'its') or
    ('node-0 and node-1 (one machine)', 'their')."""
    names = node.nodes_on_machine
    if len(names) > 1:
        return f"{', '.join(names[:-1])} and {names[-1]} (one machine)", "their"
    return node.node, "its"


def _worst(launches: Sequence[tuple[int, LaunchNoise]], key: str) -> tuple[int, NodeNoise] | None:
    """(launch, node) with the highest figure ``key`` over every launch and node."""
    found = [
        (launch, node)
        for launch, noise in launches
        for node in noise.nodes
        if getattr(node, key) is not None
    ]
    return max(found, key=lambda pair: getattr(pair[1], key), default=None)


def _noisy(node: NodeNoise) -> bool:
    return (node.steal_share or 0) > STEAL_SHARE or (node.other_cores or 0) > OTHER_CORES


def _load_findings(nodes: int, measured: Sequence[tuple[int, LaunchNoise]], of: str) -> list[str]:
    """Steal and other load above their thresholds, at the worst node of the worst launch."""
    findings = []
    steal, other = _worst(measured, "steal_share"), _worst(measured, "other_cores")
    if steal and (steal[1].steal_share or 0) > STEAL_SHARE:
        who, whose = _where(steal[1])
        findings.append(
            f"The {nodes}-node point is unreliable: {who} lost {steal[1].steal_share:.0%} of "
            f"{whose} CPU time to steal (the hypervisor ran other work), {of.format(steal[0])}"
        )
    if other and (other[1].other_cores or 0) > OTHER_CORES:
        who, whose = _where(other[1])
        window = dict(measured)[other[0]].window_s
        findings.append(
            f"The {nodes}-node point is unreliable: {who} spent {other[1].other_share or 0:.0%} "
            f"of {whose} CPU on other work ({other[1].other_cores:.2f} cores over "
            f"{window:.1f} s), {of.format(other[0])}"
        )
    return findings


def _stragglers(measured: Sequence[tuple[int, LaunchNoise]]) -> list[Straggler]:
    return [
        Straggler(rank, noise.rank_nodes[rank], ratio, launch, noise.host(rank), noise.probe_what)
        for launch, noise in measured
        for rank, ratio in enumerate(straggler_ratios(noise.probe_rank_s or ()))
        if ratio > straggler_ratio(noise, rank) and _matters(noise, rank, ratio)
    ]


def straggler_ratio(noise: LaunchNoise, rank: int) -> float:
    """The ratio above which ``rank`` is a straggler: SHARED_STRAGGLER_RATIO where its node
    shares its machine with another node of the launch (a neighbour on the same cores slows
    it, as expected there), else STRAGGLER_RATIO."""
    node = noise.rank_nodes[rank] if rank < len(noise.rank_nodes) else None
    shared = any(n.node == node and len(n.nodes_on_machine) > 1 for n in noise.nodes)
    return SHARED_STRAGGLER_RATIO if shared else STRAGGLER_RATIO


def _matters(noise: LaunchNoise, rank: int, ratio: float) -> bool:
    """A program's slow rank costs its step at least MIN_STEP_SHARE; dtrun's own probe times
    compute alone, the whole of a step's local work, and needs no such floor."""
    if noise.probe_what != UNTIL_GRADIENTS or not noise.step_s or not noise.probe_rank_s:
        return True
    mine = noise.probe_rank_s[rank]
    return mine - mine / ratio >= MIN_STEP_SHARE * noise.step_s


def _straggler_finding(straggler: Straggler, noise: LaunchNoise, of: str) -> str:
    said = (
        f"Rank {straggler.rank} on {straggler.where} is a straggler: it "
        f"{straggler.computes()}, {of.format(straggler.launch)}"
    )
    if _busy_then(straggler, noise):
        said += f" ({straggler.node} also had steal or other load then: a likely cause)"
    return said


def _busy_then(straggler: Straggler, noise: LaunchNoise) -> bool:
    return any(_noisy(node) for node in noise.nodes if node.node == straggler.node)


def _straggler_findings(
    stragglers: Sequence[Straggler], by_launch: Mapping[int, LaunchNoise], launches: int
) -> list[str]:
    """One sentence for the point's stragglers: the one, or how many and the slowest."""
    of = f"launch {{}} of {launches}"
    if len(stragglers) <= 1:
        return [_straggler_finding(s, by_launch[s.launch], of) for s in stragglers]
    worst = max(stragglers, key=lambda s: s.ratio)
    hit = len({s.launch for s in stragglers})
    busy = sum(_busy_then(s, by_launch[s.launch]) for s in stragglers)
    said = (
        f"{len(stragglers)} stragglers in {hit} of {launches} launches: the slowest, rank "
        f"{worst.rank} on {worst.where}, {worst.computes()}, {of.format(worst.launch)}"
    )
    if busy:
        said += f" ({busy} on a node with steal or other load then: a likely cause)"
    return [said]


def _slowest(measured: Sequence[tuple[int, LaunchNoise]]) -> tuple[float, str] | None:
    """The highest probe ratio of any rank and launch, and which rank it was."""
    ratios = [
        (ratio, f"rank {rank} on {noise.host(rank)}")
        for _, noise in measured
        for rank, ratio in enumerate(straggler_ratios(noise.probe_rank_s or ()))
    ]
    return max(ratios, key=lambda pair: pair[0], default=None)


def point_noise(nodes: int, launches: Sequence[LaunchNoise | None]) -> PointNoise:
    """The worst figures of one node count's launches, and its findings."""
    measured = [(k + 1, noise) for k, noise in enumerate(launches) if noise is not None]
    by_launch = dict(measured)
    of = f"launch {{}} of {len(launches)}"
    stragglers = _stragglers(measured)
    findings = _load_findings(nodes, measured, of) + _straggler_findings(
        stragglers, by_launch, len(launches)
    )
    steal, other = _worst(measured, "steal_share"), _worst(measured, "other_cores")
    slowest = _slowest(measured)
    every = [node for _, noise in measured for node in noise.nodes]
    loads = [node.loadavg_1m for node in every if node.loadavg_1m is not None]
    probes = [noise for _, noise in measured]
    return PointNoise(
        nodes=nodes,
        launches=len(launches),
        measured=len(measured),
        # one node is on one machine whatever the cluster: only two or more sharing one tell
        shared_machine=nodes > 1
        and bool(every)
        and all(len(n.nodes_on_machine) == nodes for n in every),
        cpus=next((node.cpus for node in every if node.cpus), None),
        steal_share=steal[1].steal_share if steal else None,
        steal_where=_where(steal[1])[0] if steal else None,
        other_cores=other[1].other_cores if other else None,
        other_share=other[1].other_share if other else None,
        other_where=_where(other[1])[0] if other else None,
        loadavg_1m=max(loads, default=None),
        probe_steps=max((noise.probe_steps for noise in probes), default=0),
        probe_ratio=slowest[0] if slowest else None,
        probe_rank=slowest[1] if slowest else None,
        probe_why=next((noise.probe_why for noise in probes if noise.probe_why), None),
        stragglers=tuple(stragglers),
        findings=tuple(findings),
    )


def before_finding(before: Mapping[str, Any] | None) -> str | None:
    """What the manifest's sample of this machine before the sweep says, if it was busy."""
    if not before:
        return None
    steal, other = before.get("steal_share"), before.get("other_cores")
    said = []
    if steal is not None and steal > STEAL_SHARE:
        said.append(f"{steal:.0%} of its CPU time went to steal")
    if other is not None and other > OTHER_CORES:
        said.append(f"other work used {other:.2f} cores")
    if not said:
        return None
    return f"This machine was already busy before the sweep: {' and '.join(said)}"


def noise_report(
    launches: Mapping[int, Sequence[LaunchNoise | None]], before: Mapping[str, Any] | None
) -> NoiseReport:
    """Every node count's noise, in order, and the machine before the sweep."""
    return NoiseReport(
        points=tuple(point_noise(n, ls) for n, ls in sorted(launches.items()) if ls),
        before=None if before is None else dict(before),
        before_finding=before_finding(before),
    )
