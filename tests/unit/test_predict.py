"""`dtrun predict` (issue 26): its description format, its model, its command (runner/predict/,
runner/cli/predict.py, docs/prediction.md)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.errors import UsageError
from dtrun.predict.files import read_description
from dtrun.predict.inputs import description
from dtrun.predict.model import (
    SPREAD_SDS,
    Comm,
    Measured,
    Setting,
    expected_max,
    forecast,
    posterior,
    step_bound,
)
from dtrun.predict.predict import predict
from dtrun.predict.prior import PRIORS
from dtrun.spec.request import ScalingMode

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
        ({"step_spread": -0.1}, "step_spread: -0.1 is outside 0 to 100"),
        ({"step_spread": 1e9}, "step_spread: 1e+09 is outside 0 to 100"),
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
    [
        ("points: [", "not YAML or JSON"),
        ("- 1\n- 2\n", "the top level: it holds a list, not a mapping"),
    ],
)
def test_a_file_that_is_no_description_is_refused(tmp_path: Path, text, said):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        read_description(path)
    assert said in refused.value.message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("DB_PASSWORD=s3cr3t-value\nAPI_TOKEN=t0ken-value\n", "it holds text, not a mapping"),
        ("machine example.com login bob password s3cr3t-value\n", "it holds text, not a"),
        ("db.example.com:5432:app:bob:s3cr3t-value\n", "it holds text, not a mapping"),
        ("- s3cr3t-value\n- t0ken-value\n", "it holds a list, not a mapping"),
    ],
    ids=["dotenv", "netrc", "pgpass", "list"],
)
def test_a_file_given_by_mistake_is_refused_without_showing_what_it_holds(
    tmp_path: Path, text: str, said: str
):
    """`--from .env` (or ~/.netrc, ~/.pgpass) reads as one YAML string, which the message
    quoted: the secrets in it were printed (docs/security.md, "Redaction")."""
    path = tmp_path / "measured.yaml"
    path.write_text(text)
    done = dtrun("predict", "--from", str(path), "--nodes", "4")
    assert done.exit_code == 2, done.output
    shown = " ".join(done.output.split())
    assert said in shown
    assert "s3cr3t-value" not in shown
    assert "t0ken-value" not in shown


def _sparse(path: Path) -> None:
    with path.open("wb") as file:
        file.truncate(1 << 30)


@pytest.mark.parametrize(
    "make",
    [
        lambda path: path.write_text("points: ["),  # not YAML
        lambda path: path.write_bytes(b"mode: w\xe9ak\n"),  # not UTF-8
        _sparse,  # too large
        lambda path: path.write_text(f"note: {'1' * 5000}\n"),  # a number Python cannot hold
    ],
    ids=["not-yaml", "not-utf8", "a-gigabyte", "5000-digits"],
)
def test_a_file_that_is_no_description_is_refused_with_what_to_do(tmp_path: Path, make):
    path = tmp_path / "m.yaml"
    make(path)
    with pytest.raises(UsageError) as refused:
        read_description(path)
    assert 'docs/prediction.md "From a description"' in refused.value.fix


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
        (f"note: {'1' * 5000}\n{POINTS}",
         "line 3: a whole number of 5,000 digits is too long: dtrun reads whole numbers of at "
         "most 4,300 digits"),
        (f"strategy: 2001-13-45\n{POINTS}", "strategy: '2001-13-45' is not one of"),
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


@pytest.mark.parametrize(
    ("value", "said"),
    [("2001-01-01", "points[0].nodes: '2001-01-01' is not of type 'integer'"),
     ("2001-01-01 10:00:00", "points[0].nodes: '2001-01-01 10:00:00' is not of type"),
     ("!!timestamp 2001-01-01", "points[0].nodes: '2001-01-01' is not of type")],
)  # fmt: skip
def test_a_date_in_a_description_is_shown_as_the_file_has_it(tmp_path: Path, value, said):
    """YAML 1.1 made it a datetime.date, and the error showed `datetime.date(2001, 1, 1)`."""
    path = tmp_path / "m.yaml"
    points = f"points: [{{nodes: {value}, step_time_s: 1}}, {{nodes: 2, step_time_s: 1.1}}]"
    path.write_text(f"procs_per_node: 8\nmode: weak\n{points}\n")
    done = dtrun("predict", "--from", str(path), "--nodes", "4")
    assert done.exit_code == 2, done.output
    shown = " ".join(done.output.split())
    assert said in shown and "datetime" not in shown, shown


def test_a_number_of_thousands_of_digits_is_refused_as_too_long_naming_its_line(tmp_path: Path):
    """int() refused it with "use sys.set_int_max_str_digits() to increase the limit": advice
    for a programmer, not for whoever wrote the file."""
    path = tmp_path / "m.yaml"
    path.write_text(f"procs_per_node: 8\nmode: weak\nparameters: {'1' * 5000}\n{POINTS}\n")
    done = dtrun("predict", "--from", str(path), "--nodes", "4")
    assert done.exit_code == 2, done.output
    shown = " ".join(done.output.split())
    assert "line 3: a whole number of 5,000 digits is too long" in shown, shown
    assert "set_int_max_str_digits" not in shown and "Traceback" not in shown


def test_a_field_outside_the_format_is_ignored_whatever_it_holds(tmp_path: Path):
    path = tmp_path / "m.yaml"
    path.write_text(f"procs_per_node: 8\nmode: weak\nnote: .inf\n{POINTS}")
    assert read_description(path).procs_per_node == 8  # docs: other fields are ignored


def test_a_missing_file_is_named(tmp_path: Path):
    with pytest.raises(UsageError, match="no such file"):
        read_description(tmp_path / "nope.yaml")


def test_the_description_read_is_the_file_its_size_was_checked_on(tmp_path, monkeypatch):
    """A file swapped for a larger one between a check by name and the read (a race) is not
    read: the checks and the read are one open's."""
    import os

    path = tmp_path / "m.yaml"
    path.write_text(f"procs_per_node: 8\nmode: weak\n{POINTS}")
    real_stat = os.stat

    def stat_then_swap(target: Any, *args: Any, **kwargs: Any) -> Any:
        found = real_stat(target, *args, **kwargs)
        if str(target) == str(path):  # looked at by name: now swap in 2 MB
            (tmp_path / "big").write_text("procs_per_node: 4\n" + "#" * (2 << 20))
            (tmp_path / "big").replace(path)
        return found

    monkeypatch.setattr(os, "stat", stat_then_swap)
    assert read_description(path).procs_per_node == 8


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


