"""One statistic (the median step time), its bootstrap interval, and the verdict it supports
(docs/report.md "The statistic" and "Intervals and verdicts").

The series are rank 0's step times as a 2-core machine records them: tests/data/step_times.json
holds a default 1,2-node bench's (its 2-node point lost most of its efficiency to the shared
CPU and the all-reduce); the others are built from those numbers with a seeded generator.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from runner.report.metrics import scaling_rows
from runner.report.stats import (
    NO_STEPS,
    Verdict,
    bootstrap_tokens_per_s,
    interval,
    judge,
    launch_tokens_per_s,
)
from tests.factories import train_result
from tests.paths import TESTS

RECORDED = json.loads((TESTS / "data" / "step_times.json").read_text())
ONE_NODE = RECORDED["1-node"]["step_times_s"]  # p50 about 32 ms
TWO_NODES = RECORDED["2-node"]["step_times_s"]  # p50 about 83 ms: 39% efficiency


def noisy(median_s: float, spread: float, steps: int, seed: int) -> list[float]:
    """Step times around ``median_s`` with a long slow tail, as a busy machine gives them."""
    rng = random.Random(seed)
    return [median_s * rng.lognormvariate(0.0, spread) for _ in range(steps)]


def rows_for(one: list[list[float]], two: list[list[float]], target: float = 0.9):
    """Weak-scaling rows of 1 and 2 nodes from each launch's step times."""
    return scaling_rows(
        {
            1: [train_result(world=1, step_times=times) for times in one],
            2: [train_result(world=2, step_times=times) for times in two],
        },
        target,
    )


def test_throughput_is_the_tokens_of_a_step_over_the_median_step_time():
    # one 400 ms stall among 33 ms steps: the mean step is 51 ms, the median 33.6 ms
    times = [0.0336] * 19 + [0.4]
    result = train_result(world=2, step_times=times)
    assert launch_tokens_per_s(result) == pytest.approx(16 * 64 / 0.0336)
    assert result.tokens_per_s == pytest.approx(16 * 64 * 20 / sum(times))  # the workload's
    assert launch_tokens_per_s(result) > 1.4 * result.tokens_per_s


def test_efficiency_agrees_with_the_step_times_the_table_shows():
    # issue 13's report: p50 33.6 ms at 1 node and 38.8 ms at 2 (weak scaling: 87%), while the
    # mean-based figure said over 100%: the 1-node launch had slow outliers
    one = [0.0336] * 16 + [0.09] * 4
    two = [0.0388] * 20
    (base, point) = rows_for([one], [two])
    assert (base.step_time_p50, point.step_time_p50) == (pytest.approx(0.0336), 0.0388)
    assert point.efficiency == pytest.approx(0.0336 / 0.0388)  # 0.866
    assert point.speedup == pytest.approx(2 * 0.0336 / 0.0388)


def test_a_clean_linear_series_scales():
    # 2 nodes 2% slower per step than 1 (98% weak-scaling efficiency), the same jitter
    clean = [t * 1.02 for t in reversed(ONE_NODE)]
    point = rows_for([ONE_NODE], [clean])[1]
    assert point.verdict is Verdict.SCALES
    assert point.efficiency_low is not None and point.efficiency_high is not None
    assert 0.9 <= point.efficiency_low < point.efficiency < point.efficiency_high
    assert "at or above the 90% target" in point.verdict_reason


def test_a_communication_bound_series_loses():
    point = rows_for([ONE_NODE], [TWO_NODES])[1]
    assert point.verdict is Verdict.LOSES
    assert point.efficiency == pytest.approx(0.39, abs=0.01)
    assert point.efficiency_high is not None and point.efficiency_high < 0.9
    assert "below the 90% target" in point.verdict_reason


def test_a_noisy_series_is_inconclusive_and_says_what_to_change():
    # 93% at the medians (33.6 and 36.1 ms), with steps whose p10-p90 spans about a third
    # of the median, as on a busy 2-core machine: 20 steps cannot tell 93% from 85%
    one = noisy(0.0336, 0.15, 20, seed=1)
    two = noisy(0.0361, 0.15, 20, seed=2)
    point = rows_for([one], [two])[1]
    assert point.verdict is Verdict.INCONCLUSIVE
    assert point.efficiency_low is not None and point.efficiency_high is not None
    assert point.efficiency_low < 0.9 <= point.efficiency_high
    assert "straddles the 90% target" in point.verdict_reason
    assert "more --steps, more --repeat, or a quieter machine" in point.verdict_reason
    assert point.step_spread is not None and point.step_spread > 0.3
    assert f"span {point.step_spread:.0%} of the median" in point.verdict_reason


def test_more_steps_narrow_the_interval():
    widths = []
    for steps in (20, 80, 320):
        row = rows_for([noisy(0.0336, 0.15, steps, 1)], [noisy(0.0361, 0.15, steps, 2)])[1]
        assert row.efficiency_low is not None and row.efficiency_high is not None
        widths.append(row.efficiency_high - row.efficiency_low)
    assert widths[0] > 1.5 * widths[1] > 2.25 * widths[2]


def test_the_target_decides_the_verdict():
    point = rows_for([ONE_NODE], [TWO_NODES], target=0.3)[1]
    assert point.verdict is Verdict.SCALES
    assert point.target_efficiency == 0.3
    assert "the 30% target" in point.verdict_reason


