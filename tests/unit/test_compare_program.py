"""`dtrun compare` on runs of `dtrun bench -- PROGRAM`: only like units compared, the program's
unit named, and the program's own set-up listed instead of the built-in workload's."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.errors import UsageError
from dtrun.report.build import analyse
from dtrun.report.compare import compare
from dtrun.spec.request import (
    BenchSpec,
    Program,
    ProgramKind,
    ScalingMode,
    StepUnits,
    UnitKind,
)
from tests.factories import fake_run_dir, program_run_dir

runner = CliRunner(env={"COLUMNS": "220"})
PROGRAM = Program(ProgramKind.SCRIPT, "/w/train.py", ("--lr", "0.1"))
SAMPLES = StepUnits(UnitKind.SAMPLES, 16, per_process=True)
STEPS = {1: [[0.1] * 20], 2: [[0.125] * 20]}  # 80% efficiency at 2 nodes


def bench(run_id: str, **change: object) -> BenchSpec:
    fields: dict[str, object] = {"program": PROGRAM, "warmup": 2, "repeat": 1, "units": SAMPLES}
    return BenchSpec(run_id, **(fields | change))  # type: ignore[arg-type]


def test_two_program_runs_compare_in_the_program_s_unit(tmp_path, fixed_inventory):
    a = program_run_dir(tmp_path / "a", bench("a"), fixed_inventory, STEPS)
    b = program_run_dir(
        tmp_path / "b", bench("b"), fixed_inventory, {1: [[0.1] * 20], 2: [[0.1] * 20]}
    )
    comparison = compare(analyse(a), analyse(b))
    assert comparison.metric == "samples/s at the median step"
    assert comparison.unit == "samples/s"
    rows = {row.nodes: row for row in comparison.rows}
    assert rows[2].a == pytest.approx(32 / 0.125) and rows[2].b == pytest.approx(32 / 0.1)
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert done.exit_code == 0, done.output
    assert "A samples/s" in done.output and "tokens" not in done.output
    assert re.search(r"│\s+2 │\s+256 │.*│\s+320 │", done.output)


def test_a_program_run_s_set_up_lists_the_program_not_the_built_in_model(tmp_path, fixed_inventory):
    program_b = Program(ProgramKind.MODULE, "pkg.train", ("--token", "hf_abcdefghijklmnop1234"))
    pattern = r"step (?P<seconds>[0-9.]+)"
    a = program_run_dir(tmp_path / "a", bench("a"), fixed_inventory, STEPS)
    b = program_run_dir(
        tmp_path / "b",
        bench("b", program=program_b, warmup=4, step_pattern=pattern),
        fixed_inventory,
        STEPS,
        sharded="FSDP (DTensor shards)",
    )
    differs = {what: (x, y) for what, x, y in compare(analyse(a), analyse(b)).differences}
    assert differs["program"][0] == "python /w/train.py --lr 0.1"
    assert differs["program"][1].startswith("python -m pkg.train --token ")
    assert "hf_abcdefghijklmnop1234" not in differs["program"][1]  # as the manifest has it
    assert differs["warm-up"] == ("the first 2 steps untimed", "the first 4 steps untimed")
    assert differs["parameters"] == ("whole on every rank", "sharded: FSDP (DTensor shards)")
    assert differs["timed"] == ("optimizer steps", f"step pattern {pattern!r}")
    for built_in in ("model", "batch per process", "steps", "ZeRO stage (deepspeed)", "engine"):
        assert built_in not in differs
    assert "units" not in differs  # the same in both


def test_a_program_run_s_facts_name_its_units_timing_and_strategy(tmp_path, fixed_inventory):
    from dtrun.report.compare import _setup

    a = program_run_dir(tmp_path / "a", bench("a"), fixed_inventory, STEPS)
    facts = _setup(analyse(a))
    assert facts["units"] == "samples/s (16 samples per step per process)"
    assert facts["timed"] == "optimizer steps"
    assert facts["strategy"] == "n/a: your program trains its own way"
    assert facts["launcher"] == "torchrun" and facts["processes per node"] == "1"


@pytest.mark.parametrize(
    ("change_b", "shown"),
    [
        ({"units": StepUnits(UnitKind.TOKENS, 4096)}, "(samples/s) with run b (tokens/s)"),
        ({"units": None}, "(samples/s) with run b (process-steps/s)"),
        (
            {"units": None, "mode": ScalingMode.STRONG},
            "(samples/s) with run b (steps/s)",
        ),
    ],
    ids=["tokens", "process-steps", "steps"],
)
def test_program_runs_whose_units_differ_are_refused(tmp_path, fixed_inventory, change_b, shown):
    program_run_dir(tmp_path / "a", bench("a"), fixed_inventory, STEPS)
    program_run_dir(tmp_path / "b", bench("b", **change_b), fixed_inventory, STEPS)
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert done.exit_code == 2, done.output
    assert f"cannot compare run a {shown}" in done.output
    assert "count different units" in done.output and "next:" in done.output
    assert "Traceback" not in done.output


def test_a_whole_program_step_is_not_compared_with_an_optimizer_step(tmp_path, fixed_inventory):
    a = program_run_dir(tmp_path / "a", bench("a", units=None), fixed_inventory, STEPS)
    b = program_run_dir(
        tmp_path / "b", bench("b", units=None), fixed_inventory, STEPS, records=False
    )
    with pytest.raises(UsageError, match="run b was timed as one whole program") as raised:
        compare(analyse(a), analyse(b))
    assert "--step-pattern" in raised.value.fix


def test_a_program_run_and_a_built_in_training_run_are_refused_saying_why(
    tmp_path, fixed_inventory
):
    program_run_dir(tmp_path / "p", bench("p"), fixed_inventory, STEPS)
    fake_run_dir(tmp_path / "t", BenchSpec(run_id="t"), fixed_inventory, {1: [1000], 2: [1600]})
    done = runner.invoke(app, ["compare", str(tmp_path / "t"), str(tmp_path / "p")])
    assert done.exit_code == 2, done.output
    text = " ".join(done.output.split())
    assert "cannot compare run t (train) with run p (program)" in text
    assert "the built-in training counts tokens/s and your program samples/s" in text
    assert "bus bandwidth" not in text
    assert "Traceback" not in done.output


def test_compare_json_carries_the_program_s_unit(tmp_path, fixed_inventory):
    for name in ("a", "b"):
        program_run_dir(tmp_path / name, bench(name), fixed_inventory, STEPS)
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert (data["unit"], data["metric"]) == ("samples/s", "samples/s at the median step")


@pytest.mark.parametrize(
    "model", [None, {}, {"layers": "x", "d_model": 1, "seq_len": 1, "vocab": 1}]
)
def test_a_program_run_s_manifest_model_is_not_read_by_report_or_predict(
    tmp_path, fixed_inventory, model
):
    """A program's sweep trains no built-in model: its manifest's `model` is checked for
    training runs only, and the stage tables read it anyway (a TypeError, a traceback)."""
    run = program_run_dir(tmp_path / "a", bench("a"), fixed_inventory, STEPS)
    manifest = run.path / "manifest.json"
    data = json.loads(manifest.read_text())
    data["bench"]["model"] = model
    manifest.write_text(json.dumps(data))
    for args in (["report", str(run.path)], ["predict", str(run.path), "--nodes", "8"]):
        done = runner.invoke(app, args)
        assert done.exit_code == 0, (args, done.output, done.exception)


@pytest.mark.parametrize("given", [-1, "x", [[1, 2]]])
def test_a_program_result_s_gradient_bytes_of_another_kind_is_damage(
    tmp_path, fixed_inventory, given
):
    """`(data.get("gradient_bytes") or {}).values()` on a number or text: an AttributeError,
    which the reader's malformed-field errors did not list (a traceback)."""
    run = program_run_dir(tmp_path / "a", bench("a"), fixed_inventory, STEPS)
    result = run.path / "n2" / "r0" / "result.json"
    data = json.loads(result.read_text())
    data["gradient_bytes"] = given
    result.write_text(json.dumps(data))
    for args in (["report", str(run.path)], ["predict", str(run.path), "--nodes", "8"]):
        done = runner.invoke(app, args)
        assert done.exit_code == 2, (args, done.output, done.exception)
        assert "'gradient_bytes' is" in " ".join(done.output.split())
