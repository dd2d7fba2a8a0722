"""The health gate: each node's single-node all-reduce against a pass mark, before the sweep."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from runner.errors import HealthGateError
from runner.execute.local import LocalExecutor
from runner.health import GatePlan, gate_launch, plan_gate
from runner.pipeline import run_sweep
from runner.spec import AllreduceSpec, BenchSpec, HealthGate
from tests.conftest import CLUSTERS


def test_the_embedded_cluster_has_no_pass_mark_so_the_gate_says_why_it_skips(spec):
    reason = plan_gate(CLUSTERS["embedded"], spec)
    assert isinstance(reason, str)
    assert "no expected single-node bus bandwidth for the embedded CPU cluster" in reason
    assert "--health-threshold" in reason


def test_turned_off_is_a_reason_too(spec):
    off = replace(spec, health=HealthGate(enabled=False))
    assert plan_gate(CLUSTERS["h100"], off) == "turned off (--no-health-gate)"


def test_an_h100_cluster_is_checked_like_azure_s_health_check(spec):
    gate = plan_gate(CLUSTERS["h100"], replace(spec, node_counts=(1, 2, 4), procs_per_node=2))
    assert isinstance(gate, GatePlan)
    # FACTS s6: 460 GB/s at 16 GB on all 8 GPUs, whatever the sweep's processes per node
    assert (gate.threshold_gbs, gate.size, gate.procs_per_node) == (460.0, "16G", 8)
    assert [node.name for node in gate.nodes] == ["vm-0", "vm-1", "vm-2", "vm-3"]
    assert "Standard_ND96isr_H100_v5" in gate.threshold_source


def test_the_gate_checks_only_the_nodes_the_sweep_uses(spec):
    gate = plan_gate(CLUSTERS["a100"], replace(spec, node_counts=(1, 2)))
    assert isinstance(gate, GatePlan)
    assert (gate.threshold_gbs, gate.size) == (228.0, "8G")
    assert [node.name for node in gate.nodes] == ["vm-0", "vm-1"]


def test_a_threshold_of_your_own_gates_any_cluster(spec):
    mine = replace(spec, procs_per_node=2, health=HealthGate(threshold_gbs=0.5))
    gate = plan_gate(CLUSTERS["embedded"], mine)
    assert isinstance(gate, GatePlan)
    assert (gate.threshold_gbs, gate.threshold_source, gate.size) == (
        0.5,
        "--health-threshold",
        "16M",
    )
    one = replace(mine, procs_per_node=1)
    assert "one process per node" in str(plan_gate(CLUSTERS["embedded"], one))


def test_each_node_is_launched_alone_with_all_its_gpus(spec):
    inventory = CLUSTERS["h100"]
    gate = plan_gate(inventory, replace(spec, node_counts=(2,)))
    assert isinstance(gate, GatePlan)
    plans = [gate_launch(inventory, spec, gate, node) for node in gate.nodes]
    assert [p.nnodes for p in plans] == [1, 1]
    assert [p.launches[0].node.name for p in plans] == ["vm-0", "vm-1"]
    assert plans[0].rdzv_id != plans[1].rdzv_id
    script = plans[1].launches[0].script
    assert "--nproc-per-node=8" in script
    assert "-m runner.workloads.allreduce --sizes 16G" in script
    assert "--device cuda" in script
    assert "export NCCL_IB_PCI_RELAXED_ORDERING=1" in script  # the size's NCCL settings


@pytest.mark.e2e
def test_strict_stops_before_the_sweep_and_records_why(no_leftovers, live_inventory):
    bench = BenchSpec(
        run_id="gate-strict", node_counts=(1,), procs_per_node=2, workload="allreduce",
        allreduce=AllreduceSpec(sizes="4K:64K", iters=5), rdzv_port=29650,
        health=HealthGate(strict=True, threshold_gbs=1e6, size="64K"),
    )  # fmt: skip
    with pytest.raises(HealthGateError, match=r"1 below the mark \(node-0 \(") as caught:
        run_sweep(live_inventory, bench, no_leftovers / "runs", LocalExecutor())
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
        run_id="gate-warn", node_counts=(1,), procs_per_node=2, workload="allreduce",
        allreduce=AllreduceSpec(sizes="4K:64K", iters=5), rdzv_port=29655,
        health=HealthGate(threshold_gbs=1e6, size="64K"),
    )  # fmt: skip
    sweep = run_sweep(live_inventory, bench, no_leftovers / "runs", LocalExecutor())
    assert sweep.health is not None and sweep.health.status == "warned"
    assert sweep.report is not None and sweep.report.status == "complete"
    (row,) = sweep.report.busbw_rows
    assert row.world_size == 2 and row.correct and row.busbw > 0
    text = (no_leftovers / "runs" / "gate-warn" / "report.md").read_text()
    assert "Verdict: **warned**" in text and "| node-0 | 127.0.0.2 |" in text
