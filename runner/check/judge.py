"""The verdicts of `dtrun check` from the workload's figures (docs/check.md, "Verdicts").

A node is failed when it could not be reached or launched, or a GPU reports uncorrectable
errors; slow when its GPUs throttle their clocks, when its compute or memory is a robust outlier
below the fleet (or its GPUs below their expected peak), when its in-node all-reduce is, or when
it is slow with every partner of the pair rounds (two or more). A slow pair whose nodes are fine
with their other partners is a slow link. Causes in that order: the first that holds is named.
The bisection's groups are judged in runner/check/bisect.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dtrun.check.bisect import judge_bisection
from dtrun.check.expected import GPU_PEAK_FLOOR, Expected, Thresholds
from dtrun.check.gpus import gpu_problems
from dtrun.check.model import Cause, CheckReport, LinkCheck, LinkVerdict, NodeCheck, Verdict
from dtrun.check.result import Group, Measured, Series
from dtrun.check.stats import AllBut, Finding, judge_series, others

# A node whose threads waited, runnable, for a CPU at least CPU_WAIT_SHARE seconds each second
# of the cycles, and CPU_WAIT_RATIO times the other nodes' median, was held back by its CPU (a
# quota, other processes): its slow all-reduces are its CPU's, not its network's
# (docs/check.md, "Verdicts"). On the 4 sshd nodes sharing 2 busy cores, clean nodes waited
# 0.20-0.44 s/s (at most 1.4x the others' median, a shaped link's node among them); one under
# a 10% quota half the time 0.80-1.12 (1.9x-4.1x; 3.3x and 4.1x where a pair was slow and its
# compute not), one under 20% a third of the time 0.45 (1.7x, nothing slow).
CPU_WAIT_SHARE = 0.1
CPU_WAIT_RATIO = 2.0
# With nothing it timed slow, a node is held back by its CPU alone where its threads waited
# CPU_WAIT_ALONE_SHARE s for a CPU per compute thread each second (over torch's threads: a
# daemon using half a core beside 120 busy threads is 0.004) and CPU_WAIT_ALONE_RATIO times the
# other nodes' median: its timings all fell in free stretches. The sshd nodes here, 1 thread
# each, a 10% quota half the time: CI 0.79 against 0.12-0.14, every pair 1.0-1.3 GB/s; here
# 0.68-1.33 against 0.09-0.18; clean nodes 0.44 at most, and 1.4x.
CPU_WAIT_ALONE_SHARE = 0.5
CPU_WAIT_ALONE_RATIO = 3.0


@dataclass(frozen=True)
class Pair:
    a: int
    b: int
    busbw_gbs: float | None  # the median over cycles
    finding: Finding | None = None
    below_expected: bool = False
    judged: bool = True  # against other pairs or the size's expected busbw

    @property
    def slow(self) -> bool:
        return self.below_expected or (self.finding is not None and self.finding.flagged)


def median_of(series: Series) -> float | None:
    present = [value for value in series if value is not None]
    return statistics.median(present) if present else None


def node_series(per_rank: Sequence[Series]) -> Series:
    """A node's figure per cycle: its slowest process's (one bad GPU is a bad node)."""
    cycles = max((len(series) for series in per_rank), default=0)
    out: list[float | None] = []
    for cycle in range(cycles):
        values = [one[cycle] for one in per_rank if cycle < len(one) and one[cycle] is not None]
        out.append(min(v for v in values if v is not None) if values else None)
    return tuple(out)


def _pairs(measured: Measured, thresholds: Thresholds, expected: Expected) -> list[Pair]:
    """Every pair against the pairs it shares no node with in the same cycles (else all the
    other pairs): a node that is slow with everyone does not drag its own pairs' yardstick."""
    flat: list[Group] = [g for pairs in measured.rounds for g in pairs if len(g.nodes) == 2]
    pairs_of: dict[int, set[int]] = {}  # each node's pairs: the few a pair is not judged by
    for i, group in enumerate(flat):
        for node in group.nodes:
            pairs_of.setdefault(node, set()).add(i)

    def peers(index: int) -> AllBut:
        sharing = frozenset().union(*(pairs_of[node] for node in flat[index].nodes))
        return AllBut(sharing) if len(sharing) < len(flat) else AllBut()

    findings = judge_series([g.busbw_gbs for g in flat], peers, thresholds.network)
    out = []
    for group, finding in zip(flat, findings, strict=True):
        value = median_of(group.busbw_gbs)
        low = (
            expected.pair_gbs is not None
            and value is not None
            and value < expected.pair_gbs * (1 - thresholds.network)
        )
        judged = finding is not None or expected.pair_gbs is not None
        out.append(Pair(group.nodes[0], group.nodes[1], value, finding, low, judged))
    return out


