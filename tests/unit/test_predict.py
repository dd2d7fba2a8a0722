"""`dtrun predict` (issue 26): its description format, its model, its command (runner/predict/,
runner/cli/predict.py, docs/prediction.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from runner.cli.app import app
from runner.errors import UsageError
from runner.predict.inputs import description, read_description
from runner.predict.model import Measured, Setting, expected_max, forecast
from runner.predict.predict import predict
from runner.spec.request import ScalingMode

ISSUE_EXAMPLE = """\
procs_per_node: 8            # GPUs (ranks) per node
mode: weak                   # weak | strong
strategy: ddp                # ddp | fsdp | zero1 | zero2 | zero3 | horovod
parameters: 1.3e9            # trainable parameters
gradient_bytes_per_parameter: 4   # 4 for fp32 gradients, 2 for bf16/fp16
busbw_gbs: 180               # optional: all-reduce busbw across nodes, GB/s (nccl-tests)
busbw_intra_node_gbs: 450    # optional: within one node
batch_per_process: 128
points:                      # two or more measured node counts
  - {nodes: 1, step_time_s: 0.52}
  - {nodes: 2, throughput: 3850}   # either a step time or a (global) throughput
"""


def dtrun(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def described(**change: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "procs_per_node": 8,
        "mode": "weak",
        "points": [{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.05}],
    }
    return data | change


def test_the_issue_s_example_reads_with_yaml_1_2_floats(tmp_path: Path):
    path = tmp_path / "measured.yaml"
    path.write_text(ISSUE_EXAMPLE)
    desc = read_description(path)
    assert desc.parameters == 1.3e9  # PyYAML alone reads 1.3e9 as a string
    assert desc.gradient_bytes == pytest.approx(5.2e9)
    # 128 x 2 x 8 sequences per step at 3,850/s: the 2-node step is 0.532 s
    assert desc.steps() == [(1, 0.52), (2, pytest.approx(2048 / 3850))]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"mode": "sideways"}, "mode: 'sideways' is not one of ['weak', 'strong']"),
        ({"procs_per_node": 0}, "procs_per_node: 0 is less than the minimum of 1"),
        ({"points": [{"nodes": 1, "step_time_s": 1.0}]}, "points: [{'nodes': 1, "),
        (
            {
                "points": [
                    {"nodes": 1, "step_time_s": 1.0, "throughput": 5},
                    {"nodes": 2, "throughput": 9},
                ]
            },
            "points[0]: it needs step_time_s or throughput, one of them, not both",
        ),
        ({"points": [{"nodes": 1}, {"nodes": 2, "throughput": 9}]}, "points[0]: it needs"),
        ({"strategy": "zero4"}, "strategy: 'zero4' is not one of"),
        ({"busbw_gbs": -1}, "busbw_gbs: -1 is outside 0.001 to 100000"),
    ],
)
def test_a_wrong_field_is_named_by_its_place_with_what_it_should_be(change, said):
    with pytest.raises(UsageError) as refused:
        description(described(**change), "m.yaml")
    assert refused.value.exit_code == 2
    assert said in refused.value.message
    assert "docs/prediction.md" in refused.value.message


def test_a_missing_field_is_named_never_guessed():
    data = described()
    del data["mode"]
    with pytest.raises(UsageError, match="the top level: 'mode' is a required property"):
        description(data, "m.yaml")


def test_step_times_and_throughputs_mix_only_through_the_batch():
    mixed = described(points=[{"nodes": 1, "step_time_s": 0.5}, {"nodes": 2, "throughput": 90}])
    with pytest.raises(UsageError, match="compare only through the batch"):
        description(mixed, "m.yaml").steps()
    strong = description({**mixed, "mode": "strong", "global_batch": 64}, "m.yaml")
    assert strong.steps() == [(1, 0.5), (2, pytest.approx(64 / 90))]


@pytest.mark.parametrize(
    ("text", "said"),
    [("points: [", "not YAML or JSON"), ("- 1\n- 2\n", "the top level: [1, 2] is not of type")],
)
def test_a_file_that_is_no_description_is_refused(tmp_path: Path, text, said):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        read_description(path)
    assert said in refused.value.message


def test_a_yaml_bomb_is_refused_before_anything_walks_it(tmp_path: Path):
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join([*lines, "points: *a8", "procs_per_node: 8", "mode: weak"]))
    with pytest.raises(UsageError, match="YAML aliases"):
        read_description(path)


@pytest.mark.parametrize("text", ["[" * 20_000, "- " * 5_000 + "1"])
def test_a_deeply_nested_file_is_refused_at_once_without_a_traceback(tmp_path: Path, text: str):
    # 20 KB of `[` took 37 s in the pure-Python parser; 10 KB of `- ` raised RecursionError
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"not YAML or JSON|nested too deep"):
        read_description(path)
    assert time.monotonic() - started < 5


POINTS = "points: [{nodes: 1, step_time_s: 1}, {nodes: 2, step_time_s: 1.1}]"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (f"parameters: 1{'0' * 400}\n{POINTS}",
         "parameters: a whole number of 401 digits is outside"),
        (f"points: [{{nodes: 1, throughput: 1{'0' * 400}}}, {{nodes: 2, throughput: 3}}]",
         "points[0].throughput: a whole number of 401 digits is outside"),
        (f"note: {'1' * 5000}\n{POINTS}", "not YAML or JSON: Exceeds the limit (4300 digits)"),
        (f"when: 2001-13-45\n{POINTS}", "not YAML or JSON: month must be in 1..12"),
    ],
)  # fmt: skip
def test_a_number_python_cannot_hold_is_refused_without_a_traceback(tmp_path: Path, text, said):
    # OverflowError (int to float) and ValueError (int() past 4,300 digits, datetime) escaped
    path = tmp_path / "m.yaml"
    path.write_text(f"procs_per_node: 8\nmode: weak\n{text}")
    done = dtrun("predict", "--from", str(path), "--nodes", "4")
    assert done.exit_code == 2, done.output
    assert said in " ".join(done.output.split())
    assert "Traceback" not in done.output


def test_a_field_outside_the_format_is_ignored_whatever_it_holds(tmp_path: Path):
    path = tmp_path / "m.yaml"
    path.write_text(f"procs_per_node: 8\nmode: weak\nnote: .inf\n{POINTS}")
    assert read_description(path).procs_per_node == 8  # docs: other fields are ignored


def test_a_missing_file_is_named(tmp_path: Path):
    with pytest.raises(UsageError, match="no such file"):
        read_description(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("procs_per_node: 99999999999999999999999", "procs_per_node: 99999999999999999999999 is "
         "greater than the maximum of 1024"),
        ("points: [{nodes: 1, step_time_s: 1}, {nodes: 100000000000000000, step_time_s: 2}]",
         "points[1].nodes: 100000000000000000 is greater than the maximum of 10000"),
    ],
)  # fmt: skip
def test_a_count_past_the_options_ceiling_is_refused_without_a_traceback(
    tmp_path: Path, line: str, said: str
):
    # 1e23 ranks: the expected slowest rank's quantile rounded to 1 (StatisticsError, exit 1)
    path = tmp_path / "m.yaml"
    fields = {
        "procs_per_node": "procs_per_node: 8",
        "mode": "mode: weak",
        "points": "points: [{nodes: 1, step_time_s: 1}, {nodes: 2, step_time_s: 1.1}]",
    }
    fields[line.split(":")[0]] = line
    path.write_text("\n".join(fields.values()))
    done = dtrun("predict", "--from", str(path), "--nodes", "4")
    assert done.exit_code == 2, done.output
    assert said in done.output.replace("\n", " ").replace("  ", " ")
    assert "Traceback" not in done.output


def test_the_expected_slowest_rank_grows_with_the_ranks():
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(0.564, rel=0.05)  # exact: 1/sqrt(pi)
    assert 1.7 < expected_max(16) < expected_max(64) < expected_max(512) < 3.1  # 1.77, 3.04


def test_weak_scaling_extrapolates_the_measured_growth_along_the_slowest_rank():
    # 1 -> 2 nodes of 8: the step grew 5%; at 8 nodes it grows by the expected maximum's
    # rise from 16 to 64 ranks over its rise from 8 to 16
    setting = Setting(8, ScalingMode.WEAK, absolute=True)
    [fc] = forecast([Measured(1, 1.0), Measured(2, 1.05)], [8], setting)
    rise = (expected_max(64) - expected_max(16)) / (expected_max(16) - expected_max(8))
    assert fc.step == pytest.approx(1.05 + 0.05 * rise)
    assert fc.step is not None and fc.efficiency == pytest.approx(1 / fc.step)
    assert fc.efficiency_high == pytest.approx(1 / 1.05)  # none of it keeps growing
    assert fc.efficiency_low == pytest.approx(1 / (1.05 + 0.1 * rise))  # twice it


def test_a_faster_than_linear_pair_holds_the_efficiency_and_cannot_tell():
    setting = Setting(8, ScalingMode.WEAK, absolute=True)
    [fc] = forecast([Measured(1, 1.0), Measured(2, 0.98)], [8], setting)
    assert (fc.efficiency, fc.efficiency_low, fc.efficiency_high) == (1.0, 1.0, 1.0)
    points = [{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 0.98}]
    [point] = predict(description(described(points=points), "m"), [8], 0.9).predictions
    assert point.verdict == "cannot tell" and "no growth to extrapolate" in point.why


def test_a_faster_than_linear_largest_point_holds_its_own_efficiency_not_the_one_before():
    # 1, 2 and 4 nodes at 1.0, 1.1 and 1.05 s: 4 nodes did better than 2 (95% against 91%);
    # docs/prediction.md step 6 holds the larger point's, 95%, not the 2-node point's
    setting = Setting(8, ScalingMode.WEAK, absolute=True)
    [fc] = forecast([Measured(1, 1.0), Measured(2, 1.1), Measured(4, 1.05)], [8], setting)
    assert fc.efficiency == fc.efficiency_low == fc.efficiency_high == pytest.approx(1 / 1.05)
    assert fc.step == pytest.approx(1.05)


def test_strong_scaling_puts_the_steps_on_the_smallest_point_s_footing():
    # 1 node at 1.0 s, 2 nodes at 0.525 s: 1.05 s of the smallest point's work per step
    strong = Setting(8, ScalingMode.STRONG, absolute=True)
    weak = Setting(8, ScalingMode.WEAK, absolute=True)
    [s8] = forecast([Measured(1, 1.0), Measured(2, 0.525)], [8], strong)
    [w8] = forecast([Measured(1, 1.0), Measured(2, 1.05)], [8], weak)
    assert s8.efficiency == pytest.approx(w8.efficiency)
    assert s8.step is not None and w8.step is not None
    assert s8.step == pytest.approx(w8.step / 8)


def test_the_bytes_and_busbw_narrow_the_range_to_what_the_network_step_cannot_explain():
    # 5.2 GB at 180 GB/s across nodes and 450 within one: 54 ms against 20 ms; a growth of
    # 60 ms leaves at least 26 ms that the step to the network cannot explain
    points = [{"nodes": 1, "step_time_s": 0.5}, {"nodes": 2, "step_time_s": 0.56}]
    data = described(parameters=1.3e9, gradient_bytes_per_parameter=4, busbw_gbs=180,
                     busbw_intra_node_gbs=450, points=points)  # fmt: skip
    bounded = predict(description(data, "m"), [8], 0.9).predictions[0]
    free = predict(description(described(points=data["points"]), "m"), [8], 0.9).predictions[0]
    assert bounded.efficiency == pytest.approx(free.efficiency)
    assert bounded.efficiency_high is not None and free.efficiency_high is not None
    assert bounded.efficiency_high < free.efficiency_high


def test_the_bytes_and_busbw_narrow_a_strong_scaling_range_on_the_same_footing():
    # 1 node at 0.5 s, 2 at 0.3 s: 0.6 s of the smallest point's work, a growth of 100 ms;
    # the all-reduce across nodes, 54 ms in seconds, is 108 ms on that footing, against 20 ms
    # within one node: at least 12 ms that the step to the network cannot explain. The step
    # time itself fell (0.5 to 0.3 s), which left the range unbounded before.
    points = [{"nodes": 1, "step_time_s": 0.5}, {"nodes": 2, "step_time_s": 0.3}]
    comm = {"parameters": 1.3e9, "gradient_bytes_per_parameter": 4, "busbw_gbs": 180,
            "busbw_intra_node_gbs": 450}  # fmt: skip
    bounded = predict(description(described(mode="strong", points=points, **comm), "m"), [8], 0.9)
    free = predict(description(described(mode="strong", points=points), "m"), [8], 0.9)
    [b], [f] = bounded.predictions, free.predictions
    assert b.efficiency == pytest.approx(f.efficiency)
    assert b.efficiency_high is not None and f.efficiency_high is not None
    assert b.efficiency_high < f.efficiency_high


@pytest.mark.parametrize(
    ("points", "verdict"),
    [
        ([{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.005}], "scales"),
        ([{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.2}], "loses"),
        ([{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.08}], "cannot tell"),
    ],
)
def test_the_verdict_is_the_range_s_against_the_target(points, verdict):
    [point] = predict(description(described(points=points), "m"), [16], 0.9).predictions
    assert point.verdict == verdict


def test_node_counts_already_measured_are_refused():
    with pytest.raises(UsageError, match="already measured or below"):
        predict(description(described(), "m"), [2, 8], 0.9)


def test_predict_from_a_file_prints_json_with_every_assumption(tmp_path: Path):
    path = tmp_path / "measured.yaml"
    path.write_text(ISSUE_EXAMPLE)
    done = dtrun("predict", "--from", str(path), "--nodes", "8,16", "--json",
                 "--price-per-node-hour", "98.32")  # fmt: skip
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout[done.stdout.index("{") :])
    assert data["schema"] == "dtrun.predict/1"
    assert [p["nodes"] for p in data["predictions"]] == [8, 16]
    first = data["predictions"][0]
    assert first["efficiency_low"] <= first["efficiency"] <= first["efficiency_high"]
    assert first["verdict"] in ("scales", "loses", "cannot tell")
    assert any("5.2 GB per step (ddp) at 180 GB/s" in line for line in data["assumptions"])
    # no launches in a description: 1,000 steps at the predicted step time, on 8 nodes
    cost = first["cost"]
    assert cost["what"] == "1,000 steps"
    assert cost["usd"] == pytest.approx(8 * 1000 * first["step_time_s"] / 3600 * 98.32)


def test_size_gives_a_description_its_catalog_busbw_across_nodes(tmp_path: Path):
    # --size's help: "its busbw across nodes from the catalog"; a description without
    # busbw_gbs was predicted unbounded, as if --size had not been passed
    points = [{"nodes": 1, "step_time_s": 0.5}, {"nodes": 2, "step_time_s": 0.56}]
    data = described(parameters=1.3e9, gradient_bytes_per_parameter=4, busbw_intra_node_gbs=450,
                     points=points)  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    size = "Standard_ND96isr_H100_v5"
    done = dtrun("predict", "--from", str(path), "--nodes", "8", "--size", size, "--json")
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout[done.stdout.index("{") :])
    assert any(
        line.startswith(f"busbw 385 GB/s across nodes: {size}'s") for line in out["assumptions"]
    )
    assert not any("not bounded by its bytes" in line for line in out["assumptions"])
    free = predict(description(data, "m"), [8], 0.9).predictions[0]
    assert out["predictions"][0]["efficiency_high"] < free.efficiency_high


def test_a_size_whose_busbw_does_not_apply_is_said_not_silently_dropped(tmp_path: Path):
    # ND96's catalog busbw is for its 8 GPUs per node; a 2-process-per-node description is not
    data = described(procs_per_node=2, parameters=1.3e9, gradient_bytes_per_parameter=4)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    done = dtrun("predict", "--from", str(path), "--nodes", "8", "--size",
                 "Standard_ND96isr_H100_v5", "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout[done.stdout.index("{") :])
    assert (
        "--size ND96isr_H100_v5: its catalog busbw is for all its 8 GPUs per node, and the run "
        "had 2 processes per node, so it is not used"
    ) in out["assumptions"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--nodes", "8"), "needs a run directory or --from FILE"),
        (("--from", "m.yaml"), "--nodes is needed"),
        (("--from", "m.yaml", "--nodes", "8,x"), "is not a list of node counts"),
        (("--from", "m.yaml", "--nodes", "0"), "--nodes needs node counts of at least 1"),
        (("--from", "m.yaml", "--nodes", "8", "--busbw", "nan"), "--busbw must be above 0"),
        (("--from", "m.yaml", "--nodes", "8", "--target-efficiency", "2"), "a fraction above 0"),
        (("--from", "m.yaml", "--nodes", "8", "--size", "Standard_NOPE"), "Standard_NOPE"),
    ],
)
def test_bad_options_are_one_message_and_exit_2(tmp_path: Path, monkeypatch, args, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(ISSUE_EXAMPLE)
    done = dtrun("predict", *args)
    assert done.exit_code == 2, done.output
    assert said in done.output
    assert "Traceback" not in done.output


def test_a_run_s_report_says_what_2x_and_4x_its_largest_node_count_would_give(
    tmp_path: Path, fixed_inventory
):
    from runner.azure.prices import Price
    from runner.report.build import build_report
    from runner.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    bench = BenchSpec(run_id="r", node_counts=(1, 2), repeat=2)
    run = fake_run_dir(
        tmp_path / "r", bench, fixed_inventory, {}, busbw={2: 40.0},
        step_times={1: [[0.1] * 10] * 2, 2: [[0.105] * 10] * 2},
        price=Price(10.0, "--price-per-node-hour"), launch_wall_s={1: 20.0, 2: 30.0},
    )  # fmt: skip
    report = build_report(run)
    assert report.next_counts is not None
    four, eight = report.next_counts.predictions
    assert (four.nodes, eight.nodes) == (4, 8)
    assert eight.step_time_s is not None and four.step_time_s is not None
    assert 0.105 < four.step_time_s < eight.step_time_s  # the growth goes on
    # the 2-node point's 2 launches of 30 s, each 10 steps longer by the predicted difference
    assert four.cost is not None and four.cost.launches == 2
    assert four.cost.launch_s == pytest.approx(30 + 10 * (four.step_time_s - 0.105))
    assert four.cost.usd == pytest.approx(4 * 2 * four.cost.launch_s / 3600 * 10)
    text = run.report.read_text()
    assert "## Next node counts" in text and "| 8 |" in text
    summary = json.loads(run.summary.read_text())
    assert [p["nodes"] for p in summary["next_node_counts"]["predictions"]] == [4, 8]
    # and `dtrun predict` on the run directory gives the same for any node count
    done = dtrun("predict", str(run.path), "--nodes", "4,16", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout[done.stdout.index("{") :])
    assert data["predictions"][0]["efficiency"] == pytest.approx(four.efficiency)
    assert any("as the probe measured it at 2 nodes" in a for a in data["assumptions"])


@pytest.mark.parametrize(
    ("sharded", "strategy", "factor"),
    [(None, "ddp", 1.0), ("FSDP (DTensor shards)", "fsdp", 1.5),
     ("DeepSpeed ZeRO stage 3", "zero3", 1.5), ("DeepSpeed ZeRO stage 2", "zero2", 1.0)],
)  # fmt: skip
def test_a_program_s_prediction_counts_its_sharding_as_the_report_s_sync_does(
    tmp_path: Path, fixed_inventory, sharded, strategy, factor
):
    # a program's rows say "your program": the prediction counted FSDP's gradient sync as
    # one all-reduce where the report's losses (sync_factor) count 1.5
    from dataclasses import replace

    from runner.report.build import analyse
    from runner.report.losses import sync_factor
    from runner.report.predicted import from_report
    from runner.report.results import PROGRAM_STRATEGY
    from runner.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    run = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r", node_counts=(1, 2)),
                       fixed_inventory, {}, busbw={2: 40.0},
                       step_times={1: [[0.1] * 10], 2: [[0.105] * 10]})  # fmt: skip
    report = analyse(run)
    rows = tuple(replace(r, strategy=PROGRAM_STRATEGY, sharded=sharded) for r in report.rows)
    desc = from_report(replace(report, rows=rows), size=None, busbw=None).description
    assert desc.strategy == strategy
    assert sync_factor(rows[-1])[0] == factor
    gradient = rows[-1].gradient_bytes
    assert gradient and desc.gradient_bytes == pytest.approx(factor * gradient)


def test_a_prediction_from_the_embedded_cluster_says_whose_growth_it_is(tmp_path: Path):
    from runner.engines.embedded.inventory import local_cluster
    from runner.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    embedded = local_cluster(2, python_bin="/v/bin", code_dir="/c", cpu_count=4)
    run = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r"), embedded, {},
                       step_times={1: [[0.1] * 10], 2: [[0.11] * 10]})  # fmt: skip
    done = dtrun("predict", str(run.path), "--nodes", "4")
    assert done.exit_code == 0, done.output
    assert "measured on the embedded cluster" in done.output


def test_predict_refuses_a_run_with_one_node_count(tmp_path: Path, fixed_inventory):
    from runner.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    run = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r", node_counts=(1,)), fixed_inventory,
                       {}, step_times={1: [[0.1] * 10]})  # fmt: skip
    done = dtrun("predict", str(run.path), "--nodes", "4")
    assert done.exit_code == 2
    assert "has 1 measured node count; a prediction needs two or more" in done.output


def test_predict_and_the_report_show_one_efficiency_per_point(tmp_path: Path, fixed_inventory):
    # two 2-node launches of 0.1 s and 0.2 s steps: the report's statistic (tokens/s at each
    # launch's median step, mean over launches) gives 75%; the median of the launches' median
    # step times gave `dtrun predict` 67% for the same point
    from runner.report.build import build_report
    from runner.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    bench = BenchSpec(run_id="r", node_counts=(1, 2), repeat=2)
    run = fake_run_dir(tmp_path / "r", bench, fixed_inventory, {}, busbw={2: 40.0},
                       step_times={1: [[0.1] * 10] * 2, 2: [[0.1] * 10, [0.2] * 10]})  # fmt: skip
    report = build_report(run)
    assert [round(r.efficiency, 4) for r in report.rows] == [1.0, 0.75]
    assert "| 2 | " in run.report.read_text() and "75%" in run.report.read_text()
    summary = json.loads(run.summary.read_text())
    assert [p["efficiency"] for p in summary["next_node_counts"]["measured"]] == pytest.approx(
        [1.0, 0.75]
    )
    done = dtrun("predict", str(run.path), "--nodes", "4", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout[done.stdout.index("{") :])
    assert [p["efficiency"] for p in data["measured"]] == pytest.approx([1.0, 0.75])
    assert data["statistic"] == "the report's, at the median step time"
    printed = dtrun("predict", str(run.path), "--nodes", "4")
    said = "measured efficiency, the report's, at the median step time: 1 node 100%, 2 nodes 75%"
    assert said in " ".join(printed.output.split())
