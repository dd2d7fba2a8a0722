"""Scaling arithmetic against hand-computed values (docs/facts.md §7)."""

from __future__ import annotations

import pytest

from dtrun.report.metrics import scaling_rows, trimmed_mean
from dtrun.report.results import TrainResult, parse_train_result
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


# All-reduce bandwidth, as nccl-tests computes it (docs/facts.md §7): hand-computed figures.


@pytest.mark.parametrize(
    ("world", "algbw", "busbw"),
    [
        (2, 10.0, 10.0),  # factor 2(2-1)/2 = 1
        (4, 10.0, 15.0),  # factor 2(4-1)/4 = 1.5
        (8, 10.0, 17.5),  # factor 2(8-1)/8 = 1.75
        (16, 10.0, 18.75),  # factor 2(16-1)/16 = 1.875
    ],
)
def test_algbw_and_busbw_are_nccl_tests_figures(world, algbw, busbw):
    from dtrun.workloads.allreduce import bandwidths, bus_factor

    # 1 GB (1e9 bytes, not GiB) in 0.1 s is 10 GB/s of algorithm bandwidth
    assert bandwidths(1_000_000_000, 0.1, world) == pytest.approx((algbw, busbw))
    assert bus_factor(world) * algbw == pytest.approx(busbw)


def test_a_gib_in_five_milliseconds_on_eight_ranks():
    """Sizes are powers of 1024 (-b 1G), bandwidths powers of 1000: 1073741824 B / 5 ms =
    214.748 GB/s algbw; x 1.75 = 375.810 GB/s busbw."""
    from dtrun.workloads.allreduce import bandwidths

    algbw, busbw = bandwidths(1024**3, 0.005, 8)
    assert (round(algbw, 3), round(busbw, 3)) == (214.748, 375.810)


def test_allreduce_seconds_turns_the_formula_around():
    from dtrun.report.losses import allreduce_seconds

    # 64 MB over 4 ranks at 15 GB/s busbw: algbw 10 GB/s, so 6.4 ms
    assert allreduce_seconds(64_000_000, 15.0, 4) == pytest.approx(0.0064)


def test_time_to_train_divides_the_first_count_s_time_evenly():
    from dtrun.report.metrics import projection

    rows = scaling_rows(
        {
            1: [train_result(world=1, tokens_per_s=1000)],
            2: [train_result(world=2, tokens_per_s=1600)],
            4: [train_result(world=4, tokens_per_s=4000)],
        }
    )
    got = [(p.nodes, p.measured_s, p.ideal_s, p.lost_s) for p in projection(rows, 1_000_000)]
    assert got == [
        (1, 1000.0, 1000.0, 0.0),
        (2, 625.0, 500.0, 125.0),
        (4, 250.0, 250.0, 0.0),
    ]


def _probed(world: int, tokens_per_s: float, busbw: float) -> TrainResult:
    from tests.factories import result_data

    data = result_data(world=world, tokens_per_s=tokens_per_s, busbw=busbw)
    return parse_train_result(data, "test")


def test_where_scaling_is_lost_names_the_network_when_busbw_is_short():
    from dtrun.report.losses import where_scaling_is_lost

    rows = scaling_rows(
        {
            1: [_probed(8, 8000, 470.0)],
            2: [_probed(16, 9600, 120.0)],  # 60% efficiency, busbw far below 370
            4: [_probed(32, 30000, 400.0)],  # 94%, but no per-step times: no interval
        }
    )
    # 8 processes per node: the H100 size's expectations apply
    losses = where_scaling_is_lost(rows, "Standard_ND96isr_H100_v5")
    assert losses[0].expected is not None and losses[0].expected.low == 479.0
    second = losses[1].expected
    assert second is not None and (second.low, second.high) == (370.0, 400.0)
    assert "the baseline" in losses[0].finding
    assert "the network is short, 120.0 GB/s busbw is 32% of the expected 370-400" in (
        losses[1].finding
    )
    assert losses[2].finding == (
        "94%, at or above the 90% target, but not shown to scale: inconclusive (see the verdict)"
    )


def test_where_scaling_is_lost_without_a_probe_says_so():
    from dtrun.report.losses import where_scaling_is_lost

    rows = scaling_rows(
        {
            1: [train_result(world=1, tokens_per_s=1000)],
            2: [train_result(world=2, tokens_per_s=1000)],
        }
    )
    losses = where_scaling_is_lost(rows, None)
    assert losses[1].busbw is None and losses[1].comm_share is None
    assert "no all-reduce probe" in losses[1].finding


