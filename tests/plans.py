"""Plans for tests, in one call: resolve the request, then plan it on an inventory."""

from __future__ import annotations

from dataclasses import replace

from dtrun.plan.resolve import resolve_bench, resolve_run
from dtrun.plan.sweep import SweepPlan, plan_point, plan_run, plan_sweep
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import BenchSpec, RunSpec


def build_plan(inventory: Inventory, bench: BenchSpec, nodes: int) -> LaunchPlan:
    """One point of a sweep (``nodes`` need not be among the spec's node counts)."""
    resolved = resolve_bench(bench)
    points = {point.nodes: point for point in resolved.points}
    if nodes not in points:
        wider = replace(bench, node_counts=tuple(sorted({*bench.node_counts, nodes})))
        points = {point.nodes: point for point in resolve_bench(wider).points}
    return plan_point(resolved, inventory, points[nodes])


def build_run_plan(inventory: Inventory, run: RunSpec) -> LaunchPlan:
    return plan_run(resolve_run(run), inventory)


def sweep_plan(inventory: Inventory, bench: BenchSpec) -> SweepPlan:
    return plan_sweep(resolve_bench(bench), inventory)
