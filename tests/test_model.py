"""The scaling model (runner/report/model.py) against hand-computed rows."""

from __future__ import annotations

from typing import Any

import pytest

from runner.report.metrics import scaling_rows, where_scaling_is_lost
from runner.report.model import (
    Assumptions,
    Point,
    compute_seconds,
    finding,
    model_gap,
    predict,
)
from runner.report.results import TrainResult, parse_train_result
from runner.spec.request import ScalingMode
from tests.factories import GRADIENT_BYTES, result_data

WEAK, STRONG = ScalingMode.WEAK, ScalingMode.STRONG
STEP = 0.512  # the factories' step time at 1000 tokens/s per process (8 sequences of 64)


def _run(world: int, tokens_per_s: float, busbw: float | None = None, **fields: object):
    data = result_data(world=world, tokens_per_s=tokens_per_s, busbw=busbw) | fields
    return parse_train_result(data, "test")


def _losses(results: dict[int, list[TrainResult]], **kwargs):
    return where_scaling_is_lost(scaling_rows(results), None, **kwargs)


def _busbw_for(sync_s: float, world: int) -> float:
    """The busbw (GB/s) at which the factories' 64 KiB gradient takes sync_s to all-reduce."""
    return GRADIENT_BYTES * 2 * (world - 1) / world / sync_s / 1e9


# --- synthetic rows ------------------------------------------------------------------------


def test_a_compute_bound_point_is_predicted_to_scale_and_agrees():
    # 64 KiB at 1 GB/s: 66 µs of a 512 ms step
    losses = _losses({1: [_run(1, 1000)], 2: [_run(2, 2000, busbw=1.0)]})
    second = losses[1]
    assert second.predicted_efficiency == 1.0  # hidden under the backward pass
    assert second.predicted_efficiency_no_overlap == pytest.approx(STEP / (STEP + 65536e-9))
    assert second.model_gap == 0.0
    assert second.model_finding.startswith("within the model (100%)")
    assert losses[0].model_finding == "the baseline the model starts from"


def test_a_communication_bound_point_is_predicted_to_lose():
    # the all-reduce takes as long as the compute (512 ms): with no overlap the step doubles,
    # with the backward pass (2/3 of it) hiding what it can, 512 + 512/3 ms
    sync = STEP
    losses = _losses({1: [_run(1, 1000)], 2: [_run(2, 1000, busbw=_busbw_for(sync, 2))]})
    second = losses[1]
    assert second.predicted_step_time_no_overlap_s == pytest.approx(2 * STEP)
    assert second.predicted_step_time_s == pytest.approx(STEP + STEP / 3)
    assert second.predicted_efficiency_no_overlap == pytest.approx(0.5)
    assert second.predicted_efficiency == pytest.approx(0.75)
    assert second.efficiency == pytest.approx(0.5)  # measured: exactly the no-overlap bound
    assert second.model_gap == 0.0 and "within the model (50% to 75%)" in second.model_finding


def test_overlap_is_a_stated_parameter():
    points = [Point(1, 1, 1.0, 0.0), Point(2, 2, 1.0, 1.0)]  # sync as long as the compute
    none, half, full = (
        predict(points, WEAK, Assumptions(overlap=overlap))[1] for overlap in (0.0, 0.5, 1.0)
    )
    assert none.efficiency == none.efficiency_no_overlap == pytest.approx(0.5)
    # half of the 2/3 backward pass hides a third of the sync: 1 + 2/3 s
    assert half.step_s == pytest.approx(1 + 2 / 3) and half.efficiency == pytest.approx(0.6)
    assert full.step_s == pytest.approx(1 + 1 / 3) and full.efficiency == pytest.approx(0.75)
    assert Assumptions(overlap=0.5).describe().endswith("overlap from 0 (none) to 50% of the "
                                                        "backward pass")  # fmt: skip
    with pytest.raises(ValueError, match="fractions"):
        Assumptions(overlap=1.5)


def test_strong_scaling_divides_the_compute_and_weak_keeps_it():
    points = [Point(1, 1, 1.0, 0.0), Point(2, 2, 1.0, 0.25)]
    weak, strong = (predict(points, mode, Assumptions(overlap=0.0))[1] for mode in (WEAK, STRONG))
    assert weak.step_s == pytest.approx(1.25)  # the same 1 s of compute, plus the sync
    assert weak.efficiency == pytest.approx(1 / 1.25)  # T(1) / T(2)
    assert strong.step_s == pytest.approx(0.75)  # half the batch: 0.5 s, plus the sync
    assert strong.efficiency == pytest.approx(1 / (2 * 0.75))  # T(1) / (2·T(2))


def test_strong_scaling_divides_by_replicas_not_processes():
    # ZeRO-style rows whose replicas are recorded: 4 processes, 2 replicas
    points = [Point(1, 2, 1.0, 0.0), Point(2, 4, 1.0, 0.0)]
    assert predict(points, STRONG)[1].step_s == pytest.approx(0.5)


