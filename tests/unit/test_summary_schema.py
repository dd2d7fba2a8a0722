"""summary.json's field names: ``verdict`` is scales, loses or inconclusive wherever it appears
in a row, the sentence on where scaling went is ``finding``; a summary an older dtrun wrote
still reads (runner/report/summaryfile.py, docs/workloads.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.cli.summary import sweep_json
from dtrun.record.rundir import RunDir
from dtrun.report.build import build_report
from dtrun.report.summaryfile import SUMMARY_SCHEMA, read_summary
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir

runner = CliRunner(env={"COLUMNS": "200"})


def _run(path: Path, inventory: Any) -> RunDir:
    bench = BenchSpec(run_id=path.name, node_counts=(1, 2, 4))
    run_dir = fake_run_dir(
        path, bench, inventory, {1: [1000], 2: [1900], 4: [2000]}, busbw={2: 0.5, 4: 0.0002}
    )
    build_report(run_dir)
    return run_dir


def _as_version_3(run_dir: RunDir) -> dict[str, Any]:
    """Rewrite the run's summary.json as dtrun.summary/3 wrote it: the finding named verdict."""
    summary = json.loads(run_dir.summary.read_text())
    old = {
        **summary,
        "schema": "dtrun.summary/3",
        "where_scaling_is_lost": [
            {("verdict" if key == "finding" else key): value for key, value in row.items()}
            for row in summary["where_scaling_is_lost"]
        ],
    }
    run_dir.summary.write_text(json.dumps(old, indent=2))
    return old


def test_where_scaling_is_lost_says_its_finding_and_verdict_means_one_thing(
    tmp_path, fixed_inventory
):
    run_dir = _run(tmp_path / "new", fixed_inventory)
    summary = json.loads(run_dir.summary.read_text())
    assert summary["schema"] == SUMMARY_SCHEMA == "dtrun.summary/7"
    lost = summary["where_scaling_is_lost"]
    assert all("verdict" not in row for row in lost)
    assert lost[0]["finding"] == "the baseline every efficiency is measured against"
    assert "communication-bound" in lost[2]["finding"]
    # "verdict" is left with one meaning: the rows' call on each node count
    assert {row["verdict"] for row in summary["rows"]} <= {
        "baseline",
        "scales",
        "loses",
        "inconclusive",
    }


def test_a_version_3_summary_reads_with_its_verdict_as_the_finding(tmp_path, fixed_inventory):
    run_dir = _run(tmp_path / "old", fixed_inventory)
    new = json.loads(run_dir.summary.read_text())
    old = _as_version_3(run_dir)
    read = read_summary(run_dir.summary)
    assert read["where_scaling_is_lost"] == new["where_scaling_is_lost"]
    assert list(read["where_scaling_is_lost"][1]) == list(new["where_scaling_is_lost"][1])
    assert read["rows"] == old["rows"]  # the rows' verdicts are left as they are
    assert read["schema"] == "dtrun.summary/3"  # the figures are still version 3's


def test_a_summary_without_the_table_or_with_both_names_reads_as_it_is(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"schema": "dtrun.summary/2", "rows": []}))
    assert read_summary(path) == {"schema": "dtrun.summary/2", "rows": []}
    both = {"where_scaling_is_lost": [{"verdict": "x", "finding": "y"}]}
    path.write_text(json.dumps(both))
    assert read_summary(path) == both


def test_json_of_an_older_run_directory_names_the_finding(tmp_path, fixed_inventory):
    run_dir = _run(tmp_path / "old", fixed_inventory)
    _as_version_3(run_dir)
    printed = sweep_json(run_dir)  # what `dtrun bench --json` prints when a sweep stops
    lost: list[dict[str, Any]] = printed["where_scaling_is_lost"]  # type: ignore[assignment]
    assert "communication-bound" in lost[2]["finding"]
    assert "verdict" not in lost[2]


def test_older_run_directories_compare_predict_and_rebuild(tmp_path, fixed_inventory):
    a, b = _run(tmp_path / "a", fixed_inventory), _run(tmp_path / "b", fixed_inventory)
    _as_version_3(a)
    _as_version_3(b)
    done = runner.invoke(app, ["compare", str(a.path), str(b.path), "--json"])
    assert done.exit_code == 0, done.output
    assert [row["nodes"] for row in json.loads(done.stdout)["rows"]] == [1, 2, 4]
    done = runner.invoke(app, ["predict", str(a.path), "--nodes", "8", "--json"])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["report", str(a.path), "--json"])
    assert done.exit_code == 0, done.output
    rebuilt = json.loads(done.stdout)
    assert rebuilt["schema"] == "dtrun.summary/7"
    assert "communication-bound" in rebuilt["where_scaling_is_lost"][2]["finding"]
    assert json.loads(a.summary.read_text())["schema"] == "dtrun.summary/7"  # rewritten


@pytest.mark.parametrize(
    ("content", "said"), [(b"{not json", "summary.json"), (b"[1, 2]", "not a JSON object")]
)
def test_a_damaged_summary_is_one_error_naming_the_file(tmp_path, content, said):
    from dtrun.errors import DamagedRunError
    from dtrun.report.summaryfile import read_summary

    path = tmp_path / "summary.json"
    path.write_bytes(content)
    with pytest.raises(DamagedRunError) as caught:
        read_summary(path)
    assert said in str(caught.value.message)