def test_the_verdict_rule_at_its_edges():
    assert judge(0.9, 0.95, 0.9) is Verdict.SCALES  # at the target counts
    assert judge(0.8, 0.8999, 0.9) is Verdict.LOSES
    assert judge(0.85, 0.9, 0.9) is Verdict.INCONCLUSIVE
    assert judge(None, None, 0.9) is Verdict.INCONCLUSIVE


def test_the_baseline_is_judged_against_nothing():
    base = rows_for([ONE_NODE], [TWO_NODES])[0]
    assert base.verdict is Verdict.BASELINE
    assert (base.efficiency_low, base.efficiency_high) == (1.0, 1.0)
    assert base.tokens_per_s_low is not None and base.tokens_per_s_high is not None
    assert base.tokens_per_s_low < base.tokens_per_s < base.tokens_per_s_high


def test_the_bootstrap_gives_the_same_draws_for_the_same_data():
    results = [train_result(world=1, step_times=noisy(0.0336, 0.15, 20, seed)) for seed in (1, 2)]
    first = bootstrap_tokens_per_s(results)
    again = bootstrap_tokens_per_s(
        [train_result(world=1, step_times=r.step_times) for r in results]
    )
    assert first is not None and again is not None
    assert first.tobytes() == again.tobytes()
    other = bootstrap_tokens_per_s(results[:1])
    assert other is not None and other.tobytes() != first.tobytes()


def test_the_interval_covers_the_true_throughput_about_95_times_in_100():
    # 200 independent 20-step launches of one known distribution (median 33.6 ms)
    truth = 8 * 64 / 0.0336
    covered = 0
    for seed in range(200):
        draws = bootstrap_tokens_per_s(
            [train_result(world=1, step_times=noisy(0.0336, 0.15, 20, seed))], resamples=500
        )
        assert draws is not None
        low, high = interval(draws)
        covered += low <= truth <= high
    assert 180 <= covered <= 200  # 95% nominal; a percentile bootstrap of a median runs close


def test_repeats_drop_the_fastest_and_slowest_launch_of_median_based_figures():
    launches = [[0.030] * 10, [0.032] * 10, [0.034] * 10, [0.050] * 10]
    (row,) = scaling_rows({1: [train_result(world=1, step_times=t) for t in launches]})
    assert row.tokens_per_s == pytest.approx((512 / 0.032 + 512 / 0.034) / 2)
    assert row.tokens_per_s_min == pytest.approx(512 / 0.050)
    assert row.tokens_per_s_max == pytest.approx(512 / 0.030)
    assert (row.steps_n, row.launches_n) == (10, 4)


def test_old_results_without_step_times_are_inconclusive_and_say_why():
    rows = scaling_rows(
        {
            1: [train_result(world=1, tokens_per_s=1000)],
            2: [train_result(world=2, tokens_per_s=1900)],
        }
    )
    point = rows[1]
    assert point.efficiency == pytest.approx(0.95)
    assert point.verdict is Verdict.INCONCLUSIVE
    assert (point.efficiency_low, point.efficiency_high) == (None, None)
    assert point.tokens_per_s_low is None
    assert NO_STEPS in point.verdict_reason


def test_old_results_with_repeats_get_an_interval_from_the_launches_alone():
    rows = scaling_rows(
        {
            1: [train_result(world=1, tokens_per_s=t) for t in (990, 1000, 1010)],
            2: [train_result(world=2, tokens_per_s=t) for t in (1900, 1920, 1940)],
        }
    )
    point = rows[1]
    assert point.efficiency_low is not None and point.efficiency_high is not None
    assert 1900 / 2020 <= point.efficiency_low <= point.efficiency_high <= 1940 / 1980
    assert point.verdict is Verdict.SCALES


def test_two_points_with_the_same_step_times_are_still_drawn_independently():
    # strong scaling: the same global batch at 1 and 2 nodes, and (by chance) the same steps
    one, two = (
        replace(train_result(world=world, step_times=ONE_NODE), global_batch=16) for world in (1, 2)
    )
    point = scaling_rows({1: [one], 2: [two]})[1]
    assert point.speedup == 1.0 and point.efficiency == 0.5
    assert point.efficiency_low is not None and point.efficiency_high is not None
    assert point.efficiency_low < 0.48 and point.efficiency_high > 0.52


def test_long_launches_are_drawn_in_chunks_with_the_same_statistic(monkeypatch):
    """Memory stays bounded at any --steps: the steps are drawn a chunk of resamples at a time.
    Chunked or not, the interval is of the same statistic, around the same figure."""
    import runner.report.stats as stats

    results = [train_result(world=1, step_times=noisy(0.0336, 0.15, 400, seed)) for seed in (1, 2)]
    whole = bootstrap_tokens_per_s(results, resamples=400)
    monkeypatch.setattr(stats, "DRAWN_AT_ONCE", 400 * 7)  # 7 resamples a chunk
    chunked = bootstrap_tokens_per_s(results, resamples=400)
    assert whole is not None and chunked is not None and chunked.shape == whole.shape == (400,)
    (low, high), (c_low, c_high) = interval(whole), interval(chunked)
    assert abs(c_low - low) < 0.05 * low and abs(c_high - high) < 0.05 * high
    figure = sum(launch_tokens_per_s(r) for r in results) / 2
    assert c_low <= figure <= c_high
