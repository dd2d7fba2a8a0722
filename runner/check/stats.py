"""Robust outliers over repeated cycles: a figure is flagged only when, cycle by cycle, it
stands below the median of its peers measured in the same cycle by a minimum effect (the
median of those ratios), and, with enough peers, its modified z-score among everyone is far
out too (docs/check.md, "Statistics").

Comparing within a cycle first takes out what changes over time on a shared machine (another
job's load rises and falls over seconds; a cycle lasts about one). The modified z-score is
0.6745 (x - median) / MAD (Iglewicz and Hoaglin; Azure's outlier detection, docs/facts.md §15).
The MAD of a healthy fleet can be near zero (identical machines), so it is floored at a share of
the median: a 2% wobble is never a 3.5-sigma event. With fewer than ``MIN_FOR_Z`` figures a MAD
says little, and the minimum effect alone decides.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Z_FACTOR = 0.6745  # MAD x 1.4826 estimates a normal sigma; 1 / 1.4826 = 0.6745
Z_CUT = -3.5  # Iglewicz and Hoaglin's cut for a modified z-score outlier
MAD_FLOOR = 0.02  # the MAD is taken as at least 2% of the median
MIN_FOR_Z = 5  # figures (its own included) before the z-score is used

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


def z_score(value: float, everyone: Sequence[float]) -> float | None:
    if len(everyone) < MIN_FOR_Z:
        return None
    middle = statistics.median(everyone)
    spread = max(mad(everyone), MAD_FLOOR * abs(middle))
    return Z_FACTOR * (value - middle) / spread if spread > 0 else 0.0


def _median(values: Series) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def judge_series(
    series: Sequence[Series], peers_of: Callable[[int], Sequence[int]], min_effect: float
) -> list[Finding | None]:
    """Each item's cycles against its peers' in the same cycles. None: no figure, or no peer
    measured in any cycle it was."""
    medians = [_median(values) for values in series]
    everyone = [m for m in medians if m is not None]
    out: list[Finding | None] = []
    for index, values in enumerate(series):
        peers = peers_of(index)
        ratios = []
        for cycle, value in enumerate(values):
            others = [series[p][cycle] for p in peers if cycle < len(series[p])]
            reference = _median(others)
            if value is not None and reference:
                ratios.append(value / reference)
        own = medians[index]
        if own is None or not ratios:
            out.append(None)
            continue
        shortfall = 1 - statistics.median(ratios)
        peer_medians = [m for m in (medians[p] for p in peers) if m is not None]
        reference = statistics.median(peer_medians) if peer_medians else own
        z = z_score(own, everyone)
        flagged = shortfall >= min_effect and (z is None or z <= Z_CUT)
        out.append(Finding(own, reference, shortfall, z, flagged))
    return out


def others(count: int) -> Callable[[int], list[int]]:
    """Every other item is a peer."""
    return lambda index: [i for i in range(count) if i != index]
