"""`dtrun compare RUN_A RUN_B`: rows matched by node count, ratios, and what differs."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.record.rundir import RunDir
from dtrun.report.build import analyse
from dtrun.report.compare import compare
from dtrun.spec.request import BenchSpec, ModelSpec
from tests.factories import fake_run_dir, noise_data

runner = CliRunner(env={"COLUMNS": "200"})


def test_rows_pair_node_counts_and_give_the_ratio(tmp_path, fixed_inventory):
    a = fake_run_dir(
        tmp_path / "a", BenchSpec(run_id="a", node_counts=(1, 2)), fixed_inventory,
        {1: [1000], 2: [1600]}, busbw={2: 2.0},
    )  # fmt: skip
    b = fake_run_dir(
        tmp_path / "b",
        BenchSpec(run_id="b", node_counts=(1, 2, 4), model=ModelSpec(layers=4)),
        fixed_inventory,
        {1: [1100], 2: [2000], 4: [3000]},
        busbw={2: 3.0, 4: 2.5},
    )
    comparison = compare(analyse(a), analyse(b))
    assert comparison.metric == "tokens/s at the median step"
    rows = {row.nodes: row for row in comparison.rows}
    assert set(rows) == {1, 2, 4}
    assert rows[2].a == 1600 and rows[2].b == 2000 and rows[2].ratio == pytest.approx(1.25)
    assert rows[2].a_efficiency == pytest.approx(0.8)
    assert rows[2].b_efficiency == pytest.approx(2000 / (2 * 1100))
    assert (rows[2].a_busbw, rows[2].b_busbw) == (2.0, 3.0)
    assert rows[4].a is None and rows[4].ratio is None  # A never ran 4 nodes
    differs = {what: (in_a, in_b) for what, in_a, in_b in comparison.differences}
    assert "model" in differs and "layers 2" in differs["model"][0]
    assert "layers 4" in differs["model"][1]
    assert "launcher" not in differs  # the same in both: not listed


def test_cli_prints_side_by_side_and_json(tmp_path, fixed_inventory):
    for name, values in (("a", [1000.0, 1500.0]), ("b", [1000.0, 1800.0])):
        fake_run_dir(
            tmp_path / name, BenchSpec(run_id=name), fixed_inventory,
            {1: values[:1], 2: values[1:]},
        )  # fmt: skip
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert done.exit_code == 0, done.output
    # no per-step times in these results: no intervals, so no call on the change
    assert re.search(
        r"│\s+2 │\s+1,500 │\s+- │\s+1,800 │\s+- │\s+1\.20 │\s+- │\s+75% │\s+90% │", done.output
    )
    assert "set-ups: the same in every recorded respect" in done.output
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["schema"] == "dtrun.compare/3"
    assert [row["ratio"] for row in data["rows"]] == [pytest.approx(1.0), pytest.approx(1.2)]


def test_runs_of_different_workloads_are_refused(tmp_path, fixed_inventory):
    fake_run_dir(tmp_path / "t", BenchSpec(run_id="t"), fixed_inventory, {1: [1000]})
    fake_run_dir(
        tmp_path / "ar", BenchSpec(run_id="ar", workload="allreduce"), fixed_inventory, {2: [1.0]}
    )
    done = runner.invoke(app, ["compare", str(tmp_path / "t"), str(tmp_path / "ar")])
    assert done.exit_code == 2
    assert "cannot compare run t (train) with run ar (allreduce)" in done.output
    assert "Traceback" not in done.output


def test_a_directory_that_is_no_run_is_a_clear_error(tmp_path, fixed_inventory):
    fake_run_dir(tmp_path / "t", BenchSpec(run_id="t"), fixed_inventory, {1: [1000]})
    (tmp_path / "empty").mkdir()
    done = runner.invoke(app, ["compare", str(tmp_path / "t"), str(tmp_path / "empty")])
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output


def _steps(median_s: float, steps: int, seed: int) -> list[float]:
    import random

    rng = random.Random(seed)
    return [median_s * rng.lognormvariate(0.0, 0.05) for _ in range(steps)]


def _launches(median_s: float, steps: int, seed: int) -> list[list[float]]:
    """Three launches' steps (an interval needs a second launch, a decisive one a third),
    their medians within 1%."""
    return [_steps(median_s * f, steps, seed + 10 * i) for i, f in enumerate((1, 1.01, 0.995))]


def test_a_difference_is_a_change_only_when_the_intervals_do_not_overlap(tmp_path, fixed_inventory):
    # A: 33.6 ms at 1 node, 36 ms at 2; B: the same at 1 node (other noise), 45 ms at 2
    runs = {"a": (0.0336, 0.036, 1), "b": (0.0336, 0.045, 3)}
    for name, (one_s, two_s, seed) in runs.items():
        steps = {n: _launches(median, 40, seed + n) for n, median in ((1, one_s), (2, two_s))}
        fake_run_dir(tmp_path / name, BenchSpec(run_id=name), fixed_inventory, {}, step_times=steps)
    a, b = tmp_path / "a", tmp_path / "b"
    rows = {row.nodes: row for row in compare(analyse(RunDir(a)), analyse(RunDir(b))).rows}
    one, two = rows[1], rows[2]
    assert one.change == "within noise" and one.ratio != 1.0
    assert one.a_low is not None and one.b_high is not None and one.a_high is not None
    assert one.b_low is not None and one.b_low <= one.a_high and one.a_low <= one.b_high
    assert two.change == "lower"
    assert two.b_high is not None and two.a_low is not None and two.b_high < two.a_low
    assert (two.a_verdict, two.b_verdict) == ("scales", "loses")  # 93% and 75%
    assert two.b_efficiency_low is not None and two.b_efficiency_high is not None
    done = runner.invoke(app, ["compare", str(a), str(b)])
    assert done.exit_code == 0, done.output
    assert re.search(r"│\s+2 │.*│\s+lower │", done.output)
    assert re.search(r"│\s+1 │.*│\s+within noise │", done.output)


def _env_runs(tmp_path, fixed_inventory, env_a, env_b):
    for name, env in (("a", env_a), ("b", env_b)):
        fake_run_dir(
            tmp_path / name, BenchSpec(run_id=name, env=env), fixed_inventory,
            {1: [1000.0], 2: [1500.0]},
        )  # fmt: skip
    return [runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), *extra])
            for extra in ([], ["--json"])]  # fmt: skip


def test_runs_whose_env_differs_are_told_apart_by_name_and_digest_never_by_value(
    tmp_path, fixed_inventory
):
    secrets = ("hf_tokenvalue-A-1234", "hf_tokenvalue-B-5678", "pw-of-a", "pw-of-b")
    env_a = (("HF_TOKEN", secrets[0]), ("DB_URL", f"postgres://u:{secrets[2]}@db/x"),
             ("LR", "1"), ("SAME_SECRET", "shared-secret"), ("ONLY_A", "x"))  # fmt: skip
    env_b = (("HF_TOKEN", secrets[1]), ("DB_URL", f"postgres://u:{secrets[3]}@db/x"),
             ("LR", "2"), ("SAME_SECRET", "shared-secret"))  # fmt: skip
    shown, as_json = _env_runs(tmp_path, fixed_inventory, env_a, env_b)
    assert shown.exit_code == 0 and as_json.exit_code == 0, shown.output
    assert "the same in every recorded respect" not in shown.output
    differs = {what: (a, b) for what, a, b in json.loads(as_json.stdout)["differences"]}
    token_a, token_b = differs["--env HF_TOKEN"]
    assert (
        re.fullmatch(r"<redacted> \(pbkdf2-sha256:[0-9a-f]{12}\)", token_a) and token_a != token_b
    )
    url_a, url_b = differs["--env DB_URL"]
    assert url_a.startswith("postgres://<redacted>@db/x (pbkdf2-sha256:") and url_a != url_b
    assert differs["--env LR"] == ("1", "2")
    assert differs["--env ONLY_A"] == ("x", "-")
    assert "--env SAME_SECRET" not in differs  # the same value: the same digest
    for name in ("a", "b"):
        manifest = (tmp_path / name / "manifest.json").read_text()
        assert not any(secret in manifest for secret in secrets)
        assert "shared-secret" not in manifest
    assert not any(secret in shown.output + as_json.stdout for secret in secrets)
    assert "--env HF_TOKEN" in shown.output


def test_an_env_value_named_as_a_secret_is_not_shown_though_a_manifest_records_it_plain(
    tmp_path, fixed_inventory
):
    """A manifest written by another tool, an older dtrun or edited by hand: compare masks the
    value of a secret-named --env as the manifest writer does (redact_var)."""
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # no token shape: only its name says
    a = fake_run_dir(tmp_path / "a", BenchSpec(run_id="a", node_counts=(1, 2)), fixed_inventory,
                     {1: [1000], 2: [1600]})  # fmt: skip
    b = fake_run_dir(tmp_path / "b", BenchSpec(run_id="b", node_counts=(1, 2)), fixed_inventory,
                     {1: [1000], 2: [1600]})  # fmt: skip
    manifest = json.loads(b.manifest.read_text())
    manifest["bench"]["env"] = [["AWS_SECRET_ACCESS_KEY", secret], ["LR", "2"]]
    b.manifest.write_text(json.dumps(manifest))
    shown = runner.invoke(app, ["compare", str(a.path), str(b.path), "--wide"])
    as_json = runner.invoke(app, ["compare", str(a.path), str(b.path), "--json"])
    assert shown.exit_code == 0 and as_json.exit_code == 0, shown.output
    assert secret not in shown.output + as_json.stdout
    differs = {what: (a, b) for what, a, b in json.loads(as_json.stdout)["differences"]}
    assert differs["--env AWS_SECRET_ACCESS_KEY"] == ("-", "<redacted>")
    assert differs["--env LR"] == ("-", "2")


def test_runs_with_the_same_env_are_the_same_in_every_recorded_respect(tmp_path, fixed_inventory):
    env = (("HF_TOKEN", "hf_same-value-0000"), ("LR", "1"))
    shown, _ = _env_runs(tmp_path, fixed_inventory, env, env)
    assert "set-ups: the same in every recorded respect" in shown.output


def _noisy_runs(tmp_path, fixed_inventory, steal: dict[str, float]) -> tuple[RunDir, RunDir]:
    """A and B as in the test above (B 25% slower at 2 nodes, intervals apart); each run's
    2-node launch with ``steal[name]`` of its CPU time stolen (the report's threshold: 5%)."""
    runs = {"a": (0.0336, 0.036, 1), "b": (0.0336, 0.045, 3)}
    for name, (one_s, two_s, seed) in runs.items():
        steps = {n: _launches(median, 40, seed + n) for n, median in ((1, one_s), (2, two_s))}
        noise = {
            1: [noise_data(["node-0"])] * 3,
            2: [noise_data(["node-0", "node-1"], steal=steal.get(name, 0.0))] * 3,
        }
        fake_run_dir(
            tmp_path / name, BenchSpec(run_id=name), fixed_inventory, {}, step_times=steps,
            noise=noise,
        )  # fmt: skip
    return RunDir(tmp_path / "a"), RunDir(tmp_path / "b")


def test_a_difference_at_a_point_measured_in_noise_is_not_called_a_change(
    tmp_path, fixed_inventory
):
    a, b = _noisy_runs(tmp_path, fixed_inventory, {"b": 0.2})
    comparison = compare(analyse(a), analyse(b))
    rows = {row.nodes: row for row in comparison.rows}
    assert rows[2].b_high is not None and rows[2].a_low is not None
    assert rows[2].b_high < rows[2].a_low  # the intervals are apart, as before
    assert rows[2].change == "noisy (B)" and rows[1].change == "within noise"
    (point,) = comparison.noisy
    assert (point.side, point.run_id, point.nodes) == ("B", "b", 2)
    assert point.why.startswith("The 2-node point is unreliable:") and "steal" in point.why
    done = runner.invoke(app, ["compare", str(a.path), str(b.path)])
    assert done.exit_code == 0, done.output
    assert re.search(r"│\s+2 │.*│\s+noisy \(B\) │", done.output)
    assert "no change is called where a run's point was measured in noise:" in done.output
    assert "noise: 2 nodes, B (b): The 2-node point is unreliable:" in done.output
    # under the table whose changes it holds back, before the set-ups' differences
    assert done.output.index("noise: 2 nodes") < done.output.index("set-ups")
    as_json = json.loads(runner.invoke(app, ["compare", str(a.path), str(b.path), "--json"]).stdout)
    assert as_json["noisy"][0]["side"] == "B" and as_json["rows"][1]["change"] == "noisy (B)"


def test_points_measured_in_noise_in_both_runs_name_both(tmp_path, fixed_inventory):
    a, b = _noisy_runs(tmp_path, fixed_inventory, {"a": 0.2, "b": 0.3})
    comparison = compare(analyse(a), analyse(b))
    assert [row.change for row in comparison.rows] == ["within noise", "noisy (A, B)"]
    assert [(p.side, p.nodes) for p in comparison.noisy] == [("A", 2), ("B", 2)]


def test_a_run_compared_with_its_own_directory_is_said_to_be_one_run(tmp_path, fixed_inventory):
    fake_run_dir(tmp_path / "a", BenchSpec(run_id="a"), fixed_inventory, {1: [1000], 2: [1500]})
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "." / "a")])
    assert done.exit_code == 0, done.output
    assert "A and B are the same run, a (the same run directory): nothing to compare" in (
        done.output
    )
    assert "B / A" not in done.output  # no table of ratios of 1
    data = json.loads(
        runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--json"]).stdout
    )
    assert data["same_run"] == "the same run directory"


def test_a_copy_of_a_run_is_said_to_be_the_same_run(tmp_path, fixed_inventory):
    fake_run_dir(tmp_path / "a", BenchSpec(run_id="a"), fixed_inventory, {1: [1000], 2: [1500]})
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    done = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "copy")])
    assert done.exit_code == 0, done.output
    assert "the same run, a (the same run id and the same results)" in done.output


def test_two_runs_under_one_run_id_with_other_results_are_compared(tmp_path, fixed_inventory):
    for name, two in (("first", 1500), ("again", 1800)):
        fake_run_dir(tmp_path / name, BenchSpec(run_id="r"), fixed_inventory, {1: [1000], 2: [two]})
    comparison = compare(analyse(RunDir(tmp_path / "first")), analyse(RunDir(tmp_path / "again")))
    assert comparison.same_run is None
    assert [row.ratio for row in comparison.rows] == [pytest.approx(1.0), pytest.approx(1.2)]