def test_a_baseline_with_its_own_sync_is_credited_with_it():
    # 2 processes on the first node count: its 0.4 s step holds 0.2 s of exposed sync
    points = [Point(1, 2, 0.4, 0.2), Point(2, 4, 0.5, 0.3)]
    base, second = predict(points, WEAK, Assumptions(overlap=0.0))
    assert base.step_s == pytest.approx(0.4)  # the model reproduces what it started from
    assert second.step_s == pytest.approx(0.2 + 0.3)
    # with overlap, c + max(0, 0.2 - 2/3 c) = 0.4 gives c = 0.6: all hidden, c = T
    assert compute_seconds(0.4, 0.2, 1.0, 2 / 3) == pytest.approx(0.4)
    assert compute_seconds(0.4, 0.3, 1.0, 2 / 3) == pytest.approx(0.1 / (1 / 3))


def test_missing_busbw_gives_no_prediction_and_says_why():
    losses = _losses({1: [_run(1, 1000)], 2: [_run(2, 1500)]})  # --no-busbw: no probe
    assert losses[1].predicted_efficiency is None and losses[1].model_gap is None
    assert losses[1].model_finding == "no prediction: no all-reduce probe at this node count"
    points = [Point(1, 2, 0.4, None), Point(2, 4, 0.5, 0.3)]
    assert all(p.missing and "baseline has no all-reduce probe" in p.missing
               for p in predict(points, WEAK))  # fmt: skip
    # a sync longer than the whole measured step: the probe and the training disagree
    assert predict([Point(1, 2, 0.1, 0.5)], WEAK)[0].missing == (
        "the baseline's all-reduce at the probed busbw takes longer than its step"
    )


def test_a_pipeline_is_not_modelled():
    layout: dict[str, Any] = {"strategy": "pipeline", "micro_batches": 4, "data_parallel": 1}
    losses = _losses({1: [_run(1, 1000, **layout, pp_size=1)],
                      2: [_run(2, 1200, 1.0, **layout, pp_size=2)]})  # fmt: skip
    assert losses[1].predicted_efficiency is None
    assert "the model covers DDP, ZeRO, FSDP" in losses[1].model_finding


def test_a_point_far_below_the_model_is_a_finding():
    # measured 50% while the model, at 1 GB/s, predicts about 100%
    losses = _losses({1: [_run(1, 1000)], 2: [_run(2, 1000, busbw=1.0)]}, oversubscribed=[2])
    second = losses[1]
    assert second.model_gap == pytest.approx(0.5 - STEP / (STEP + 65536e-9))
    assert second.model_finding.startswith("measured is 50 points below the model (100%)")
    assert "more processes than this machine has cores" in second.model_finding


def test_a_point_far_above_the_model_is_a_finding():
    prediction = predict([Point(1, 1, 1.0, 0.0), Point(2, 2, 1.0, 1.0)], WEAK)[1]  # 50-75%
    assert model_gap(0.95, prediction) == pytest.approx(0.20)
    text = finding(0.95, prediction)
    assert text.startswith("measured is 20 points above the model (50% to 75%)")
    assert "more overlap than" not in text  # full overlap was already assumed
    assert "more overlap than the assumed 50%" in finding(
        0.95, predict([Point(1, 1, 1.0, 0.0), Point(2, 2, 1.0, 1.0)], WEAK,
                      Assumptions(overlap=0.5))[1], Assumptions(overlap=0.5))  # fmt: skip
    # within 10 points of the range is agreement, not a finding
    assert finding(0.80, prediction) == "agrees with the model (50% to 75%) within 10 points"


def test_the_summary_carries_the_prediction_per_row(tmp_path, fixed_inventory):
    import json

    from runner.report.build import build_report
    from runner.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    bench = BenchSpec(run_id="m1", node_counts=(1, 2))
    run_dir = fake_run_dir(tmp_path / "m1", bench, fixed_inventory, {1: [1000], 2: [1000]},
                           busbw={2: _busbw_for(STEP, 2)})  # fmt: skip
    build_report(run_dir)
    summary = json.loads(run_dir.summary.read_text())
    second = summary["where_scaling_is_lost"][1]
    assert second["predicted_step_time_s"] == pytest.approx(STEP * 4 / 3)
    assert second["predicted_efficiency"] == pytest.approx(0.75)
    assert second["predicted_efficiency_no_overlap"] == pytest.approx(0.5)
    assert second["model_gap"] == 0.0
    assert summary["model"]["overlap"] == 1.0
    assert summary["model"]["backward_share"] == pytest.approx(2 / 3)
    section = run_dir.report.read_text().split("### Predicted against measured")[1]
    assert "| 2 | 2 | 1 | 1024.0 ms | 1024.0 to 682.7 ms | 50% | 50 to 75% | within |" in section
    assert "hidden under up\nto 100% of the backward pass" in section
