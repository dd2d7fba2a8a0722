"""The health gate: each node's single-node all-reduce against a pass mark, before the sweep."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dtrun.plan.resolve import resolve_bench
from dtrun.plan.sweep import GatePlan
from dtrun.plan.sweep import plan_gate as plan_resolved_gate
from dtrun.spec.cluster import Inventory
from dtrun.spec.outcome import GateStatus
from dtrun.spec.request import BenchSpec, HealthGate
from dtrun.sweep.gate import judge
from tests.conftest import CLUSTERS


def plan_gate(inventory: Inventory, spec: BenchSpec) -> GatePlan | str:
    return plan_resolved_gate(resolve_bench(spec), inventory)


def test_the_embedded_cluster_has_no_pass_mark_so_the_gate_says_why_it_skips(spec):
    reason = plan_gate(CLUSTERS["embedded"], spec)
    assert isinstance(reason, str)
    assert "no expected single-node bus bandwidth for CPU nodes of no catalog size" in reason
    assert "--health-threshold" in reason


def test_turned_off_is_a_reason_too(spec):
    off = replace(spec, health=HealthGate(enabled=False))
    assert plan_gate(CLUSTERS["h100"], off) == "turned off (--no-health-gate)"


def test_an_h100_cluster_is_checked_like_azure_s_health_check(spec):
    gate = plan_gate(CLUSTERS["h100"], replace(spec, node_counts=(1, 2, 4), procs_per_node=2))
    assert isinstance(gate, GatePlan)
    # docs/facts.md §6: 460 GB/s at 16 GB on all 8 GPUs, whatever the sweep's processes per node
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
    plans = [check.plan for check in gate.checks]
    assert [check.workdir for check in gate.checks] == ["health/vm-0", "health/vm-1"]
    assert [p.nnodes for p in plans] == [1, 1]
    assert [p.launches[0].node.name for p in plans] == ["vm-0", "vm-1"]
    assert plans[0].rdzv_id != plans[1].rdzv_id
    script = plans[1].launches[0].script
    assert "--nproc-per-node=8" in script
    assert "-m dtrun.workloads.allreduce --sizes 16G" in script
    assert "--device cuda" in script
    assert "export NCCL_IB_PCI_RELAXED_ORDERING=1" in script  # the size's NCCL settings


def _outcome(busbw: float | None):
    from dtrun.errors import NodeFailedError
    from dtrun.report.resultfile import parse_result
    from dtrun.spec.outcome import RunResult, RunStatus
    from dtrun.sweep.runlaunch import Outcome
    from tests.factories import allreduce_data

    if busbw is None:
        error = NodeFailedError("vm-2", "10.0.0.6", 1, "health/vm-2/node-0.log", "")
        return Outcome(RunResult(1, 0, RunStatus.FAILED, 1.0, "health/x"), error=error)
    result = parse_result(allreduce_data(world=8, busbw={1 << 24: busbw}), "r")
    return Outcome(RunResult(1, 0, RunStatus.OK, 1.0, "health/x"), result)


@pytest.mark.parametrize(
    ("strict", "status"), [(False, GateStatus.WARNED), (True, GateStatus.FAILED)]
)
def test_the_gate_judges_each_node_s_result_against_the_mark(spec, strict, status):
    gate = plan_gate(CLUSTERS["h100"], replace(spec, node_counts=(3,)))
    assert isinstance(gate, GatePlan)
    health = judge(gate, [_outcome(471.0), _outcome(301.0), _outcome(None)], strict=strict)
    assert health.status is status
    assert [(n.node, n.busbw, n.passed) for n in health.nodes] == [
        ("vm-0", 471.0, True), ("vm-1", 301.0, False), ("vm-2", None, False),
    ]  # fmt: skip
    assert health.nodes[2].error is not None and "vm-2 (10.0.0.6) failed" in health.nodes[2].error
    assert (  # each named with its host, as the hosts file or stack gives it
        "2 below the mark: vm-1 (10.2.0.5) at 301.0 GB/s, vm-2 (10.2.0.6), which did not run"
        in health.describe()
    )
    every = judge(gate, [_outcome(471.0)] * 3, strict=True)
    assert every.status is GateStatus.PASSED
