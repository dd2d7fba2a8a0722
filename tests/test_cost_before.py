"""The time a cluster billed before a sweep began (runner/record/paid.py) and what a resumed
sweep paid over its runs of dtrun, against figures worked out by hand."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.azure.prices import Price
from runner.record.paid import CREATED, paid_before
from runner.record.rundir import RunDir, record_resume, write_runs
from runner.report.build import build_report
from runner.spec.outcome import RunResult, RunStatus, SweepStatus
from runner.spec.request import BenchSpec
from tests.factories import fake_run_dir

TEN = Price(10.0, "--price-per-node-hour")
CREATED_AT = "2026-11-23T09:58:41.4632871+00:00"  # Azure's own form (seven digits, an offset)


def at(clock: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(f"2026-11-23T{clock}+00:00")


@pytest.fixture
def stack(fixed_inventory):
    """Four nodes of a stack whose scale set Azure created at 09:58:41."""
    return replace(fixed_inventory, source="stack:bench", nodes_created_at=CREATED_AT)


def earlier(
    results: Path, name: str, inventory: dict[str, Any], ended: str, *, record: str = "runs.json"
):
    """A run directory beside the sweep: a sweep's (manifest.json + runs.json) or a `dtrun
    run`'s (run.json holds both), last written at ``ended``."""
    directory = results / name
    directory.mkdir(parents=True)
    stamp = {"updated_at": f"2026-11-23T{ended}+00:00"}
    if record == "run.json":
        (directory / "run.json").write_text(json.dumps({**stamp, "inventory": inventory}))
    else:
        (directory / "manifest.json").write_text(json.dumps({"inventory": inventory}))
        (directory / "runs.json").write_text(json.dumps(stamp))


def test_the_time_before_runs_from_the_nodes_creation(tmp_path, stack):
    before = paid_before(tmp_path / "runs", stack, at("10:28:41"))  # no results directory yet
    assert before is not None
    assert before["from"] == "2026-11-23T09:58:41Z"
    assert before["since"] == CREATED
    assert before["seconds"] == pytest.approx(1800 - 0.4632871)
    assert before["nodes"] == 4


def test_it_starts_at_the_last_record_on_the_same_nodes(tmp_path, stack):
    runs = tmp_path / "runs"
    same = {"source": "stack:bench", "nodes_created_at": CREATED_AT}
    earlier(runs, "sweep-a", same, "10:05:00")
    earlier(runs, "run-b", same, "10:10:00", record="run.json")  # `dtrun run`, the latest
    # not the same nodes: the stack brought down and up again, another stack, the embedded one
    earlier(runs, "recreated", {**same, "nodes_created_at": "2026-11-23T10:00:00Z"}, "10:20:00")
    earlier(runs, "other", {**same, "source": "stack:other"}, "10:21:00")
    earlier(runs, "local", {"source": "embedded"}, "10:22:00")
    earlier(runs, "later", same, "10:40:00")  # after this sweep's start: not before it
    (runs / "damaged").mkdir()
    (runs / "damaged" / "manifest.json").write_text("{not json")
    (runs / "damaged" / "runs.json").write_text("{}")
    before = paid_before(runs, stack, at("10:30:00"))
    assert before is not None
    assert before["from"] == "2026-11-23T10:10:00Z"
    assert before["since"] == "the last record of run run-b on the same nodes"
    assert before["seconds"] == pytest.approx(1200)


def test_a_resumed_sweep_on_the_same_nodes_counts_from_its_own_last_record(tmp_path, stack):
    runs = tmp_path / "runs"
    other = {"source": "stack:first", "nodes_created_at": "2026-11-23T08:00:00Z"}
    earlier(runs, "sweep", other, "10:12:00")
    manifest = runs / "sweep" / "manifest.json"
    resumed = {"inventory": {"source": "stack:bench", "nodes_created_at": CREATED_AT}}
    manifest.write_text(json.dumps({"inventory": other, "resumed": [resumed]}))
    before = paid_before(runs, stack, at("10:30:00"))
    assert before is not None and before["seconds"] == pytest.approx(18 * 60)


def test_a_cluster_that_does_not_say_when_its_nodes_were_created_records_nothing(
    tmp_path, fixed_inventory
):
    assert paid_before(tmp_path, fixed_inventory, at("10:30:00")) is None
    hosts = replace(fixed_inventory, source="hosts:cluster.txt")
    assert paid_before(tmp_path, hosts, at("10:30:00")) is None


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
        "| paid before the sweep | 2.0000 node-hours, $20.00: 4 node(s) for 30 min 0 s, "
        "from 2026-11-23T09:58:41Z (the nodes were created) to the start" in text
    )
    assert "| billed in all | 4.0000 node-hours, $40.00: before the sweep and during it |" in text


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
    assert (
        "2400.0 s over 2 runs of dtrun (the first and 1 --resume): 1800.0 s on 4 node(s), " in text
    )
    assert (
        "| paid before run 2 of dtrun | 0.5000 node-hours, $5.00: 2 node(s) for 15 min 0 s" in text
    )