def _flag(finding: Finding | None) -> bool:
    return finding is not None and finding.flagged


def judge_check(
    measured: Measured,
    hosts: Mapping[str, str],
    unreachable: Mapping[str, str],
    thresholds: Thresholds,
    expected: Expected,
) -> CheckReport:
    """``hosts``: each node name's host as the user named it; ``unreachable``: the hosts that
    were not measured, and why."""
    labels = [hosts.get(name, name) for name in measured.names]
    count = len(labels)
    compute = [node_series(ranks) for ranks in measured.compute]
    memory = [node_series(ranks) for ranks in measured.memory]
    found = {
        "compute": judge_series(compute, others(count), thresholds.compute),
        "memory": judge_series(memory, others(count), thresholds.memory),
        "inside": judge_series(measured.inside, others(count), thresholds.network),
    }
    pairs = _pairs(measured, thresholds, expected)
    nodes = []
    for index, label in enumerate(labels):
        mine = [pair for pair in pairs if index in (pair.a, pair.b) and pair.busbw_gbs is not None]
        figures: dict[str, Any] = {
            "compute_gflops": median_of(compute[index]),
            "memory_gbs": median_of(memory[index]),
            "inside_busbw_gbs": median_of(measured.inside[index]),
            "network_busbw_gbs": statistics.median([p.busbw_gbs for p in mine if p.busbw_gbs])
            if mine else None,
            "pairs": len(mine),
            "slow_pairs": sum(pair.slow for pair in mine),
            "bisection_busbw_gbs": [
                median_of(next(g.busbw_gbs for g in level if index in g.nodes))
                for level in measured.bisection
            ],
        }  # fmt: skip
        if index < len(measured.cpu_wait):  # runner/workloads/check_measure.py cpu_waits
            figures["cpu_wait_share"] = measured.cpu_wait[index]
        if measured.procs[index] > 1:
            figures["compute_gflops_each"] = [median_of(one) for one in measured.compute[index]]
        if measured.gpus[index] is not None:
            figures["gpus"] = [dict(row) for row in measured.gpus[index] or ()]
        verdict, cause, evidence = _verdict(index, labels, measured, expected, found, mine)
        nodes.append(NodeCheck(label, verdict, cause, figures, evidence))
    nodes += [
        NodeCheck(host, Verdict.FAILED, Cause.UNREACHABLE, {}, (why,))
        for host, why in unreachable.items()
    ]
    flagged = {node.host for node in nodes if node.flagged}
    links = tuple(_link(pair, labels, flagged) for pair in pairs)
    groups, corroborated = judge_bisection(
        measured.bisection, labels, thresholds.network, nodes, links
    )
    nodes = [
        replace(node, evidence=(*node.evidence, corroborated[node.host]))
        if node.host in corroborated else node
        for node in nodes
    ]  # fmt: skip
    return CheckReport(tuple(nodes), links, groups)


def _link(pair: Pair, labels: Sequence[str], flagged: set[str]) -> LinkCheck:
    a, b = labels[pair.a], labels[pair.b]
    if not pair.judged:  # two nodes on CPUs: nothing says what their one pair should reach
        return LinkCheck(a, b, pair.busbw_gbs, LinkVerdict.UNJUDGED)
    if not pair.slow:
        return LinkCheck(a, b, pair.busbw_gbs, LinkVerdict.OK)
    why = pair.finding.describe("GB/s") if _flag(pair.finding) and pair.finding else ""
    why = why or "below the busbw expected across nodes"
    if a in flagged or b in flagged:
        return LinkCheck(a, b, pair.busbw_gbs, LinkVerdict.NODE, why)
    return LinkCheck(a, b, pair.busbw_gbs, LinkVerdict.SLOW, why)


Verdicts = tuple[Verdict, Cause | None, tuple[str, ...]]


def _compute(index: int, measured: Measured, expected: Expected, found: Finding | None
             ) -> Verdicts | None:  # fmt: skip
    peak = expected.gpu_peak_tflops
    low_gpus = []
    if measured.device == "cuda" and peak is not None:
        for gpu, series in enumerate(measured.compute[index]):
            gflops = median_of(series)
            if gflops is not None and gflops < GPU_PEAK_FLOOR * peak * 1e3:
                low_gpus.append(
                    f"GPU {gpu}: {gflops / 1e3:.0f} TFLOP/s, under {GPU_PEAK_FLOOR:.0%} of its "
                    f"peak {peak:g}"
                )
    if not _flag(found) and not low_gpus:
        return None
    line = [f"compute {found.describe('GFLOP/s')}"] if found is not None and found.flagged else []
    return Verdict.SLOW, Cause.COMPUTE, tuple(line + low_gpus)


