"""The check's judging against peers (runner/check/stats.py) gives what the straightforward
peer median gives, and grows as N log N, not N x N (issue 41: 147 s at 512 nodes, profiled)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from dtrun.check.stats import (
    GROSS_SHORTFALL,
    MAD_FLOOR,
    MIN_FOR_Z,
    Z_CUT,
    Z_FACTOR,
    AllBut,
    Finding,
    judge_series,
    mad,
    median_without,
)

Series = Sequence[float | None]


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def straightforward(
    series: Sequence[Series], peers_of: Callable[[int], AllBut], min_effect: float
) -> list[Finding | None]:
    """The judging as first written: every peer median sorted afresh."""
    medians = [_median(values) for values in series]
    everyone = [m for m in medians if m is not None]
    out: list[Finding | None] = []
    for index, values in enumerate(series):
        left_out = peers_of(index).left_out | {index}
        peers = [i for i in range(len(series)) if i not in left_out]
        ratios = []
        for cycle, value in enumerate(values):
            reference = _median([series[p][cycle] for p in peers if cycle < len(series[p])])
            if value is not None and reference:
                ratios.append(value / reference)
        own = medians[index]
        if own is None or not ratios:
            out.append(None)
            continue
        shortfall = 1 - statistics.median(ratios)
        peer_medians = [m for m in (medians[p] for p in peers) if m is not None]
        reference = statistics.median(peer_medians) if peer_medians else own
        z = None
        if len(everyone) >= MIN_FOR_Z:
            middle = statistics.median(everyone)
            spread = max(mad(everyone), MAD_FLOOR * abs(middle))
            z = Z_FACTOR * (own - middle) / spread if spread > 0 else 0.0
        flagged = shortfall >= min_effect and (
            z is None or z <= Z_CUT or shortfall >= GROSS_SHORTFALL
        )
        out.append(Finding(own, reference, shortfall, z, flagged))
    return out


figure = st.one_of(st.none(), st.sampled_from([0.5, 1.0, 1.0, 2.0]), st.floats(0.1, 10))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(figure, min_size=0, max_size=4), min_size=1, max_size=12),
    st.data(),
)
def test_the_judging_is_the_straightforward_peer_median_one(series, data):
    left_out = [
        frozenset(data.draw(st.sets(st.integers(0, len(series) - 1), max_size=3))) for _ in series
    ]
    peers = lambda index: AllBut(left_out[index])  # noqa: E731
    assert judge_series(series, peers, 0.3) == straightforward(series, peers, 0.3)


@given(st.lists(st.sampled_from([1.0, 2.0, 2.0, 3.5]), min_size=1, max_size=9), st.data())
def test_a_median_without_some_values_is_the_median_of_the_rest(values, data):
    taken = data.draw(st.sets(st.integers(0, len(values) - 1)))
    rest = [v for i, v in enumerate(values) if i not in taken]
    removed = [values[i] for i in taken]
    expected = statistics.median(rest) if rest else None
    assert median_without(sorted(values), removed) == expected


def _best_of_3(nodes: int) -> float:
    series = [[1.0 + (i % 7) / 10 + c / 100 for c in range(10)] for i in range(nodes)]
    peers = lambda index: AllBut()  # noqa: E731
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        judge_series(series, peers, 0.3)
        best = min(best, time.process_time() - started)
    return best


def test_judging_four_times_the_nodes_takes_well_under_sixteen_times_as_long():
    """N log N: about 4.5 times; the sort of every peer set, N x N log N: 16 times and more."""
    assert _best_of_3(800) / _best_of_3(200) < 9
