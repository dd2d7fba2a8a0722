"""Numbers that are legal but absurd (issue 36, class 6): `predict --from` holds every number
to a physically meaningful range and says the range and why; JSON output is strict JSON (no
NaN or Infinity); a key given twice is refused in YAML and JSON; a long value is cut in a
message; records read back hold step times and node counts to their ranges."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.spec.cluster import Inventory
from tests.unit.test_damaged import edit, make_run, put, snapshot

RANGES = {  # the ranges docs/prediction.md states, and why
    "step_time_s": (1e-6, 1e6, "a microsecond"),
    "throughput": (1e-6, 1e15, "units a second"),
    "parameters": (1, 1e15, "trainable parameters"),
    "gradient_bytes_per_parameter": (0.125, 16, "one bit to 16 bytes"),
    "busbw_gbs": (1e-3, 1e5, "1 MB/s to 100 TB/s"),
    "busbw_intra_node_gbs": (1e-3, 1e5, "1 MB/s to 100 TB/s"),
    "batch_per_process": (1, 1e12, "at least one"),
    "global_batch": (1, 1e12, "at least one"),
}


def predict(tmp_path: Path, data: dict[str, Any] | str, *extra: str) -> Any:
    path = tmp_path / "measured.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return CliRunner().invoke(app, ["predict", "--from", str(path), "--nodes", "4,8", *extra])


def described(mode: str = "weak", **fields: Any) -> dict[str, Any]:
    points = [{"nodes": 1, "step_time_s": 1.0}, {"nodes": 2, "step_time_s": 1.1}]
    return {"procs_per_node": 8, "mode": mode, "points": points} | fields


def strict(text: str) -> Any:
    """JSON as RFC 8259 has it: NaN, Infinity and -Infinity are no numbers."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")

    return json.loads(text, parse_constant=refuse)


def test_a_global_batch_of_1e_200_is_out_of_range_with_the_reason(tmp_path):
    done = predict(tmp_path, described("strong", global_batch=1e-200))
    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert "global_batch: 1e-200 is outside 1 to 1e+12: units a step processes: at least one" in (
        said
    )


def test_a_step_of_5e_324_seconds_is_out_of_range_and_never_reaches_the_json(tmp_path):
    data = described(points=[{"nodes": 1, "step_time_s": 5e-324}, {"nodes": 2, "step_time_s": 1}])
    done = predict(tmp_path, data, "--json")
    assert done.exit_code == 2, done.output
    assert "Infinity" not in done.output and "NaN" not in done.output
    assert "points[0].step_time_s: 4.94066e-324 is outside 1e-06 to 1e+06" in done.output


@pytest.mark.parametrize("field", sorted(RANGES))
@pytest.mark.parametrize("side", ["below", "above"])
def test_every_number_has_a_range_and_its_message_says_it_and_why(tmp_path, field, side):
    low, high, why = RANGES[field]
    value = low / 10 if side == "below" else high * 10
    if field in ("step_time_s", "throughput"):
        other = {field: 1.0} if field == "step_time_s" else {field: 100.0}
        data = described(points=[{"nodes": 1, field: value}, {"nodes": 2, **other}])
    else:
        data = described("strong" if field == "global_batch" else "weak", **{field: value})
    done = predict(tmp_path, data)
    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert f"{value:g} is outside {low:g} to {high:g}" in said and why in said, said
    assert "Traceback" not in said


def test_a_step_time_the_batch_and_a_throughput_give_is_held_to_the_range(tmp_path):
    points = [{"nodes": 1, "throughput": 1e14}, {"nodes": 2, "throughput": 1.9e14}]
    done = predict(tmp_path, described(points=points, batch_per_process=1))
    assert done.exit_code == 2, done.output
    assert "the batch and the throughput give a step of 8e-14 s" in " ".join(done.output.split())


@pytest.mark.parametrize(
    "text",
    [
        '{"procs_per_node": 8, "procs_per_node": 1, "mode": "weak", "points": '
        '[{"nodes": 1, "step_time_s": 1}, {"nodes": 2, "step_time_s": 1.1}]}',
        "procs_per_node: 8\nmode: weak\nmode: strong\n"
        "points: [{nodes: 1, step_time_s: 1}, {nodes: 2, step_time_s: 1.1}]\n",
        "procs_per_node: 8\nmode: weak\n"
        "points: [{nodes: 1, step_time_s: 1, step_time_s: 9}, {nodes: 2, step_time_s: 1.1}]\n",
    ],
    ids=["json", "yaml", "nested"],
)
def test_a_key_given_twice_is_refused(tmp_path, text):
    done = predict(tmp_path, text)
    assert done.exit_code == 2, done.output
    assert "a key is given twice" in done.output and "is given twice" in done.output


