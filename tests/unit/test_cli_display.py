"""What people see while long phases run."""

from __future__ import annotations

import io
import re

from rich.console import Console

from dtrun.cli.display import RegistryBar, SweepDisplay
from dtrun.report.results import parse_train_result
from dtrun.spec.outcome import RunResult, RunStatus
from dtrun.spec.request import BenchSpec
from tests.factories import noise_data, result_data
from tests.plans import sweep_plan


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=120), out


def test_the_registry_bar_follows_nodes_until_all_are_ready():
    console, out = _console()
    with RegistryBar(console) as bar:
        bar(0, 0, 3, 0.0)
        bar(2, 1, 3, 10.0)
        bar(3, 3, 3, 20.0)
        assert bar.progress is None  # stopped as soon as every node was ready
    text = out.getvalue()
    assert "nodes ready (3 of 3 registered)" in text and "3/3" in text


def test_the_registry_bar_stays_silent_when_every_node_is_ready_at_once():
    console, out = _console()
    with RegistryBar(console) as bar:
        bar(2, 2, 2, 0.0)
    assert out.getvalue() == ""


def test_the_registry_bar_stops_when_the_wait_fails():
    console, out = _console()
    bar = RegistryBar(console)
    with bar:
        bar(1, 0, 2, 0.0)
        assert bar.progress is not None
    assert bar.progress is None
    assert "nodes ready (1 of 2 registered)" in out.getvalue()


def test_the_sweep_bar_shows_the_time_left_from_the_pace_of_launches(fixed_inventory):
    console, out = _console()
    spec = BenchSpec("pace", node_counts=(1, 2), steps=4, warmup=1, repeat=2)
    display = SweepDisplay(console, sweep_plan(fixed_inventory, spec), quiet=True)
    clock = [0.0]
    display.progress.get_time = lambda: clock[0]
    for launch, at in enumerate((60.0, 120.0)):  # a minute each: longer than rich's 30 s
        clock[0] = at
        display.on_done(RunResult(1, launch, RunStatus.FAILED, 60.0, f"n1/r{launch}"), None)
    console.print(display.progress.get_renderable())
    # 2 of 4 launches done, one a minute: 2 minutes left
    assert re.search(r"2/4 .* elapsed, 0:02:00 left", out.getvalue()), out.getvalue()


def test_a_launch_timed_in_steal_says_it_may_be_left_out(fixed_inventory):
    console, out = _console()
    spec = BenchSpec("steal", node_counts=(1, 2), steps=4, warmup=1, repeat=2)
    display = SweepDisplay(console, sweep_plan(fixed_inventory, spec), quiet=True)
    nodes = ["node-0", "node-1"]
    for launch, steal in enumerate((0.001, 0.09)):
        data = result_data(world=2, tokens_per_s=1000.0, noise=noise_data(nodes, steal=steal))
        result = parse_train_result(data, "test")
        display.on_done(RunResult(2, launch, RunStatus.OK, 5.0, f"n2/r{launch}"), result)
    first, second = out.getvalue().split("2 nodes, launch ")[1:]
    assert "left out" not in first
    assert "timed in steal or other load: left out where 2 others are quiet" in " ".join(
        second.split()
    )


def test_the_end_table_shows_n_the_efficiency_interval_and_the_verdict(
    tmp_path, fixed_inventory, monkeypatch
):
    import random

    from dtrun.cli.summary import print_verdicts, report_grid
    from dtrun.cli.tables import print_grid
    from dtrun.report.build import analyse
    from dtrun.spec.request import BenchSpec
    from tests.factories import fake_run_dir

    rng = random.Random(5)
    times = {n: [[0.0336 * n**0.5 * rng.lognormvariate(0, 0.05) for _ in range(30)]
                 for _ in range(2)] for n in (1, 2)}  # fmt: skip
    run = fake_run_dir(tmp_path / "t", BenchSpec(run_id="t"), fixed_inventory, {},
                       step_times=times)  # fmt: skip
    report = analyse(run)
    row = report.rows[1]
    assert row.efficiency_low is not None and row.efficiency_high is not None
    console, out = _console()
    print_grid(console, report_grid(report))
    text = out.getvalue()
    cell = f"{row.efficiency:.0%} ({row.efficiency_low * 100:.0f}-{row.efficiency_high * 100:.0f}%)"
    assert cell in text and "30x2" in text and "loses" in text and "baseline" in text
    assert "tokens/s, speedup and efficiency at the median step time" in text
    monkeypatch.setattr("dtrun.cli.summary.console", lambda: console)
    print_verdicts(report)
    assert f"2 nodes: loses: {row.verdict_reason}" in out.getvalue()


def test_a_launch_s_first_progress_state_shows_however_soon_after_the_last_launch_s(
    fixed_inventory, monkeypatch
):
    from dtrun.cli import common

    now = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    monkeypatch.setattr(common, "_progress_shown", {})
    console, out = _console()
    spec = BenchSpec("bars", node_counts=(1, 2), steps=4, warmup=1, repeat=2)
    display = SweepDisplay(console, sweep_plan(fixed_inventory, spec), quiet=False)
    plans = sweep_plan(fixed_inventory, spec).launches
    display.on_start(plans[0].plan, 0)
    display.on_line("node-0", "first launch 1/30\r")
    display.on_line("node-0", "first launch 30/30")
    now[0] += 3.0  # the next launch's bar, 3 s later: inside the 10 s between states
    display.on_start(plans[1].plan, 1)
    display.on_line("node-0", "second launch 1/30\r")
    common.node_lines_shown()  # shown by the echo's thread (runner/cli/echoing.py)
    assert "second launch 1/30" in out.getvalue()


def test_the_report_path_is_printed_once_the_report_is_written(tmp_path, fixed_inventory, capsys):
    """`dtrun bench` shows the result, then writes the report (off the user's wait), and names
    report.md only then: a user who opens it at once finds this sweep's report."""
    from dtrun.cli.summary import print_summary
    from dtrun.report.build import analyse, write_report
    from dtrun.sweep.run import Sweep
    from tests.factories import fake_run_dir

    run = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r", node_counts=(1, 2), repeat=2),
                       fixed_inventory, {1: [1000.0, 1010.0], 2: [1900.0, 1910.0]})  # fmt: skip
    report = analyse(run)
    before: list[str] = []

    def write() -> None:
        before.append(capsys.readouterr().out)
        write_report(report)

    print_summary(Sweep(run, report=report, unwritten=write))
    after = capsys.readouterr().out
    assert len(before) == 1 and "scales" in before[0], "the result is shown before the write"
    assert "report:" not in before[0]
    shown = f"report: {run.report} (and report.html)"  # wrapped at 80, maybe inside the path
    assert "".join(after.split()) == "".join(shown.split())
    assert run.report.is_file() and run.html.is_file()
