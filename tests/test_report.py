"""The report is rebuilt from the run directory's files alone."""

from __future__ import annotations

import json

from runner.record import RunDir
from runner.report import build_report
from runner.spec import BenchSpec, ScalingMode
from tests.factories import fake_run_dir


def test_report_states_efficiency_and_formula_per_node_count(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r1", node_counts=(1, 2, 4))
    run_dir = fake_run_dir(
        tmp_path / "r1", bench, fixed_inventory, {1: [1000], 2: [1800], 4: [3000]}
    )
    build_report(run_dir)
    text = run_dir.report.read_text()
    assert "| 2 | 2 | 1,800 |" in text and "| 1.80x | 90% |" in text
    assert "| 4 | 4 | 3,000 |" in text and "| 3.00x | 75% |" in text
    assert "weak scaling (fixed batch per process): E(N) = T(N0) / T(N)" in text
    assert "embedded local cluster" in text
    assert "![tokens/s against nodes" in text
    assert run_dir.plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_strong_mode_states_the_strong_formula(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r2", mode=ScalingMode.STRONG)
    run_dir = fake_run_dir(tmp_path / "r2", bench, fixed_inventory, {1: [1000], 2: [1500]})
    build_report(run_dir)
    assert "strong scaling (fixed global batch): E(N) = N0·T(N0) / (N·T(N))" in (
        run_dir.report.read_text()
    )


def test_rebuilding_a_report_gives_the_same_files(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r3", repeat=3)
    run_dir = fake_run_dir(
        tmp_path / "r3", bench, fixed_inventory, {1: [900, 1000, 1100], 2: [1700, 1800, 1900]}
    )
    build_report(run_dir)
    first = (run_dir.report.read_text(), run_dir.summary.read_text())
    build_report(RunDir(run_dir.path))
    assert (run_dir.report.read_text(), run_dir.summary.read_text()) == first


def test_summary_carries_rows_status_and_formula(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r4")
    run_dir = fake_run_dir(
        tmp_path / "r4", bench, fixed_inventory, {1: [1000], 2: [1500]}, "failed"
    )
    build_report(run_dir)
    summary = json.loads(run_dir.summary.read_text())
    assert summary["schema"] == "dtrun.summary/1"
    assert summary["status"] == "failed"
    assert [row["efficiency"] for row in summary["rows"]] == [1.0, 0.75]
    assert "Status: **failed**" in run_dir.report.read_text()


def test_a_run_with_no_finished_launch_still_gets_a_report(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r5")
    run_dir = fake_run_dir(tmp_path / "r5", bench, fixed_inventory, {}, "failed")
    build_report(run_dir)
    assert "No launch finished" in run_dir.report.read_text()
    assert not run_dir.plot.exists()


def test_secret_looking_env_values_never_reach_the_run_record(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r6", env=(("WANDB_API_KEY", "hunter2"), ("NCCL_DEBUG", "INFO")))
    run_dir = fake_run_dir(tmp_path / "r6", bench, fixed_inventory, {1: [1000]})
    build_report(run_dir)
    for name in ("manifest.json", "summary.json", "report.md", "runs.json"):
        assert "hunter2" not in (run_dir.path / name).read_text(), name
    assert "INFO" in run_dir.manifest.read_text()


def test_embedded_points_with_more_processes_than_cores_are_flagged(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="r7", node_counts=(1, 2, 4))
    run_dir = fake_run_dir(
        tmp_path / "r7", bench, fixed_inventory, {1: [1000], 2: [1900], 4: [3000]}
    )
    manifest = json.loads(run_dir.manifest.read_text())
    manifest["machine"]["cpu_count"] = 2
    run_dir.manifest.write_text(json.dumps(manifest))
    build_report(run_dir)
    assert "Note: at 4 node(s) the embedded cluster runs more processes than" in (
        run_dir.report.read_text()
    )