WEAK = Setting(8, ScalingMode.WEAK, absolute=True)


def _loss(fc: Any) -> float:
    return float(1 / fc.efficiency - 1)


def test_the_first_loss_is_mostly_the_one_time_step_not_growth_carried_forward():
    # 1 -> 2 nodes lost 13% (a 15% longer step): the old model carried all of it forward along
    # the slowest rank's curve, 70% at 8 nodes; the step onto the network does not grow again
    prior = PRIORS["weak"]
    [fc] = forecast([Measured(1, 1.0), Measured(2, 1.15)], [8], WEAK)
    post = posterior(prior, 1, [(2, 0.15)])
    step, growth = post.mean
    assert step > growth  # the step took more of it than the growth
    # from the 2-node point as measured: two more doublings of the growth
    assert _loss(fc) == pytest.approx(0.15 + 2 * growth)
    assert fc.efficiency is not None and fc.efficiency > 0.75


def test_a_third_point_measures_the_growth():
    # the same 10% step at 2 nodes; at 4 nodes flat or 6% more: the run's own growth moves
    # the prior's, and a third point narrows the range
    [flat] = forecast([Measured(1, 1.0), Measured(2, 1.1), Measured(4, 1.1)], [16], WEAK)
    [steep] = forecast([Measured(1, 1.0), Measured(2, 1.1), Measured(4, 1.16)], [16], WEAK)
    [two] = forecast([Measured(1, 1.0), Measured(2, 1.1)], [16], WEAK)
    assert _loss(flat) - 0.1 < _loss(steep) - 0.16
    assert flat.efficiency_high is not None and two.efficiency_high is not None
    assert flat.efficiency_high - (flat.efficiency_low or 0) < two.efficiency_high - (
        two.efficiency_low or 0
    )


def test_without_a_measured_spread_each_doubling_loses_the_same():
    # no latency term linear in the nodes: learned, it made the forecasts worse with each
    # source left out (docs/prediction.md); a knee comes only from a measured spread
    strong = Setting(8, ScalingMode.STRONG, absolute=True)
    counts = [16, 32, 64, 128]
    fcs = forecast([Measured(2, 1.0), Measured(4, 0.51)], counts, strong)
    losses_ = [_loss(fc) for fc in fcs]
    steps = [b - a for a, b in itertools.pairwise(losses_)]
    assert steps[0] > 0
    assert steps == pytest.approx([steps[0]] * 3)  # the posterior's growth, each doubling
    # and the step time is put back from the smallest point's footing: x N0 / N
    assert fcs[-1].step == pytest.approx(1.0 * (1 + losses_[-1]) * 2 / 128)


