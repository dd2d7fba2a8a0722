"""A sweep whose smallest node count has no result: every efficiency is against the next one,
and the report says so in every place a user reads it (docs/report.md "The report's
sections": the baseline)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from dtrun.cli.summary import print_verdicts
from dtrun.record.runsfile import write_runs
from dtrun.report.build import analyse, build_report
from dtrun.spec.outcome import RunResult, RunStatus, SweepStatus
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir, html_markdown

SAID = "the requested baseline, 1 node, has no result (3 launches failed): every speedup and"


def _without_one_node(tmp_path, inventory):
    """`--nodes 1,2,4 --repeat 3` with every 1-node launch failed."""
    bench = BenchSpec(run_id="nobase", node_counts=(1, 2, 4), repeat=3)
    tokens = {2: [2000.0, 2010.0, 1990.0], 4: [3400.0, 3420.0, 3380.0]}
    run = fake_run_dir(tmp_path / "nobase", bench, inventory, tokens)
    ran = json.loads(run.runs.read_text())["runs"]
    failed = [RunResult(1, r, RunStatus.FAILED, 1.0, f"n1/r{r}", error="exit 1") for r in range(3)]
    kept = [
        RunResult(x["nodes"], x["repeat"], RunStatus.OK, x["wall_s"], x["run_dir"]) for x in ran
    ]
    write_runs(run, failed + kept, SweepStatus.FAILED, "3 launches failed")
    return run


def test_a_missing_requested_baseline_is_a_finding_everywhere(
    tmp_path, fixed_inventory, monkeypatch
):
    run = _without_one_node(tmp_path, fixed_inventory)
    report = build_report(run)
    assert [row.nodes for row in report.rows] == [2, 4]
    text = run.report.read_text()
    assert f"- **Baseline**: {SAID[0].upper()}{SAID[1:]}" in text
    assert "efficiency is against 2 nodes" in text
    assert SAID[0].upper() + SAID[1:] in html_markdown(run)
    summary = json.loads(run.summary.read_text())
    assert summary["baseline"]["nodes"] == 2 and summary["baseline"]["requested_nodes"] == 1
    assert SAID in summary["baseline"]["finding"]
    out = io.StringIO()
    monkeypatch.setattr("dtrun.cli.summary.console", lambda: Console(file=out, width=250))
    print_verdicts(analyse(run))
    assert "baseline: " + SAID in out.getvalue()


def test_a_sweep_with_its_requested_baseline_says_nothing_more(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="base", node_counts=(1, 2), repeat=2)
    run = fake_run_dir(
        tmp_path / "base", bench, fixed_inventory, {1: [1000.0, 1010.0], 2: [1900.0, 1910.0]}
    )
    build_report(run)
    assert "**Baseline**" not in run.report.read_text()
    baseline = json.loads(run.summary.read_text())["baseline"]
    assert baseline == {"nodes": 1, "requested_nodes": 1, "finding": None}