def test_expected_busbw_needs_every_gpu_of_the_size():
    from dtrun.azure.sizefacts import expected_busbw

    one_node = expected_busbw("Standard_ND96asr_v4", 1, 8)
    four_nodes = expected_busbw("Standard_ND96asr_v4", 4, 8)
    assert one_node is not None and one_node.describe().startswith("231 GB/s")
    assert four_nodes is not None and four_nodes.describe().startswith("185-190 GB/s")
    assert expected_busbw("Standard_ND96asr_v4", 1, 4) is None  # half the GPUs, half the NICs
    assert expected_busbw(None, 2, 1) is None
    assert expected_busbw("Standard_ND96isr_MI300X_v5", 2, 8) is None  # no figure in FACTS


def test_busbw_rows_trim_repeats_and_keep_the_spread():
    from dtrun.report.metrics import busbw_rows
    from dtrun.report.resultfile import parse_allreduce_result
    from tests.factories import allreduce_data

    runs = [
        parse_allreduce_result(allreduce_data(world=2, busbw={4096: 0.1, 1 << 20: v}), "t")
        for v in (1.0, 4.0, 1.5)
    ]
    (row,) = busbw_rows({2: runs}, None)
    assert (row.busbw, row.busbw_min, row.busbw_max) == (1.5, 1.0, 4.0)
    assert row.largest_size == 1 << 20 and row.correct and row.expected is None
    assert row.avg_busbw == pytest.approx((0.1 + 1.5) / 2)


def _with(world: int, tokens_per_s: float, busbw: float | None, **fields: object) -> TrainResult:
    from tests.factories import result_data

    return parse_train_result(
        result_data(world=world, tokens_per_s=tokens_per_s, busbw=busbw) | fields, "test"
    )


def test_gradient_sync_counts_what_each_strategy_moves():
    from dtrun.report.losses import allreduce_seconds, gradient_sync_seconds

    one = allreduce_seconds(65536, 2.0, 4)  # 64 KiB * 2(3)/4 / 2 GB/s
    assert one == pytest.approx(65536 * 1.5 / 2e9)
    for strategy, factor in (("ddp", 1.0), ("zero2", 1.0), ("zero3", 1.5), ("fsdp", 1.5)):
        (row,) = scaling_rows({4: [_with(4, 1000, 2.0, strategy=strategy)]})
        assert gradient_sync_seconds(row) == pytest.approx(factor * one), strategy
    # Two pipelines of two ranks: each stage's half of the gradient, all-reduced over 2 replicas
    pipeline = {"strategy": "pipeline", "pp_size": 2, "data_parallel": 2, "micro_batches": 4}
    (row,) = scaling_rows({4: [_with(4, 1000, 2.0, **pipeline)]})
    assert gradient_sync_seconds(row) == pytest.approx(allreduce_seconds(32768, 2.0, 2))
    # One pipeline: no gradient all-reduce at all
    single = pipeline | {"pp_size": 4, "data_parallel": 1}
    (row,) = scaling_rows({4: [_with(4, 1000, 2.0, **single)]})
    assert gradient_sync_seconds(row) is None


def test_pipeline_bubble_against_hand_computed_values():
    from dtrun.report.metrics import pipeline_bubble

    assert pipeline_bubble(1, 4) == 0.0
    assert pipeline_bubble(2, 4) == pytest.approx(1 / 5)  # (p-1)/(m+p-1)
    assert pipeline_bubble(4, 8) == pytest.approx(3 / 11)
    assert pipeline_bubble(4, 8, stages_per_rank=2) == pytest.approx(3 / 19)  # (p-1)/(vm+p-1)


def test_where_scaling_is_lost_names_a_pipeline_bubble():
    from dtrun.report.losses import where_scaling_is_lost

    layout = {"strategy": "pipeline", "micro_batches": 2, "data_parallel": 1}
    rows = scaling_rows(
        {
            1: [_with(1, 1000, None, **layout, pp_size=1)],
            2: [_with(2, 1200, 1.0, **layout, pp_size=2)],  # bubble 1/3, 60% efficiency
        }
    )
    assert rows[1].bubble == pytest.approx(1 / 3)
    losses = where_scaling_is_lost(rows, None)
    assert losses[1].comm_s is None  # one pipeline: nothing all-reduced per step
    finding = losses[1].finding
    assert finding.startswith("40% lost: each rank of the 2-rank pipeline idles about 33%")
    # with enough micro-batches the bubble is small, and the finding looks elsewhere
    layout["micro_batches"] = 32
    rows = scaling_rows(
        {
            1: [_with(1, 1000, None, **layout, pp_size=1)],
            2: [_with(2, 1200, 1.0, **layout, pp_size=2)],
        }
    )
    assert "stages' balance" in where_scaling_is_lost(rows, None)[1].finding