def test_a_long_value_is_cut_in_the_message(tmp_path):
    done = predict(tmp_path, described(mode="x" * 100_000))
    assert done.exit_code == 2, done.output
    assert len(done.output) < 1500 and "characters)" in done.output


LOG_UNIFORM = {  # in range, spread over the orders of magnitude
    name: st.floats(math.log10(low), math.log10(high)).map(lambda e: 10.0**e)
    for name, (low, high, _) in RANGES.items()
}


NETWORK = ["parameters", "gradient_bytes_per_parameter", "busbw_gbs", "busbw_intra_node_gbs"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    mode=st.sampled_from(["weak", "strong"]),
    steps=st.lists(LOG_UNIFORM["step_time_s"], min_size=2, max_size=3),
    extra=st.sets(st.sampled_from(NETWORK)),
    data=st.data(),
)
def test_any_description_in_range_predicts_strict_json(tmp_path, mode, steps, extra, data):
    fields = {name: data.draw(LOG_UNIFORM[name]) for name in extra}
    points = [{"nodes": 2**i, "step_time_s": s} for i, s in enumerate(steps)]
    done = predict(tmp_path, described(mode, points=points, **fields), "--json")
    assert done.exit_code in (0, 2), done.output  # 2: the file's own mistakes, said
    if done.exit_code == 0:
        strict(done.stdout)


def test_the_json_sinks_refuse_a_non_finite_number():
    from dtrun.cli.common import print_json
    from dtrun.record.rundir import as_json

    for sink in (print_json, as_json):
        with pytest.raises(ValueError, match="Out of range float"):
            sink({"efficiency": math.inf})


def report(tmp_path: Path, inventory: Inventory, change: Any, file: str) -> tuple[int, str]:
    """`dtrun report` on a finished run whose ``file`` got ``change`` (an edit, or new text)."""
    make_run(tmp_path / "a", inventory)
    path = tmp_path / "a" / file
    if isinstance(change, str):
        path.write_text(change)
    else:
        edit(change)(path)
    before = snapshot(tmp_path)
    with contextlib.chdir(tmp_path):
        done = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["report", "a"])
    assert snapshot(tmp_path) == before  # nothing written
    return done.exit_code, " ".join((done.stdout + done.stderr).split())


def test_a_recorded_step_of_1e_300_seconds_is_refused_not_turned_into_300_digits(
    tmp_path, fixed_inventory
):
    code, said = report(
        tmp_path, fixed_inventory, put([1e-300, 0.03], "step_times_s"), "n1/r0/result.json"
    )
    assert code == 2, said
    assert "'step_times_s[0]' is 1e-300, outside 1e-06 to 1e+06" in said
    assert "a microsecond to about 11 days" in said and "0" * 100 not in said


def test_runs_json_claiming_10_to_the_20_nodes_is_refused(tmp_path, fixed_inventory):
    code, said = report(tmp_path, fixed_inventory, put(10**20, "runs", "0", "nodes"), "runs.json")
    assert code == 2, said
    assert "'runs[0].nodes' is 100000000000000000000, outside 1 to 10,000 (--nodes' range)" in said


def test_a_record_with_a_key_given_twice_is_refused(tmp_path, fixed_inventory):
    make_run(tmp_path / "x", fixed_inventory)
    text = (tmp_path / "x" / "runs.json").read_text()
    twice = text.replace('"status":', '"status": "complete", "status":', 1)
    code, said = report(tmp_path, fixed_inventory, twice, "runs.json")
    assert code == 2, said
    assert "the key 'status' is given twice in one object" in said


THIRTY_DIGITS = 10**30 - 1


@pytest.mark.parametrize(
    ("file", "keys", "field"),
    [
        ("n1/r0/result.json", ("timed_steps",), "'timed_steps'"),
        ("n2/r0/result.json", ("global_batch",), "'global_batch'"),
        ("n1/r0/result.json", ("model", "params"), "'model.params'"),
        ("n2/r0/result.json", ("busbw", "gradient_bytes"), "'busbw.gradient_bytes'"),
        ("manifest.json", ("bench", "batch"), "'bench.batch'"),
        ("health.json", ("procs_per_node",), "'procs_per_node'"),
    ],
)
def test_a_hand_edited_30_digit_count_is_refused_naming_the_file_and_field(
    tmp_path, fixed_inventory, file, keys, field
):
    """Printed whole before: a 30-digit step count widened `dtrun report`'s table and
    report.md, a 30-digit batch `dtrun compare`'s."""
    code, said = report(tmp_path, fixed_inventory, put(THIRTY_DIGITS, *keys), file)
    assert code == 2, said
    assert f"error: a/{file} is damaged: {field} is {THIRTY_DIGITS}" in said
    assert "at most" in said or "outside" in said
    assert "next: restore it" in said
