"""The report's "Noise" section: was the machine quiet while each point was timed?

Reads each launch's ``noise`` (runner/workloads/noise.py writes it: CPU steal and other load on
each node over the timed steps, each rank's compute alone) and the manifest's sample of this
machine before the sweep, and says plainly where a point is unreliable: steal above 5% of a
node's CPU time, other load above a fifth of a core, or a straggler (docs/report.md "Noise").

A launch timed in steal or other load is left out of its point while two others were quiet
(runner/report/launchnoise.py): its findings are the kept launches', and a note says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from dtrun.report.launchnoise import (
    LaunchNoise,
    kept_launches,
    left_out_note,
    noisy,
    where,
    worst,
)
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
    # the launches (1-based) timed in steal or other load and left out of the interval, and
    # the sentence that says so (kept_launches); the figures above are the other launches'
    left_out: tuple[int, ...] = ()
    left_out_note: str | None = None
    unused: int = 0  # launches after the look a point stopped at, for one that never came
    # the kept launches (1-based) with no steal or other-load figure on any node, and why
    # (the first one's reason: launchnoise.py load_why, "window too short: 12 ms, ...")
    load_missing: tuple[int, ...] = ()
    load_why: str | None = None

    @property
    def unreliable(self) -> bool:
        return bool(self.findings)

    @property
    def slowest(self) -> Straggler | None:
        """The straggler with the highest ratio in any launch of the point, if any."""
        return max(self.stragglers, key=lambda s: s.ratio, default=None)

    @property
    def load_measured(self) -> bool:
        return self.steal_share is not None or self.other_cores is not None

    @property
    def verdict(self) -> str:
        """unreliable (a threshold crossed); not measured (older results, no /proc and no
        probe); partly measured (a slow-rank check but no load figure: a window under
        MIN_WINDOW_TICKS), or quiet."""
        if self.findings:
            return "unreliable"
        if not self.load_measured and self.probe_ratio is None:
            return "not measured"
        if not self.load_measured:
            return "partly measured"
        return "quiet"

    @property
    def load_note(self) -> str | None:
        """What was not measured, where a kept launch has no load figure: 'The 2-node point's
        CPU steal and other load were not measured (window too short: ...): only its slowest
        rank was, so nothing shows it was timed without other load'."""
        if not self.load_missing:
            return None
        said = f"The {self.nodes}-node point's CPU steal and other load were not measured"
        if self.load_measured:
            which = ", ".join(str(k) for k in self.load_missing)
            many = len(self.load_missing) > 1
            return f"{said} in {'launches' if many else 'launch'} {which} ({self.load_why})"
        said += f" ({self.load_why})"
        if self.probe_ratio is not None:
            said += ": only its slowest rank was, so nothing shows it was timed without other load"
        return said


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


def _load_findings(nodes: int, measured: Sequence[tuple[int, LaunchNoise]], of: str) -> list[str]:
    """Steal and other load above their thresholds, at the worst node of the worst launch."""
    findings = []
    steal, other = worst(measured, "steal_share"), worst(measured, "other_cores")
    if steal and (steal[1].steal_share or 0) > STEAL_SHARE:
        who, whose = where(steal[1])
        findings.append(
            f"The {nodes}-node point is unreliable: {who} lost {steal[1].steal_share:.0%} of "
            f"{whose} CPU time to steal (the hypervisor ran other work), {of.format(steal[0])}"
        )
    if other and (other[1].other_cores or 0) > OTHER_CORES:
        who, whose = where(other[1])
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
    return any(noisy(node) for node in noise.nodes if node.node == straggler.node)


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


def point_noise(
    nodes: int, launches: Sequence[LaunchNoise | None], leave_out: bool = True
) -> PointNoise:
    """The worst figures of one node count's kept launches, and its findings."""
    kept = kept_launches(launches, leave_out)
    left = [(k + 1, n) for k, n in enumerate(launches) if k not in kept and n is not None]
    measured = [(k + 1, n) for k, n in enumerate(launches) if k in kept and n is not None]
    by_launch = dict(measured)
    of = f"launch {{}} of {len(launches)}"
    stragglers = _stragglers(measured)
    findings = _load_findings(nodes, measured, of) + _straggler_findings(
        stragglers, by_launch, len(launches)
    )
    steal, other = worst(measured, "steal_share"), worst(measured, "other_cores")
    slowest = _slowest(measured)
    every = [node for _, noise in measured for node in noise.nodes]
    loads = [node.loadavg_1m for node in every if node.loadavg_1m is not None]
    probes = [noise for _, noise in measured]
    missing = [
        (k, next((node.load_why for node in noise.nodes if node.load_why), None))
        for k, noise in measured
        if noise.nodes and all(node.load_why for node in noise.nodes)
    ]
    return PointNoise(
        nodes=nodes,
        launches=len(launches),
        measured=len(measured) + len(left),
        # one node is on one machine whatever the cluster: only two or more sharing one tell
        shared_machine=nodes > 1
        and bool(every)
        and all(len(n.nodes_on_machine) == nodes for n in every),
        cpus=next((node.cpus for node in every if node.cpus), None),
        steal_share=steal[1].steal_share if steal else None,
        steal_where=where(steal[1])[0] if steal else None,
        other_cores=other[1].other_cores if other else None,
        other_share=other[1].other_share if other else None,
        other_where=where(other[1])[0] if other else None,
        loadavg_1m=max(loads, default=None),
        probe_steps=max((noise.probe_steps for noise in probes), default=0),
        probe_ratio=slowest[0] if slowest else None,
        probe_rank=slowest[1] if slowest else None,
        probe_why=next((noise.probe_why for noise in probes if noise.probe_why), None),
        stragglers=tuple(stragglers),
        findings=tuple(findings),
        left_out=tuple(k for k, _ in left),
        left_out_note=left_out_note(nodes, left, len(launches)) if left else None,
        load_missing=tuple(k for k, _ in missing),
        load_why=missing[0][1] if missing else None,
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
    launches: Mapping[int, Sequence[LaunchNoise | None]],
    before: Mapping[str, Any] | None,
    leave_out: bool = True,
    used: Mapping[int, int] | None = None,
) -> NoiseReport:
    """Every node count's noise, in order, and the machine before the sweep (``leave_out``:
    runner/report/launchnoise.py ``leaves_out`` of the manifest; ``used``: how many of each
    count's launches its row stands on, runner/report/sequential.py used_launches)."""
    used = used or {n: len(ls) for n, ls in launches.items()}
    return NoiseReport(
        points=tuple(
            replace(point_noise(n, ls[: used[n]], leave_out), unused=len(ls) - used[n])
            for n, ls in sorted(launches.items())
            if ls
        ),
        before=None if before is None else dict(before),
        before_finding=before_finding(before),
    )
