"""The time a cluster billed before a sweep began (runner/record/paid.py) and what a resumed
sweep paid over its runs of dtrun, against figures worked out by hand."""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dtrun.azure.prices import Price
from dtrun.errors import DamagedRunError
from dtrun.record.paid import CREATED, paid_before
from dtrun.record.rundir import RunDir, record_resume
from dtrun.record.runsfile import write_runs
from dtrun.report.build import build_report
from dtrun.spec.outcome import RunResult, RunStatus, SweepStatus
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir

TEN = Price(10.0, "--price-per-node-hour")
CREATED_AT = "2026-11-23T09:58:41.4632871+00:00"  # Azure's own form (seven digits, an offset)


def at(clock: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(f"2026-11-23T{clock}+00:00")


@pytest.fixture
def stack(fixed_inventory):
    """Four nodes of a stack whose scale set Azure created at 09:58:41."""
    return replace(
        fixed_inventory, source="stack:bench", nodes_created_at=CREATED_AT,
        size="Standard_ND96isr_H100_v5", region="eastus",
    )  # fmt: skip


# The stack's nodes as a run directory records its inventory (asdict: size and region too).
SAME = {
    "source": "stack:bench",
    "nodes_created_at": CREATED_AT,
    "size": "Standard_ND96isr_H100_v5",
    "region": "eastus",
    "nodes": [],
}


def sweep(
    results: Path,
    name: str,
    parts: list[tuple[dict[str, Any], str]],
    ended: str,
    walls: list[float | None] | None = None,
) -> Path:
    """A sweep's run directory beside this one: each run of dtrun (the first, then each
    --resume) on an inventory from a start time, runs.json last written at ``ended``."""
    directory = results / name
    directory.mkdir(parents=True)
    (first, started), *resumes = parts
    manifest = {
        "created_at": f"2026-11-23T{started}+00:00",
        "inventory": first,
        "resumed": [{"at": f"2026-11-23T{at_}+00:00", "inventory": inv} for inv, at_ in resumes],
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    runs = {"updated_at": f"2026-11-23T{ended}+00:00", "segment_wall_s": walls or []}
    (directory / "runs.json").write_text(json.dumps(runs))
    return directory


def test_the_time_before_runs_from_the_nodes_creation(tmp_path, stack):
    before = paid_before(tmp_path / "runs", stack, at("10:28:41"))  # no results directory yet
    assert before is not None
    assert before["from"] == "2026-11-23T09:58:41Z"
    assert before["since"] == CREATED
    assert before["seconds"] == pytest.approx(1800 - 0.4632871)
    assert before["nodes"] == 4


def test_it_starts_at_the_end_of_the_last_sweep_on_the_same_nodes(tmp_path, stack):
    runs = tmp_path / "runs"
    sweep(runs, "sweep-a", [(SAME, "10:01:00")], "10:05:00")
    # the same nodes reached as --outputs FILE, and Azure's time written another way
    other_name = {
        **SAME,
        "source": "stack:saved-outputs",
        "nodes_created_at": "2026-11-23T09:58:41.463287Z",
    }
    sweep(runs, "sweep-b", [(other_name, "10:06:00")], "10:10:00")
    # not the same nodes: the stack brought down and up again, another size, another region,
    # the embedded cluster
    sweep(
        runs,
        "recreated",
        [({**SAME, "nodes_created_at": "2026-11-23T10:00:00Z"}, "10:11:00")],
        "10:20:00",
    )
    sweep(runs, "bigger", [({**SAME, "size": "Standard_ND96asr_v4"}, "10:11:00")], "10:21:00")
    sweep(runs, "west", [({**SAME, "region": "westus2"}, "10:11:00")], "10:22:00")
    sweep(runs, "local", [({"source": "embedded", "nodes": []}, "10:11:00")], "10:23:00")
    sweep(runs, "later", [(SAME, "10:31:00")], "10:40:00")  # after this sweep's start
    # a `dtrun run` on the same nodes is no sweep: its time stays in the next sweep's before
    (runs / "run-c").mkdir()
    (runs / "run-c" / "run.json").write_text(
        json.dumps({"updated_at": "2026-11-23T10:25:00+00:00", "inventory": SAME})
    )
    (runs / "damaged").mkdir()
    (runs / "damaged" / "manifest.json").write_text("{not json")
    (runs / "damaged" / "runs.json").write_text("{}")
    (runs / "a-pipe").mkdir()  # read, it would wait forever for a writer: passed over
    os.mkfifo(runs / "a-pipe" / "manifest.json")
    before = paid_before(runs, stack, at("10:30:00"))
    assert before is not None
    assert before["from"] == "2026-11-23T10:10:00Z"
    assert before["since"] == "the end of sweep sweep-b on the same nodes"
    assert before["seconds"] == pytest.approx(1200)


def test_a_sweep_ending_at_the_start_counts_and_one_ending_at_the_creation_does_not(
    tmp_path, stack
):
    runs = tmp_path / "runs"
    sweep(runs, "at-creation", [(SAME, "09:50:00")], "09:58:41.4632871")
    before = paid_before(runs, stack, at("10:30:00"))
    assert before is not None and before["since"] == CREATED
    sweep(runs, "at-start", [(SAME, "10:20:00")], "10:30:00")
    before = paid_before(runs, stack, at("10:30:00"))
    assert before is not None and before["seconds"] == 0.0
    assert before["since"] == "the end of sweep at-start on the same nodes"


def test_a_clock_behind_azures_pays_nothing_before(tmp_path, stack):
    before = paid_before(tmp_path, stack, at("09:50:00"))  # "created" 8 minutes from now
    assert before is not None and before["seconds"] == 0.0


def test_a_resumed_sweep_ended_on_each_cluster_when_its_part_there_did(tmp_path, stack):
    """Sweep s ran on these nodes from 10:00 for 300 s, then was resumed on another stack at
    10:20 until 10:40. These nodes' part ended at 10:05, not at 10:40."""
    runs = tmp_path / "runs"
    other = {**SAME, "source": "stack:spot", "nodes_created_at": "2026-11-23T08:00:00Z"}
    sweep(runs, "s", [(SAME, "10:00:00"), (other, "10:20:00")], "10:40:00", [300.0, 1200.0])
    before = paid_before(runs, stack, at("11:00:00"))
    assert before is not None
    assert before["from"] == "2026-11-23T10:05:00Z" and before["seconds"] == pytest.approx(3300)
    # the other way round: resumed on these nodes, its last part ended at runs.json's last write
    sweep(runs, "t", [(other, "10:00:00"), (SAME, "10:20:00")], "10:40:00", [300.0, 1200.0])
    before = paid_before(runs, stack, at("11:00:00"))
    assert before is not None and before["seconds"] == pytest.approx(1200)
    # a part whose wall time runs.json does not hold is passed over (its end is not known)
    sweep(runs, "u", [(SAME, "10:41:00"), (other, "10:50:00")], "10:55:00", [])
    before = paid_before(runs, stack, at("11:00:00"))
    assert before is not None and before["from"] == "2026-11-23T10:40:00Z"


def test_a_cluster_that_does_not_say_when_its_nodes_were_created_records_nothing(
    tmp_path, fixed_inventory
):
    assert paid_before(tmp_path, fixed_inventory, at("10:30:00")) is None


def test_the_report_adds_the_time_before_to_what_the_sweep_paid(tmp_path, stack):
    """4 nodes x 1,800 s before = 2 node-hours ($20); the sweep 4 x 1,800 s = 2 ($20)."""
    bench = BenchSpec(run_id="before", node_counts=(1, 2), repeat=1)
    before = {"from": "2026-11-23T09:58:41Z", "since": CREATED, "seconds": 1800.0, "nodes": 4}
    run_dir = fake_run_dir(
        tmp_path / "before", bench, stack, {1: [1000], 2: [1600]}, price=TEN,
        launch_wall_s={1: 360.0, 2: 720.0}, sweep_wall_s=1800.0, paid_before=before,
    )  # fmt: skip
    cost = build_report(run_dir).cost
    assert cost is not None and cost.before_known
    assert cost.before_node_hours == pytest.approx(2.0)
    assert cost.before_cost_usd == pytest.approx(20.0)
    assert cost.billed_node_hours == pytest.approx(4.0)
    assert cost.billed_cost_usd == pytest.approx(40.0)
    summary = json.loads(run_dir.summary.read_text())["cost"]
    assert summary["before"][0]["reason"] == CREATED
    assert summary["billed_cost_usd"] == pytest.approx(40.0)
    text = run_dir.report.read_text()
    assert (
        "| paid before the sweep | 2.0000 node-hours, $20.00: 4 nodes for 30 min 0 s, "
        "from 2026-11-23T09:58:41Z (the nodes were created) to the start" in text
    )
    assert "to the start: their boot and set-up, and any other use or waiting |" in text
    assert (
        "| billed in all | 4.0000 node-hours, $40.00: before the sweep and during it (not after "
        "it, until `dtrun down`) |" in text
    )


def test_without_a_creation_time_the_report_says_the_time_before_is_not_known(
    tmp_path, fixed_inventory
):
    hosts = replace(fixed_inventory, source="hosts:cluster.txt")
    bench = BenchSpec(run_id="hosts", node_counts=(1,), repeat=1)
    run_dir = fake_run_dir(
        tmp_path / "hosts", bench, hosts, {1: [1000]}, price=TEN, sweep_wall_s=60.0
    )
    cost = build_report(run_dir).cost
    assert cost is not None
    assert not cost.before_known and cost.before_node_hours is None
    assert cost.billed_cost_usd is None  # never a total that leaves the time before out unsaid
    text = run_dir.report.read_text()
    assert "| paid before the sweep | not known: the cluster does not say when" in text
    assert "billed in all" not in text


def test_a_resumed_sweep_pays_each_run_of_dtrun_and_the_launches_it_replaced(tmp_path, stack):
    """The first run: 4 nodes x 1,800 s, 1,800 s before; the resume: 2 nodes x 600 s, 900 s
    before. Paid 4 x 1,800 + 2 x 600 = 8,400 s = 2.3333 node-hours; before 4 x 1,800 + 2 x 900
    = 9,000 s = 2.5 node-hours; the 2-node launch interrupted after 360 s, then run again in
    720 s: 2 x 1,080 s = 0.6 node-hours."""
    bench = BenchSpec(run_id="resumed", node_counts=(1, 2), repeat=1)
    first = {"from": "2026-11-23T09:58:41Z", "since": CREATED, "seconds": 1800.0, "nodes": 4}
    run_dir = fake_run_dir(
        tmp_path / "resumed", bench, stack, {1: [1000], 2: [1600]}, price=TEN,
        launch_wall_s={1: 360.0, 2: 720.0}, paid_before=first,
    )  # fmt: skip
    smaller = replace(stack, nodes=stack.nodes[:2], source="stack:spot")
    second = {"from": "2026-11-23T11:00:00Z", "since": CREATED, "seconds": 900.0, "nodes": 2}
    record_resume(run_dir, smaller, 1, second)
    data = json.loads(run_dir.runs.read_text())
    runs = [RunResult(**{**run, "node_results": ()}) for run in data["runs"]]
    interrupted = RunResult(2, 0, RunStatus.INTERRUPTED, 360.0, "n2/r0", (), "interrupted")
    write_runs(run_dir, runs, SweepStatus.COMPLETE, None, (1800.0, 600.0), (interrupted,))
    cost = build_report(RunDir(run_dir.path)).cost
    assert cost is not None
    assert cost.segment_nodes == (4, 2) and cost.segment_wall_s == (1800.0, 600.0)
    assert cost.sweep_wall_s == 2400.0
    assert cost.paid_node_hours == pytest.approx(8400 / 3600)
    assert cost.before_node_hours == pytest.approx(2.5)
    assert [b.run for b in cost.before] == [1, 2]
    assert cost.billed_cost_usd == pytest.approx(10 * (8400 / 3600 + 2.5))
    two = cost.points[1]
    assert (two.launches, two.launch_s) == (2, 1080.0)
    assert two.node_hours == pytest.approx(0.6)
    text = run_dir.report.read_text()
    assert "2400.0 s over 2 runs of dtrun (the first and 1 --resume): 1800.0 s on 4 nodes, " in text
    assert "| paid before run 2 of dtrun | 0.5000 node-hours, $5.00: 2 nodes for 15 min 0 s" in text


def test_no_total_when_one_run_of_dtrun_does_not_know_its_time_before(tmp_path, stack):
    """A stack sweep resumed on a hosts file: the stack's 1,800 s before is known, the hosts
    file's is not, so no "billed in all", in the report or in summary.json."""
    bench = BenchSpec(run_id="mixed", node_counts=(1,), repeat=1)
    first = {"from": "2026-11-23T09:58:41Z", "since": CREATED, "seconds": 1800.0, "nodes": 4}
    run_dir = fake_run_dir(
        tmp_path / "mixed", bench, stack, {1: [1000]}, price=TEN, paid_before=first
    )
    hosts = replace(stack, source="hosts:cluster.txt", nodes_created_at=None)
    record_resume(run_dir, hosts, 1, None)
    data = json.loads(run_dir.runs.read_text())
    runs = [RunResult(**{**run, "node_results": ()}) for run in data["runs"]]
    write_runs(run_dir, runs, SweepStatus.COMPLETE, None, (600.0, 300.0))
    cost = build_report(RunDir(run_dir.path)).cost
    assert cost is not None
    assert not cost.before_known and cost.before_node_hours == pytest.approx(2.0)
    assert cost.billed_node_hours is None and cost.billed_cost_usd is None
    assert json.loads(run_dir.summary.read_text())["cost"]["billed_cost_usd"] is None
    text = run_dir.report.read_text()
    assert "| paid before run 1 of dtrun | 2.0000 node-hours, $20.00" in text
    assert "| paid before the sweep | not known for every run of dtrun: " in text
    assert "billed in all" not in text


def test_a_resumed_run_directory_without_each_wall_time_says_what_was_paid_is_not_known(
    tmp_path, stack
):
    """runs.json written before dtrun kept each run's wall time: its wall_s was only the last
    run's, so neither a per-run line, nor a paid figure on the first run's nodes, nor a total;
    the time before each run, which the manifest does record, is still shown."""
    bench = BenchSpec(run_id="old", node_counts=(1,), repeat=1)
    first = {"from": "2026-11-23T09:58:41Z", "since": CREATED, "seconds": 1800.0, "nodes": 4}
    run_dir = fake_run_dir(
        tmp_path / "old", bench, stack, {1: [1000]}, price=TEN, paid_before=first,
        sweep_wall_s=1800.0,
    )  # fmt: skip
    record_resume(run_dir, stack, 1, {**first, "seconds": 60.0})
    data = json.loads(run_dir.runs.read_text())
    del data["segment_wall_s"]
    run_dir.runs.write_text(json.dumps(data))
    cost = build_report(RunDir(run_dir.path)).cost
    assert cost is not None and cost.segment_wall_s == ()
    assert cost.paid_node_hours is None and cost.idle_node_hours is None
    assert cost.billed_node_hours is None
    assert cost.before_node_hours == pytest.approx(4 * 1860 / 3600)
    text = run_dir.report.read_text()
    assert (
        "| sweep wall time | not known: not every run of dtrun on this sweep (the first and 1 "
        "--resume) recorded its wall time" in text
    )
    assert "| paid before run 2 of dtrun | 0.0667 node-hours" in text
    assert (
        "| billed in all | not given: what the cluster paid during the sweep is not known" in text
    )


@pytest.mark.parametrize(
    ("where", "change", "named"),
    [
        ("manifest", {"paid_before": {"from": "x"}}, "paid_before"),
        ("manifest", {"resumed": [{"at": "2026-11-23T10:00:00Z"}]}, "inventory"),
        ("runs", {"replaced": [{"nodes": 2}]}, "wall_s"),
        ("runs", {"segment_wall_s": ["long"]}, "segment_wall_s"),
    ],
)
def test_a_damaged_cost_record_is_refused_naming_it(tmp_path, stack, where, change, named):
    bench = BenchSpec(run_id="bad", node_counts=(1,), repeat=1)
    run_dir = fake_run_dir(tmp_path / "bad", bench, stack, {1: [1000]}, price=TEN)
    path = run_dir.manifest if where == "manifest" else run_dir.runs
    path.write_text(json.dumps(json.loads(path.read_text()) | change))
    with pytest.raises(DamagedRunError, match=named) as caught:
        build_report(RunDir(run_dir.path))
    assert caught.value.exit_code == 2


def test_a_resume_that_stopped_before_writing_has_no_end_on_its_nodes(tmp_path, stack):
    """Sweep s: 300 s on another stack from 10:00, then resumed on these nodes at 10:20 and
    killed before it wrote runs.json (which still holds the first part's wall time, written at
    10:05): its end on these nodes is not known, so the time before runs from their creation."""
    runs = tmp_path / "runs"
    other = {**SAME, "source": "stack:spot", "nodes_created_at": "2026-11-23T08:00:00Z"}
    sweep(runs, "s", [(other, "10:00:00"), (SAME, "10:20:00")], "10:05:00", [300.0])
    before = paid_before(runs, stack, at("11:00:00"))
    assert before is not None and before["since"] == CREATED


@pytest.mark.parametrize("wall", [1e300, -1e300, 1e12], ids=["1e300", "-1e300", "1e12"])
def test_a_sweep_beside_whose_wall_time_leaves_the_calendar_is_passed_over(tmp_path, stack, wall):
    """A run directory beside this one (the results directory: anyone's) whose runs.json holds
    a part's wall time of 1e300 s, or 1e12 s (past the year 9999), was an OverflowError out of
    timedelta or the date's addition: a traceback as `dtrun bench` started on the stack. Like
    any record that cannot be read there, it is passed over (docs/report.md, "Cost")."""
    runs = tmp_path / "runs"
    sweep(runs, "s", [(SAME, "10:00:00"), (SAME, "10:20:00")], "10:40:00", [wall])
    sweep(runs, "t", [(SAME, "10:00:00")], "10:30:00")
    before = paid_before(runs, stack, at("11:00:00"))
    assert before is not None
    assert before["from"] == "2026-11-23T10:30:00Z"  # t's end: s is passed over
