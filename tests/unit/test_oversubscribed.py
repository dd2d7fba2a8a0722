"""The embedded cluster warns when its processes would share cores (nodes x processes per node
beyond the cores dtrun may use, or a node's processes beyond its own cores under taskset), by
the rule the report marks such points with."""

from __future__ import annotations

import os
import shutil

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.engines.embedded.inventory import oversubscription
from dtrun.spec.cluster import exceeds_cores, shares_cores

WARNING = "warning: the embedded cluster runs"


def test_processes_up_to_the_cores_share_none_and_one_more_does():
    assert not exceeds_cores(2, 2) and exceeds_cores(3, 2)
    assert oversubscription((1, 2), 1, 2) is None
    assert oversubscription((1, 2), 2, 4) is None


def test_the_warning_names_every_point_that_shares_cores_and_the_limit():
    said = oversubscription((4, 1, 2, 3), 1, 2)
    assert said is not None
    assert said.startswith("the embedded cluster runs 4 processes at 4 nodes (1 process per node)")
    assert "on the 2 cores dtrun may use: at 3 and 4 nodes the processes share cores" in said
    assert "keep nodes x processes per node at most 2" in said
    one = oversubscription((1,), 4, 2)
    assert one is not None and "4 processes at 1 node (4 processes per node)" in one


def test_nodes_kept_to_their_cores_share_them_past_their_own_or_where_they_wrap():
    # one core a node: two processes on a node share its core at every node count
    assert shares_cores([(0,)], 2, 2) and shares_cores([(0,), (1,)], 2, 2)
    assert not shares_cores([(0,), (1,)], 1, 2)
    # four nodes wrapped round two cores: two processes a core
    assert shares_cores([(0,), (1,), (0,), (1,)], 1, 2)
    # floating nodes (no taskset): the processes against the cores dtrun may use
    assert not shares_cores([None, None], 2, 4) and shares_cores([None, None], 2, 3)


def test_the_warning_for_processes_past_a_node_s_own_cores_says_how_many_fit():
    said = oversubscription((1, 2), 2, 2, [(0,), (1,)])
    assert said is not None
    assert "4 processes at 2 nodes (2 processes per node) on the 2 cores dtrun may use" in said
    assert "at 1 and 2 nodes the processes share cores" in said
    assert "keep processes per node within each node's 1 core for figures" in said
    assert oversubscription((1, 2), 1, 2, [(0,), (1,)]) is None


@pytest.fixture
def two_cores(monkeypatch):
    """A machine of eight cores of which dtrun may use two (a container's cpuset)."""
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    found = shutil.which
    monkeypatch.setattr(
        "shutil.which",
        lambda name, *a, **k: "/usr/bin/taskset" if name == "taskset" else found(name, *a, **k),
    )


def test_without_taskset_the_bench_says_its_nodes_share_every_core(tmp_path, monkeypatch):
    found = shutil.which
    monkeypatch.setattr(
        "shutil.which", lambda name, *a, **k: None if name == "taskset" else found(name, *a, **k)
    )
    done = dtrun("bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path / "runs"))
    assert done.exit_code == 0, done.output
    assert "warning: taskset (util-linux) is not on PATH: the embedded nodes share every core" in (
        done.output
    )


def test_a_taskset_refused_an_affinity_floats_the_nodes_and_says_why(tmp_path, monkeypatch):
    """Where sched_setaffinity is denied (a seccomp profile, a sandbox), taskset fails every
    node's launch with EPERM: the nodes float instead, and the bench says why."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "taskset"  # what util-linux's taskset prints when the kernel says EPERM
    fake.write_text(
        '#!/bin/sh\necho "taskset: failed to set pid $$\'s affinity: Operation not permitted" >&2'
        "\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    done = dtrun("bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path / "runs"))
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert "warning: taskset cannot set a CPU affinity here (taskset: failed to set pid" in said
    assert "Operation not permitted): the embedded nodes share every core" in said
    assert "run dtrun where it may set a CPU affinity (sched_setaffinity)" in said
    from dtrun.engines.base import ClusterChoice, Hooks
    from dtrun.engines.embedded.engine import EmbeddedEngine

    with EmbeddedEngine().open(ClusterChoice(nodes=2), Hooks(notice=print)) as cluster:
        assert [node.cores for node in cluster.inventory.nodes] == [None, None]  # floating


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "400"}).invoke(app, list(args))


def test_a_bench_on_more_processes_than_cores_warns(tmp_path, two_cores):
    out = str(tmp_path / "runs")
    over = dtrun("bench", "--dry-run", "--nodes", "1,2,4", "--output", out)
    assert over.exit_code == 0, over.output
    assert f"{WARNING} 4 processes at 4 nodes (1 process per node) on the 2 cores dtrun" in (
        over.output
    )
    within = dtrun("bench", "--dry-run", "--nodes", "1,2", "--output", out)
    assert within.exit_code == 0, within.output
    assert WARNING not in within.output
    per_node = dtrun("bench", "--dry-run", "--nodes", "1,2", "--procs-per-node", "2", "-o", out)
    assert f"{WARNING} 4 processes at 2 nodes (2 processes per node)" in per_node.output
    assert "at 1 and 2 nodes the processes share cores" in per_node.output


def test_a_run_on_more_processes_than_cores_warns(tmp_path, two_cores):
    out = str(tmp_path / "runs")
    done = dtrun("run", "--dry-run", "--nodes", "3", "--output", out, "--", "python", "t.py")
    assert done.exit_code == 0, done.output
    assert f"{WARNING} 3 processes at 3 nodes" in done.output


@pytest.mark.parametrize(("procs", "warned"), [("1", True), ("8", False)])
def test_gpu_nodes_left_mostly_idle_by_procs_per_node_are_warned_of(tmp_path, procs, warned):
    """-p defaults to 1, as torchrun's --nproc-per-node does: on 8-GPU nodes that measures one
    GPU a node, which the user is told before anything runs."""
    hosts = tmp_path / "hosts.yaml"
    nodes = "".join(f"  - {{host: 10.0.0.{i}, slots: 8}}\n" for i in (4, 5))
    hosts.write_text(f"accelerator: cuda\nhosts:\n{nodes}")
    done = CliRunner().invoke(
        app, ["bench", "--hosts", str(hosts), "--nodes", "1,2", "-p", procs, "--dry-run"]
    )
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    idle = (
        "warning: each node has 8 GPUs and --procs-per-node is 1, so 7 of each node's GPUs stay "
        "idle and the sweep measures 1 process a node; pass -p 8 to use them all"
    )
    assert (idle in said) is warned
    assert ("stay idle" in said) is warned
