"""What a verdict is printed beside: every figure of a point says what its numbers support, the
same in report.md, report.html, summary.json, the console, `dtrun compare` and `dtrun predict`
(docs/report.md "Intervals and verdicts")."""

from __future__ import annotations

import io
import json
import re

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.cli.summary import report_grid
from dtrun.cli.tables import print_grid
from dtrun.report.build import analyse, build_report
from dtrun.report.stats import Verdict
from dtrun.spec.request import BenchSpec
from dtrun.spec.text import lost_percent, percent, percent_range
from tests.factories import fake_run_dir, html_markdown

runner = CliRunner()


@pytest.mark.parametrize(
    ("value", "target", "shown"),
    [
        (0.8996, 0.9, "89.96%"),  # below: never '90%'
        (0.8951, 0.9, "89.5%"),
        (0.89999999, 0.9, "89.999%"),  # past three decimals: rounded away from the target
        (0.9, 0.9, "90%"),
        (0.9004, 0.9, "90%"),
        (0.9052, 0.9055, "90.5%"),  # '91%' would be above a 90.55% target
        (1.12, 0.9, "112%"),
        (0.8996, None, "90%"),  # no target: whole percents
    ],
)
def test_an_efficiency_is_shown_on_its_side_of_the_target(value, target, shown):
    assert percent(value, target) == shown


def test_a_range_shows_each_end_on_its_side_of_the_target():
    assert percent_range(0.8468, 0.89968, 0.9) == "85-89.97%"
    assert percent_range(0.8951, 0.95, 0.9) == "89.5-95%"