def test_a_faster_than_linear_pair_still_predicts_from_the_prior_with_a_range():
    [fc] = forecast([Measured(1, 1.0), Measured(2, 0.98)], [8], WEAK)
    assert fc.efficiency is not None and fc.efficiency_low is not None
    assert fc.efficiency_low < fc.efficiency < 1.02  # the growth per doubling goes on


def test_the_measured_spread_puts_a_floor_of_straggler_tax_under_the_growth():
    # a spread (p90 - p10) / p50 of 50%: ranks' steps with sd 0.5 / 2.56 of the median; from
    # 16 to 1,024 ranks the slowest's expected rise is that times m(1024) - m(16)
    spread = Setting(8, ScalingMode.WEAK, absolute=True, spread=0.5)
    [calm] = forecast([Measured(1, 1.0), Measured(2, 1.05)], [128], WEAK)
    [noisy] = forecast([Measured(1, 1.0), Measured(2, 1.05)], [128], spread)
    tax = 0.5 / SPREAD_SDS * (expected_max(1024) - expected_max(16))
    assert _loss(noisy) == pytest.approx(0.05 + tax)
    assert noisy.efficiency is not None and calm.efficiency is not None
    assert noisy.efficiency < calm.efficiency


def test_the_bytes_and_busbw_cap_the_one_time_step():
    # 5.2 GB at 400 GB/s across nodes and 450 within one: 24.4 ms against 20.2 ms, at most
    # 4.2 ms of the 60 ms growth (a loss of 0.008 of 0.12) is the step; the growth per
    # doubling takes more, and the forecast is lower
    points = [{"nodes": 1, "step_time_s": 0.5}, {"nodes": 2, "step_time_s": 0.56}]
    comm = {"parameters": 1.3e9, "gradient_bytes_per_parameter": 4, "busbw_gbs": 400,
            "busbw_intra_node_gbs": 450}  # fmt: skip
    bounded = predict(description(described(points=points, **comm), "m"), [8], 0.9)
    free = predict(description(described(points=points), "m"), [8], 0.9)
    [b], [f] = bounded.predictions, free.predictions
    assert b.efficiency is not None and f.efficiency is not None
    assert b.efficiency < f.efficiency
    setting = Setting(8, ScalingMode.WEAK, True, Comm(5.2e9, 400, 450))
    bound = step_bound(Measured(1, 0.5), Measured(2, 0.56), setting)
    assert bound == pytest.approx((2 * 15 / 16 * 5.2 / 400 - 2 * 7 / 8 * 5.2 / 450) / 0.5)
    # a bound above the posterior's step changes nothing (at 100 GB/s: a loss of 0.155)
    wide = predict(description(described(points=points, **comm | {"busbw_gbs": 100}), "m"),
                   [8], 0.9)  # fmt: skip
    assert wide.predictions[0].efficiency == pytest.approx(f.efficiency)


@pytest.mark.parametrize(
    ("strategy", "busbw", "said"),
    [("ddp", 0.935612, "1 all-reduce of 5.2 GB per step (ddp) at 0.936 GB/s"),
     ("fsdp", 1500, "1.5 all-reduces of 5.2 GB per step (fsdp) at 1500 GB/s")],
)  # fmt: skip
def test_the_gradient_sync_assumption_reads_as_english_with_three_figures(strategy, busbw, said):
    comm = {"parameters": 1.3e9, "gradient_bytes_per_parameter": 4, "busbw_gbs": busbw,
            "strategy": strategy}  # fmt: skip
    out = predict(description(described(**comm), "m"), [8], 0.9)
    assert any(a == f"gradient sync: {said} busbw across nodes" for a in out.assumptions), (
        out.assumptions
    )


def test_the_strong_bound_puts_the_all_reduce_on_the_one_node_footing():
    # 1 node at 0.5 s, 2 at 0.3 s: the all-reduce across nodes counts twice on the footing
    setting = Setting(8, ScalingMode.STRONG, True, Comm(5.2e9, 180, 450))
    bound = step_bound(Measured(1, 0.5), Measured(2, 0.3), setting)
    assert bound == pytest.approx((2 * 2 * 15 / 16 * 5.2 / 180 - 2 * 7 / 8 * 5.2 / 450) / 0.5)