def _inside(index: int, measured: Measured, expected: Expected, found: Finding | None
            ) -> Verdicts | None:  # fmt: skip
    value = median_of(measured.inside[index])
    below = expected.inside_gbs is not None and value is not None and value < expected.inside_gbs
    if not _flag(found) and not below:
        return None
    if below and value is not None:
        said = f"{value:.3g} GB/s, under {expected.inside_gbs:g} ({expected.inside_source})"
    else:
        said = found.describe("GB/s") if found is not None else ""
    cause = Cause.GPU if measured.device == "cuda" else Cause.NETWORK
    return Verdict.SLOW, cause, (f"in-node all-reduce {said}",)


def _verdict(
    index: int,
    labels: Sequence[str],
    measured: Measured,
    expected: Expected,
    found: Mapping[str, Sequence[Finding | None]],
    pairs: Sequence[Pair],
) -> Verdicts:
    failed, throttled = gpu_problems(measured.gpus[index])
    if failed:
        return Verdict.FAILED, Cause.GPU, tuple(failed)
    if throttled:
        return Verdict.SLOW, Cause.GPU, tuple(throttled)
    said = _compute(index, measured, expected, found["compute"][index])
    if said is not None:
        return said
    memory = found["memory"][index]
    if memory is not None and memory.flagged:
        return Verdict.SLOW, Cause.MEMORY, (f"memory {memory.describe('GB/s')}",)
    said = _inside(index, measured, expected, found["inside"][index])
    alone = _cpu_held(index, measured, CPU_WAIT_ALONE_SHARE, CPU_WAIT_ALONE_RATIO, per_thread=True)
    held = _cpu_held(index, measured) or alone
    if said is not None:  # on CPUs the in-node all-reduce is its CPU's work too
        if held is not None and said[1] is Cause.NETWORK:
            return Verdict.SLOW, Cause.COMPUTE, (*said[2], held)
        return said
    slow = [pair for pair in pairs if pair.slow]
    partners = ", ".join(
        f"{pair.busbw_gbs:.3g} GB/s with {labels[pair.b if pair.a == index else pair.a]}"
        for pair in slow
    )
    if len(pairs) >= 2 and len(slow) == len(pairs):
        cause = Cause.COMPUTE if held else Cause.NETWORK
        return Verdict.SLOW, cause, (f"slow with every partner: {partners}", *filter(None, [held]))
    if slow and held:  # its links are slow when its CPU is held back, not for their network
        return (
            Verdict.SLOW,
            Cause.COMPUTE,
            (f"slow with {len(slow)} of {len(pairs)} partners: {partners}", held),
        )
    if alone:  # held back part of the time, its best-of timings all between
        return Verdict.SLOW, Cause.COMPUTE, (f"nothing it timed read slow, but {alone}",)
    return Verdict.OK, None, ()


def _cpu_held(
    index: int,
    measured: Measured,
    share: float = CPU_WAIT_SHARE,
    ratio: float = CPU_WAIT_RATIO,
    per_thread: bool = False,
) -> str | None:
    """Why a node's slow all-reduces are its CPU's: its processes waited for a CPU far more
    than the other nodes' (a quota, or a job beside it, that holds it back part of the time:
    its compute's best-of timings can miss it, every all-reduce it joins waits on it)."""
    if measured.device == "cuda":  # NCCL's all-reduce is the GPUs' work, and the figures
        return None  # above were measured on CPU ranks only
    waits = measured.cpu_wait_thread if per_thread else measured.cpu_wait
    mine = waits[index] if index < len(waits) else None
    theirs = [w for i, w in enumerate(waits) if i != index and w is not None]
    if mine is None or not theirs:
        return None
    reference = statistics.median(theirs)
    if mine < share or mine < ratio * reference:
        return None
    if per_thread:
        said = f"its threads waited {mine:.2f} s for a CPU per compute thread each second of the "
        said += f"cycles, the other nodes' {reference:.2f} s"
    else:
        said = f"its threads waited {mine:.2f} s for a CPU each second of the cycles, the other "
        said += f"nodes' {reference:.2f} s"
    return f"{said} (median): a CPU quota or other processes held it back"
