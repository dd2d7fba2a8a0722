"""A priced sweep on the embedded cluster records its price and wall time, and its summary
costs every point from them (docs/report.md "Cost")."""

from __future__ import annotations

import json

import pytest

from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.spec.request import BenchSpec
from dtrun.sweep.run import run_sweep
from tests.plans import sweep_plan

pytestmark = pytest.mark.e2e


def test_a_priced_sweep_records_its_price_and_wall_time_and_costs_each_point(
    no_leftovers, live_inventory
):
    bench = BenchSpec(
        run_id="priced", node_counts=(1, 2), steps=4, warmup=1, repeat=1, price_per_node_hour=10.0
    )
    sweep = run_sweep(sweep_plan(live_inventory, bench), no_leftovers / "runs", LocalExecutor())
    run = sweep.run_dir.path
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["price"] == {"usd_per_node_hour": 10.0, "source": "--price-per-node-hour"}
    runs = json.loads((run / "runs.json").read_text())
    walls = {launch["nodes"]: launch["wall_s"] for launch in runs["runs"]}
    assert runs["wall_s"] >= sum(walls.values())  # the sweep holds its launches
    cost = json.loads((run / "summary.json").read_text())["cost"]
    one, two = cost["points"]
    assert two["node_hours"] == pytest.approx(2 * walls[2] / 3600)
    assert two["cost_usd"] == pytest.approx(10 * two["node_hours"])
    assert two["cost_efficiency"] == pytest.approx(two["efficiency"])
    assert one["usd_per_million_tokens"] > 0
    assert cost["paid_node_hours"] == pytest.approx(2 * runs["wall_s"] / 3600)
    assert cost["idle_node_hours"] >= 0
    assert "## Cost" in (run / "report.md").read_text()