def test_cannot_tell_says_what_to_measure_next():
    points = [{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.08}]
    [point] = predict(description(described(points=points), "m"), [16], 0.9).predictions
    assert point.verdict == "cannot tell"
    assert "run 4 nodes to separate the one-time step onto the network from the growth" in (
        point.why
    )
    three = [*points, {"nodes": 4, "step_time_s": 1.1}]
    [point] = predict(description(described(points=three), "m"), [64], 0.85).predictions
    assert point.verdict == "cannot tell"
    assert "run 8 nodes to measure the growth nearer 64" in point.why


@pytest.mark.parametrize(
    ("second", "target", "verdict"),
    [(1.0, 0.6, "scales"), (1.3, 0.9, "loses"), (1.08, 0.9, "cannot tell")],
)
def test_the_verdict_is_the_range_s_against_the_target(second, target, verdict):
    points = [{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": second}]
    [point] = predict(description(described(points=points), "m"), [16], target).predictions
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
    bounded = out["predictions"][0]
    # the step capped by the bytes: the growth takes the rest, and the forecast is lower
    assert bounded["efficiency"] < free.efficiency
    assert bounded["efficiency_low"] < free.efficiency_low


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
    from dtrun.azure.prices import Price
    from dtrun.report.build import build_report
    from dtrun.spec.request import BenchSpec
    from tests.factories import fake_run_dir, html_markdown

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
    text = run.report.read_text()  # the table in report.html; report.md says where it is
    assert "## Next node counts" in text and "summary.json `next_node_counts`" in text
    assert "| 8 |" in html_markdown(run).split("## Next node counts")[1]
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

    from dtrun.report.build import analyse
    from dtrun.report.losses import sync_factor
    from dtrun.report.predicted import from_report
    from dtrun.report.results import PROGRAM_STRATEGY
    from dtrun.spec.request import BenchSpec
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
    from dtrun.engines.embedded.inventory import local_cluster
    from dtrun.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    embedded = local_cluster(2, python_bin="/v/bin", code_dir="/c", cpu_count=4)
    run = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r"), embedded, {},
                       step_times={1: [[0.1] * 10], 2: [[0.11] * 10]})  # fmt: skip
    done = dtrun("predict", str(run.path), "--nodes", "4")
    assert done.exit_code == 0, done.output
    assert "measured on the embedded cluster" in done.output


def test_predict_refuses_a_run_with_one_node_count(tmp_path: Path, fixed_inventory):
    from dtrun.spec.request import BenchSpec
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
    from dtrun.report.build import build_report
    from dtrun.spec.request import BenchSpec
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


def test_a_near_flat_series_is_forecast_near_flat():
    # NVIDIA's weak-scaling results lose under 1% a doubling; a constant noise made the prior's
    # growth outweigh two such points (89 to 92% forecast where 95 to 100% was measured)
    points = [{"nodes": 8, "step_time_s": 1.0}, {"nodes": 16, "step_time_s": 1.005}]
    [point] = predict(description(described(points=points), "m"), [128], 0.9).predictions
    assert point.efficiency is not None
    assert 0.95 <= point.efficiency < 1 / 1.005


def test_the_range_is_no_better_than_the_largest_measured_point():
    points = [{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.3}]
    [point] = predict(description(described(points=points), "m"), [16], 0.9).predictions
    low, mid, high = point.efficiency_low, point.efficiency, point.efficiency_high
    assert low is not None and mid is not None and high is not None
    assert high == pytest.approx(1 / 1.3)
    assert low < mid < high


def _pipelined(nodes: int, stages: int = 8, micro_batches: float = 64.0, base: int = 8) -> float:
    """A strong-scaling step time of a pipeline whose only loss is its bubble: m + p - 1
    micro-batches' time, m falling as N0 / N, on N / N0 times the ranks."""
    return (micro_batches * base / nodes + stages - 1) / 100


PIPELINE = {"mode": "strong", "pipeline_parallel": 8}


def test_a_pipeline_s_knee_under_strong_scaling_is_forecast_from_its_bubble():
    # 8 stages, 64 micro-batches at 8 nodes: at 128 nodes each pipeline runs 4, and the bubble
    # (7 of 11 micro-batches' time) halves the efficiency; two points cannot show that knee
    points = [{"nodes": n, "step_time_s": _pipelined(n)} for n in (8, 16)]
    truth = 8 * _pipelined(8) / (128 * _pipelined(128))
    blind = predict(description(described(points=points, **PIPELINE), "m"), [128], 0.9)
    told = predict(
        description(described(points=points, micro_batches=64, **PIPELINE), "m"), [128], 0.9
    )
    [without], [with_bubble] = blind.predictions, told.predictions
    assert without.efficiency is not None and with_bubble.efficiency is not None
    assert without.efficiency - truth > 0.2  # carried forward as growth: far too optimistic
    assert with_bubble.efficiency == pytest.approx(truth, abs=0.05)
    assert with_bubble.efficiency_low is not None and with_bubble.efficiency_high is not None
    assert with_bubble.efficiency_low <= truth <= with_bubble.efficiency_high
    assert any("bubble" in a and "computed" in a for a in told.assumptions)
    assert any("micro_batches" in a and "not modelled" in a for a in blind.assumptions)


def test_interleaved_stages_shrink_the_bubble_the_forecast_carries():
    points = [{"nodes": n, "step_time_s": _pipelined(n)} for n in (8, 16)]
    plain, interleaved = (
        predict(
            description(described(points=points, micro_batches=64, **PIPELINE, **extra), "m"),
            [128],
            0.9,
        ).predictions[0]
        for extra in ({}, {"virtual_pipeline_stages": 4})
    )
    assert plain.efficiency is not None and interleaved.efficiency is not None
    assert interleaved.efficiency > plain.efficiency + 0.1


def test_under_weak_scaling_a_pipeline_s_bubble_is_said_not_to_change():
    points = [{"nodes": 8, "step_time_s": 1.0}, {"nodes": 16, "step_time_s": 1.02}]
    data = described(points=points, pipeline_parallel=4, micro_batches=16)
    weak = predict(description(data, "m"), [64], 0.9)
    plain = predict(description(described(points=points), "m"), [64], 0.9)
    assert weak.predictions[0].efficiency == plain.predictions[0].efficiency
    assert any("weak scaling" in a and "does not change" in a for a in weak.assumptions)


def test_a_node_count_that_leaves_a_pipeline_no_micro_batch_is_not_forecast():
    points = [{"nodes": n, "step_time_s": _pipelined(n, micro_batches=16)} for n in (8, 16)]
    data = described(points=points, micro_batches=16, **PIPELINE)
    fits, past = predict(description(data, "m"), [128, 256], 0.9).predictions
    assert fits.efficiency is not None
    assert past.efficiency is None and "fewer than one" in past.why


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"micro_batches": 64}, "'pipeline_parallel' is a dependency of 'micro_batches'"),
        ({"pipeline_parallel": 0}, "pipeline_parallel: 0 is less than the minimum of 1"),
        ({"pipeline_parallel": 4, "micro_batches": 0.5}, "micro_batches: 0.5 is outside 1 to"),
        ({"pipeline_parallel": 4, "micro_batches": 4, "virtual_pipeline_stages": 0}, "minimum"),
    ],
)
def test_a_wrong_pipeline_field_is_named_and_exits_2(change, said):
    with pytest.raises(UsageError) as refused:
        description(described(**change), "m.yaml")
    assert refused.value.exit_code == 2 and said in refused.value.message


