"""The embedded nodes' cores in the records: the manifest keeps each node's cores (or that it
floated, without taskset) and the cores dtrun could use; the report's set-up, its rule for
points whose processes shared cores, and `dtrun compare` read them (docs/bench.md "The
embedded local cluster")."""

from __future__ import annotations

import json
from dataclasses import replace

from dtrun.record.rundir import RunDir
from dtrun.report.build import analyse, build_report
from dtrun.report.compare import compare
from dtrun.report.reproduce import kept_cores, measured_on, oversubscribed
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir


def _kept(inventory, cores):
    nodes = tuple(
        replace(node, cores=kept) for node, kept in zip(inventory.nodes, cores, strict=True)
    )
    return replace(inventory, nodes=nodes)


def _run(tmp_path, name, inventory, procs_per_node=1) -> RunDir:
    bench = BenchSpec(run_id=name, node_counts=(1, 2), procs_per_node=procs_per_node)
    return fake_run_dir(tmp_path / name, bench, inventory, {1: [1000, 1010], 2: [1800, 1790]})


def test_the_manifest_and_report_say_which_cores_each_node_was_kept_to(tmp_path, fixed_inventory):
    pinned = _kept(fixed_inventory, [(0, 1), (2, 3), (4, 5), (6, 7)])
    run = _run(tmp_path, "pinned", pinned)
    manifest = json.loads(run.manifest.read_text())
    assert [node["cores"] for node in manifest["inventory"]["nodes"]] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
    ]
    assert kept_cores(manifest) == "node-0: 0,1; node-1: 2,3; node-2: 4,5; node-3: 6,7"
    build_report(run)
    assert "| cores | node-0: 0,1; node-1: 2,3; node-2: 4,5; node-3: 6,7 |" in (
        (run.path / "report.md").read_text()
    )
    floating = json.loads(_run(tmp_path, "floating", fixed_inventory).manifest.read_text())
    assert kept_cores(floating) == "every node on every core dtrun could use (no taskset)"


def test_a_manifest_from_before_the_cores_were_recorded_has_no_cores_row(tmp_path, fixed_inventory):
    manifest = json.loads(_run(tmp_path, "old", fixed_inventory).manifest.read_text())
    for node in manifest["inventory"]["nodes"]:
        del node["cores"]
    del manifest["machine"]["usable_cpus"]
    assert kept_cores(manifest) is None
    assert "cores" in measured_on(manifest, None)


def test_the_machine_is_described_by_the_cores_dtrun_could_use(tmp_path, fixed_inventory):
    manifest = json.loads(_run(tmp_path, "m", fixed_inventory).manifest.read_text())
    manifest["machine"].update(cpu_count=8, usable_cpus=2)
    assert ", 2 of its 8 cores, " in measured_on(manifest, None)
    manifest["machine"].update(usable_cpus=8)
    assert ", 8 cores, " in measured_on(manifest, None)


def test_processes_past_a_node_s_own_cores_mark_every_point_that_shared_them(
    tmp_path, fixed_inventory
):
    one_each = _kept(fixed_inventory, [(0,), (1,), (0,), (1,)])
    shared = analyse(_run(tmp_path, "two-a-core", one_each, procs_per_node=2))
    assert oversubscribed(shared.manifest, shared.rows) == [1, 2]
    alone = analyse(_run(tmp_path, "one-a-core", one_each))
    assert oversubscribed(alone.manifest, alone.rows) == []
    # floating nodes: the processes against the cores dtrun could use
    floating = analyse(_run(tmp_path, "floating", fixed_inventory, procs_per_node=2))
    machine = {**floating.manifest["machine"], "cpu_count": 8}
    for usable, over in ((4, []), (2, [2])):
        manifest = {**floating.manifest, "machine": {**machine, "usable_cpus": usable}}
        assert oversubscribed(manifest, floating.rows) == over


def test_compare_tells_runs_on_other_cores_apart(tmp_path, fixed_inventory):
    pinned = _run(tmp_path, "pinned", _kept(fixed_inventory, [(0, 1), (2, 3), (4, 5), (6, 7)]))
    floating = _run(tmp_path, "floating", fixed_inventory)
    differs = {
        what: (a, b) for what, a, b in compare(analyse(pinned), analyse(floating)).differences
    }
    assert differs["cores"] == (
        "node-0: 0,1; node-1: 2,3; node-2: 4,5; node-3: 6,7",
        "every node on every core dtrun could use (no taskset)",
    )
