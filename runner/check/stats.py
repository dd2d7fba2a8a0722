"""Robust outliers over repeated cycles: a figure is flagged only when, cycle by cycle, it
stands below the median of its peers measured in the same cycle by a minimum effect (the
median of those ratios), and, with enough peers, its modified z-score among everyone is far
out too, or it stands below them by GROSS_SHORTFALL (docs/check.md, "Statistics").

Comparing within a cycle first takes out what changes over time on a shared machine (another
job's load rises and falls over seconds; a cycle lasts about one). The modified z-score is
0.6745 (x - median) / MAD (Iglewicz and Hoaglin; Azure's outlier detection, docs/facts.md §15).
The MAD of a healthy fleet can be near zero (identical machines), so it is floored at a share of
the median: a 2% wobble is never a 3.5-sigma event. With fewer than ``MIN_FOR_Z`` figures a MAD
says little, and the minimum effect alone decides.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Z_FACTOR = 0.6745  # MAD x 1.4826 estimates a normal sigma; 1 / 1.4826 = 0.6745
Z_CUT = -3.5  # Iglewicz and Hoaglin's cut for a modified z-score outlier
MAD_FLOOR = 0.02  # the MAD is taken as at least 2% of the median
MIN_FOR_Z = 5  # figures (its own included) before the z-score is used
# a figure this far below its peers, cycle by cycle, is flagged whatever the fleet's spread: a
# noisy fleet's MAD once put a node at 7.6% of its peers' compute at z -3.48 (docs/check.md)
GROSS_SHORTFALL = 0.75

Series = Sequence[float | None]  # one figure per cycle; None: not measured that cycle


@dataclass(frozen=True)
class Finding:
    """One figure against its peers."""

    value: float  # its median over the cycles
    reference: float  # its peers' median
    shortfall: float  # 1 - the median over cycles of value / peers' median: 0.3 is 30% below
    z: float | None  # its modified z-score among every figure; None with too few
    flagged: bool

    def describe(self, unit: str) -> str:
        z = f", z {self.z:.1f}" if self.z is not None else ""
        below = f"{self.shortfall:.0%} below the median {self.reference:.3g}"
        return f"{self.value:.3g} {unit}, {below}{z}"


def mad(values: Sequence[float]) -> float:
    middle = statistics.median(values)
    return statistics.median(abs(value - middle) for value in values)


def _median(values: Series) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


@dataclass(frozen=True)
class AllBut:
    """An item's peers: every other item but these."""

    left_out: frozenset[int] = frozenset()


def median_without(ordered: Sequence[float], removed: Sequence[float]) -> float | None:
    """The median of ``ordered`` (sorted) with the values ``removed`` taken out (each one of
    its members), as statistics.median would give it, in O(len(removed) log n): a node's peers
    are the fleet but a few, and each median of them was a sort of the fleet, N x N log N at
    N nodes (issue 41)."""
    gone: list[int] = []
    for value in sorted(removed):
        at = bisect.bisect_left(ordered, value)
        while at in gone:  # an equal value already taken out: the next copy
            at += 1
        gone.append(at)
    count = len(ordered) - len(gone)
    if count <= 0:
        return None

    def nth(rank: int) -> float:  # the rank-th value of what is left
        for at in gone:  # ascending
            if at <= rank:
                rank += 1
        return ordered[rank]

    if count % 2:
        return nth(count // 2)
    return (nth(count // 2 - 1) + nth(count // 2)) / 2


def _by_cycle(series: Sequence[Series]) -> list[list[float]]:
    """Each cycle's figures, sorted."""
    cycles: list[list[float]] = [[] for _ in range(max(map(len, series), default=0))]
    for values in series:
        for cycle, value in enumerate(values):
            if value is not None:
                cycles[cycle].append(value)
    for figures in cycles:
        figures.sort()
    return cycles


def judge_series(
    series: Sequence[Series], peers_of: Callable[[int], AllBut], min_effect: float
) -> list[Finding | None]:
    """Each item's cycles against its peers' in the same cycles. None: no figure, or no peer
    measured in any cycle it was."""
    medians = [_median(values) for values in series]
    everyone = [m for m in medians if m is not None]
    by_cycle = _by_cycle(series)
    ordered = sorted(everyone)
    middle, spread = 0.0, 0.0
    if len(everyone) >= MIN_FOR_Z:  # once for every item
        middle = statistics.median(ordered)
        spread = max(mad(ordered), MAD_FLOOR * abs(middle))
    out: list[Finding | None] = []
    for index, values in enumerate(series):
        apart = {index} | peers_of(index).left_out
        ratios = []
        for cycle, value in enumerate(values):
            gone = [
                v for i in apart if cycle < len(series[i]) and (v := series[i][cycle]) is not None
            ]
            reference = median_without(by_cycle[cycle], gone)
            if value is not None and reference:
                ratios.append(value / reference)
        own = medians[index]
        if own is None or not ratios:
            out.append(None)
            continue
        shortfall = 1 - statistics.median(ratios)
        reference = median_without(ordered, [m for i in apart if (m := medians[i]) is not None])
        z = _z(own, middle, spread) if len(everyone) >= MIN_FOR_Z else None
        flagged = shortfall >= min_effect and (
            z is None or z <= Z_CUT or shortfall >= GROSS_SHORTFALL
        )
        out.append(Finding(own, own if reference is None else reference, shortfall, z, flagged))
    return out


def _z(value: float, middle: float, spread: float) -> float:
    return Z_FACTOR * (value - middle) / spread if spread > 0 else 0.0


def others(count: int) -> Callable[[int], AllBut]:
    """Every other item is a peer."""
    del count  # every item but the one judged, however many there are
    return lambda index: AllBut()
