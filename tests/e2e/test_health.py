"""health: the tests that start daemons or real launches; the others are in
tests/unit/test_health.py."""

from __future__ import annotations

import json

import pytest

from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.errors import HealthGateError
from dtrun.spec.request import AllreduceSpec, BenchSpec, HealthGate
from dtrun.sweep.run import run_sweep
from tests.plans import sweep_plan


@pytest.mark.e2e
def test_strict_stops_before_the_sweep_and_records_why(no_leftovers, live_inventory):
    bench = BenchSpec(
        run_id="gate-strict", node_counts=(1,), procs_per_node=2, workload="allreduce",
        allreduce=AllreduceSpec(sizes="4K:64K", iters=5), rdzv_port=29650,
        health=HealthGate(strict=True, threshold_gbs=1e6, size="64K"),
    )  # fmt: skip
    with pytest.raises(
        HealthGateError, match=r"1 below the mark: node-0 \(127\.0\.0\.2\) at "
    ) as caught:
        run_sweep(sweep_plan(live_inventory, bench), no_leftovers / "runs", LocalExecutor())
    assert caught.value.exit_code == 4
    run = no_leftovers / "runs" / "gate-strict"
    health = json.loads((run / "health.json").read_text())
    assert health["status"] == "failed"
    (node,) = health["nodes"]
    assert node["node"] == "node-0" and 0 < node["busbw"] < 1e6 and not node["passed"]
    assert (run / "health" / "node-0" / "result.json").is_file()
    runs = json.loads((run / "runs.json").read_text())
    assert (runs["status"], runs["runs"]) == ("failed", [])  # nothing of the sweep ran
    assert "Verdict: **failed**" in (run / "report.md").read_text()


@pytest.mark.e2e
def test_below_the_mark_warns_and_the_sweep_goes_on(no_leftovers, live_inventory):
    bench = BenchSpec(
        run_id="gate-warn", node_counts=(1,), procs_per_node=2, workload="allreduce", repeat=1,
        allreduce=AllreduceSpec(sizes="4K:64K", iters=5), rdzv_port=29655,
        health=HealthGate(threshold_gbs=1e6, size="64K"),
    )  # fmt: skip
    sweep = run_sweep(sweep_plan(live_inventory, bench), no_leftovers / "runs", LocalExecutor())
    assert sweep.health is not None and sweep.health.status == "warned"
    assert sweep.report is not None and sweep.report.status == "complete"
    (row,) = sweep.report.busbw_rows
    assert row.world_size == 2 and row.correct and row.busbw > 0
    text = (no_leftovers / "runs" / "gate-warn" / "report.md").read_text()
    assert "Verdict: **warned**" in text and "| node-0 | 127.0.0.2 |" in text
