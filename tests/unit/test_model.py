"""The scaling model (runner/report/model.py) against hand-computed rows and published tables.

The published figures and every input's source are in docs/facts.md §10.
"""

from __future__ import annotations

from typing import Any

import pytest

from dtrun.report.losses import allreduce_seconds, where_scaling_is_lost
from dtrun.report.metrics import scaling_rows
from dtrun.report.model import (
    Assumptions,
    Point,
    compute_seconds,
    efficiency,
    finding,
    model_gap,
    predict,
)
from dtrun.report.results import TrainResult, parse_train_result
from dtrun.spec.request import ScalingMode
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
    assert "the embedded cluster's processes share cores" in second.model_finding


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

    from dtrun.report.build import build_report
    from dtrun.spec.request import BenchSpec
    from tests.factories import fake_run_dir, html_markdown

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
    # within the model's range: report.md points to the table, report.html holds it
    section = run_dir.report.read_text().split("## Where scaling is lost")[1]
    assert "### Predicted against measured" not in section
    assert "Predicted against measured (within the model): " in section
    assert "How the model predicts: docs/report.md#the-model." in section
    html = html_markdown(run_dir).split("### Predicted against measured")[1]
    assert "| 2 | 1024.0 ms | 1024.0-682.7 ms | 50% | 50-75% | within |" in html
    assert "hidden under up\nto 100% of the backward pass" in html_markdown(run_dir)


# --- published tables (docs/facts.md §10) --------------------------------------------------


def test_perfect_strong_scaling_is_the_100_50_25_seconds_example():
    """docs/facts.md §7: 100 s on 1 VM, 50 s on 2, 25 s on 4 is perfect strong scaling."""
    times = {1: 100.0, 2: 50.0, 4: 25.0}
    assert [times[1] / t for t in times.values()] == [1.0, 2.0, 4.0]  # speedup T(1)/T(N)
    assert [efficiency(STRONG, (1, 100.0), (n, t)) for n, t in times.items()] == [1.0] * 3
    # the model, with nothing to communicate, predicts the same table from the 1-VM time
    points = [Point(n, n, t, 0.0) for n, t in times.items()]
    predicted = predict(points, STRONG)
    assert [p.step_s for p in predicted] == [100.0, 50.0, 25.0]
    assert [p.efficiency for p in predicted] == [1.0, 1.0, 1.0]


def test_the_formulas_reproduce_tensorflows_published_dgx1_speedups():
    """TensorFlow's benchmarks (May 2017, DGX-1, synthetic data, images/s) against the
    speedups its announcement states: 7.99x (99%) for InceptionV3, 7.91x (98%) for ResNet-50.
    Tolerance: 0.5% on the speedup and 1 point on the efficiency, as the announcement
    rounds (and truncates) what the table's rounded rates give."""
    table = {"InceptionV3": (142, 1131, 7.99, 0.99), "ResNet-50": (219, 1734, 7.91, 0.98)}
    for model, (one, eight, speedup, stated) in table.items():
        assert eight / one == pytest.approx(speedup, rel=0.005), model
        assert eight / (8 * one) == pytest.approx(stated, abs=0.01), model


def test_the_formulas_reproduce_goyal_et_al_time_to_train():
    """ResNet-50 on ImageNet: 29 hours on 8 GPUs, one hour on 256, "~90% scaling efficiency".
    Fixed total work (90 epochs): strong efficiency N0·T(N0) / (N·T(N)). Tolerance 2 points:
    both times and the efficiency are rounded in the sources."""
    assert efficiency(STRONG, (8, 29.0), (256, 1.0)) == pytest.approx(0.90, abs=0.02)


# Horovod's 512-GPU benchmark, each input from docs/facts.md §10: tf_cnn_benchmarks at 64
# images per GPU (weak scaling), fp32 gradients, 4 GPUs per server behind one 25 Gbit/s NIC.
NIC_GBS = 25 / 8  # 3.125 GB/s: a ring through each server's one NIC reaches at most this busbw
HOROVOD = {  # model: (parameters, images/s on one P100 at batch 64, {GPUs: published E})
    "VGG-16": (138_357_544, 154, {128: 0.79, 512: 0.68}),
    "Inception V3": (27_161_264, 142, {128: 0.90, 512: 0.90}),
    "Inception V3 without its auxiliary head": (23_800_000, 142, {128: 0.90, 512: 0.90}),
}


def _horovod(params: int, images_per_s: float, gpus: int):
    compute = 64 / images_per_s
    sync = allreduce_seconds(4 * params, NIC_GBS, gpus)
    return predict([Point(1, 1, compute, 0.0), Point(gpus, gpus, compute, sync)], WEAK)[1]


def test_the_model_brackets_horovods_published_efficiencies():
    """Each published efficiency lies in the model's range: no overlap (at the NIC's full
    rate, the most it can give) to the all-reduce hidden under the whole backward pass.
    Tolerance: the published figures are whole percentages, so half a point either side."""
    for model, (params, rate, published) in HOROVOD.items():
        for gpus, stated in published.items():
            prediction = _horovod(params, rate, gpus)
            assert prediction.low is not None and prediction.high is not None
            assert prediction.low - 0.005 <= stated <= prediction.high + 0.005, (model, gpus)


def test_no_overlap_cannot_explain_horovods_vgg16():
    """VGG-16's 553 MB of gradients take 354 ms to all-reduce at 25 Gbit/s, against 416 ms of
    compute on a DGX-1's P100: without overlap no network of that speed gives more than 54%,
    and Horovod published 68%. Unless its GPUs were much slower (no overlap would need 751 ms
    of compute), the overlap the model allows is needed to explain the table."""
    params, rate, published = HOROVOD["VGG-16"]
    no_overlap = _horovod(params, rate, 512).efficiency_no_overlap
    assert no_overlap == pytest.approx(0.540, abs=0.002)
    assert published[512] - no_overlap > 0.10
    # and the finding says so when overlap is assumed away
    zero = Assumptions(overlap=0.0)
    sync = allreduce_seconds(4 * params, NIC_GBS, 512)
    prediction = predict([Point(1, 1, 64 / rate, 0.0), Point(512, 512, 64 / rate, sync)],
                         WEAK, zero)[1]  # fmt: skip
    assert finding(published[512], prediction, zero).startswith(
        "measured is 14 points above the model (54%)"
    )
    # the compute c that would give 68% with no overlap: c / (c + sync) = 0.68
    assert published[512] / (1 - published[512]) * sync == pytest.approx(0.751, abs=0.001)


def test_the_gap_is_judged_from_the_measured_interval():
    """A point whose 95% interval reaches the model's range agrees with it; one whose whole
    interval lies below is as far below as the interval's upper end."""
    prediction = predict([Point(1, 1, 1.0, 0.0), Point(2, 2, 1.0, 1.0)], WEAK)[1]  # 50-75%
    assert model_gap(0.40, prediction) == pytest.approx(-0.10)
    assert model_gap(0.40, prediction, (0.30, 0.55)) == 0.0
    assert model_gap(0.40, prediction, (0.30, 0.45)) == pytest.approx(-0.05)
    assert model_gap(0.95, prediction, (0.90, 0.99)) == pytest.approx(0.15)
    assert finding(0.40, prediction, interval=(0.30, 0.55)).startswith("within the model")