def test_micro_batches_too_few_for_a_measured_point_is_one_message_and_exit_2(tmp_path: Path):
    points = [{"nodes": 8, "step_time_s": 1.0}, {"nodes": 64, "step_time_s": 0.2}]
    path = tmp_path / "m.yaml"
    path.write_text(json.dumps(described(points=points, micro_batches=4, **PIPELINE)))
    done = dtrun("predict", "--from", str(path), "--nodes", "128")
    assert done.exit_code == 2
    assert "micro_batches: 4 at 8 nodes leaves each pipeline 0.5 at 64 nodes" in done.output
    assert "Traceback" not in done.output


def test_pipeline_fields_without_their_stages_say_why_they_need_them(tmp_path: Path):
    path = tmp_path / "m.yaml"
    path.write_text(json.dumps(described(mode="strong", micro_batches=64)))
    done = dtrun("predict", "--from", str(path), "--nodes", "8")
    assert done.exit_code == 2 and "Traceback" not in done.output
    said = " ".join(done.output.split())
    assert "'pipeline_parallel' is a dependency of 'micro_batches'" in said
    assert "they need its stages, pipeline_parallel" in said
    assert "needs procs_per_node" not in said  # not the generic reason


def test_the_headline_names_a_file_whose_name_breaks_lines_on_one_line(tmp_path: Path):
    """A file name may hold a newline: the headline wrote it raw and so forged a line of its
    own under the command's (an `error:` line, say), where every other line escapes it."""
    path = tmp_path / "m\nerror: forged.yaml"
    path.write_text(ISSUE_EXAMPLE)
    done = dtrun("predict", "--from", str(path), "--nodes", "4")
    assert done.exit_code == 0, done.output
    assert not any(line.startswith("error: forged") for line in done.output.splitlines())
    assert "m\\nerror: forged.yaml" in "".join(done.output.splitlines())
