"""Scaling arithmetic against hand-computed values (shared/FACTS.md section 7)."""

from __future__ import annotations

import pytest

from runner.metrics import scaling_rows, trimmed_mean
from tests.factories import train_result


def test_trimmed_mean_drops_fastest_and_slowest_from_three_or_more():
    assert trimmed_mean([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert trimmed_mean([4.0, 5.0, 100.0]) == 5.0


def test_trimmed_mean_averages_one_or_two_values_as_they_are():
    assert trimmed_mean([5.0]) == 5.0
    assert trimmed_mean([1.0, 9.0]) == 5.0


def test_speedup_and_efficiency_against_one_node():
    rows = scaling_rows(
        {
            1: [train_result(world=1, tokens_per_s=1000)],
            2: [train_result(world=2, tokens_per_s=1800)],
            4: [train_result(world=4, tokens_per_s=3000)],
        }
    )
    assert [(r.nodes, r.speedup, r.efficiency) for r in rows] == [
        (1, 1.0, 1.0),
        (2, 1.8, 0.9),
        (4, 3.0, 0.75),
    ]
    assert [r.ideal_tokens_per_s for r in rows] == [1000, 2000, 4000]


def test_baseline_is_the_smallest_node_count_measured():
    rows = scaling_rows(
        {
            2: [train_result(world=2, tokens_per_s=2000)],
            8: [train_result(world=8, tokens_per_s=6000)],
        }
    )
    # S = 6000/2000 = 3 on 4x the nodes: E = 3 * 2 / 8
    assert rows[1].speedup == 3.0
    assert rows[1].efficiency == pytest.approx(0.75)
    assert rows[1].ideal_tokens_per_s == 8000


def test_repeats_are_trimmed_and_their_spread_kept():
    rows = scaling_rows(
        {
            1: [train_result(world=1, tokens_per_s=t) for t in (900, 1000, 1100, 5000)],
        }
    )
    assert rows[0].tokens_per_s == 1050
    assert (rows[0].tokens_per_s_min, rows[0].tokens_per_s_max) == (900, 5000)
    assert rows[0].repeats == 4


def test_node_counts_without_results_have_no_row():
    assert scaling_rows({1: [], 2: []}) == ()