def test_an_interval_just_below_the_target_is_never_shown_reaching_it(tmp_path, fixed_inventory):
    """Two launches a point, 1% apart: the 2-node efficiency interval ends at 89.97%, below the
    90% target, so the point loses; '85-90%' beside 'below the 90% target' contradicts it."""
    bench = BenchSpec(run_id="edge", node_counts=(1, 2), repeat=2)
    tokens = {1: [1000.0, 1010.0], 2: [1745.7, 1745.7 * 1.01]}
    run = fake_run_dir(tmp_path / "edge", bench, fixed_inventory, tokens)
    report = build_report(run)
    row = report.rows[1]
    assert row.verdict is Verdict.LOSES and 0.8996 < (row.efficiency_high or 0) < 0.8997
    assert "95% CI 85-89.97%, below the 90% target" in row.verdict_reason
    text = run.report.read_text()
    assert "| 87% (85-89.97%) | **loses** |" in text
    assert "85-90%" not in text and "85-90%" not in html_markdown(run)
    out = io.StringIO()
    from rich.console import Console

    print_grid(Console(file=out, width=200), report_grid(analyse(run)))
    assert "87% (85-89.97%)" in out.getvalue()
    other = fake_run_dir(tmp_path / "other", BenchSpec(run_id="other", repeat=2), fixed_inventory,
                         {1: [1000.0, 1010.0], 2: [1800.0, 1818.0]})  # fmt: skip
    done = runner.invoke(app, ["compare", str(run.path), str(other.path)], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    assert re.search(r"│\s+87% \(85-89\.97%\) │", done.output), done.output


def test_launches_that_never_differ_give_no_interval_and_no_verdict(tmp_path, fixed_inventory):
    """Step times read off a coarse clock (a program printing 0.11 s a step) make every launch
    alike: no launch-to-launch spread was measured, and a zero-width '95% CI 91-91%' that
    decides 'scales' after two launches claims a certainty nothing showed."""
    bench = BenchSpec(run_id="flat", node_counts=(1, 2), repeat=2)
    times = {1: [[0.1] * 20, [0.1] * 20], 2: [[0.11] * 20, [0.11] * 20]}
    run = fake_run_dir(tmp_path / "flat", bench, fixed_inventory, {}, step_times=times)
    row = analyse(run).rows[1]
    assert row.launch_sigma == 0
    assert row.efficiency_low is None and row.efficiency_high is None
    assert row.verdict is Verdict.INCONCLUSIVE
    assert "every launch ran at the same speed" in row.verdict_reason
    assert "one launch" not in row.verdict_reason


def _steps(step: float, launch: int) -> list[float]:
    """20 steps around ``step`` seconds, each launch 0.1% slower than the one before."""
    return [step * (1 + 0.001 * launch) * (1 + 0.01 * (i % 5 - 2) / 2) for i in range(20)]


def test_an_until_decided_run_s_intervals_are_never_called_95_percent(tmp_path, fixed_inventory):
    """--until-decided judges each look at its own level (99.67% at the first of six): the
    compare table, its caption and the report's finding name that level, not 95%."""
    decided = BenchSpec(run_id="decided", node_counts=(1, 2), until_decided=True, max_launches=6)
    times = {n: [_steps(1.0 / e, k) for k in range(2)] for n, e in ((1, 1.0), (2, 0.99))}
    run = fake_run_dir(tmp_path / "decided", decided, fixed_inventory, {}, step_times=times)
    report = build_report(run)
    row = report.rows[1]
    assert (row.verdict, row.stopped) == (Verdict.SCALES, "decided")
    assert row.confidence == pytest.approx(1 - 0.05 / 15)
    assert "scales (99%, its 99.67% interval at or above the target)" in run.report.read_text()
    fixed = BenchSpec(run_id="fixed", node_counts=(1, 2), repeat=2)
    other = fake_run_dir(tmp_path / "fixed", fixed, fixed_inventory, {}, step_times=times)
    done = runner.invoke(app, ["compare", str(run.path), str(other.path)], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    assert "A 95% CI" not in done.output and "A eff. (95% CI)" not in done.output
    assert "A per-look CI" in done.output and "A eff. (per-look CI)" in done.output
    assert "B 95% CI" in done.output
    assert "the two intervals (per-look, 95%) do not overlap" in done.output


def test_predict_on_a_run_judges_against_the_run_s_own_target(tmp_path, fixed_inventory):
    """The report's Next node counts judge 4 and 8 nodes against the run's --target-efficiency;
    `dtrun predict RUN --nodes 4,8` on the same figures judged them against 0.9 instead, and
    so gave other verdicts for the same predicted efficiencies."""
    import json

    bench = BenchSpec(run_id="t80", node_counts=(1, 2), repeat=2, target_efficiency=0.8)
    times = {n: [_steps(s, k) for k in range(2)] for n, s in ((1, 0.1), (2, 0.101))}
    run = fake_run_dir(tmp_path / "t80", bench, fixed_inventory, {}, step_times=times,
                       busbw={2: 40.0})  # fmt: skip
    report = build_report(run)
    assert report.next_counts is not None
    said = {p.nodes: p.verdict for p in report.next_counts.predictions}
    assert said == {4: "scales", 8: "scales"}
    done = runner.invoke(app, ["predict", str(run.path), "--nodes", "4,8", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout[done.stdout.index("{") :])
    assert data["target_efficiency"] == 0.8
    assert {p["nodes"]: p["verdict"] for p in data["predictions"]} == said
    given = runner.invoke(app, ["predict", str(run.path), "--nodes", "4", "--json",
                                "--target-efficiency", "0.99"])  # fmt: skip
    assert json.loads(given.stdout[given.stdout.index("{") :])["target_efficiency"] == 0.99


@pytest.mark.parametrize(
    ("value", "target", "shown"),
    [
        (0.003, 0.9, "0.3%"),
        (0.003, None, "0.3%"),
        (0.0004, 0.9, "0.04%"),
        (0.00004, None, "0.004%"),
        (1e-7, 0.9, "<0.001%"),  # past three decimals: still not zero
        (1e-7, None, "<0.001%"),
        (0.0, 0.9, "0%"),  # zero is zero
        (0.006, None, "1%"),  # rounds to a whole non-zero percent as before
    ],
)
def test_a_tiny_efficiency_never_reads_zero(value, target, shown):
    assert percent(value, target) == shown


def test_a_range_from_a_tiny_efficiency_never_starts_at_zero():
    assert percent_range(0.002, 0.02, 0.9) == "0.2-2%"


@pytest.mark.parametrize(
    ("value", "target", "lost"),
    [
        (0.003, 0.9, "99.7%"),  # never "100% lost" beside an efficiency of 0.3%
        (0.8996, 0.9, "10.04%"),  # beside "89.96%": the two add up to 100
        (0.85, 0.9, "15%"),
        (1e-7, 0.9, ">99.999%"),
        (0.0, 0.9, "100%"),  # nothing done is all lost
    ],
)
def test_what_is_lost_is_the_complement_of_the_efficiency_shown(value, target, lost):
    assert lost_percent(value, target) == lost
    if not lost.startswith(">"):
        assert float(lost[:-1]) + float(percent(value, target)[:-1]) == pytest.approx(100)


def test_a_point_at_a_tiny_efficiency_is_not_said_to_lose_everything(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="t", repeat=1)
    run_dir = fake_run_dir(tmp_path / "t", bench, fixed_inventory, {1: [1000.0], 2: [6.0]})
    build_report(run_dir)
    (_, lost) = json.loads(run_dir.summary.read_text())["where_scaling_is_lost"]
    assert lost["finding"].startswith("99.7% lost"), lost["finding"]
