"""The embedded cluster warns when its nodes x processes per node exceed this machine's cores,
by the rule the report marks such points with."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.engines.embedded.inventory import oversubscription
from dtrun.spec.cluster import exceeds_cores

WARNING = "warning: the embedded cluster runs"


def test_processes_up_to_the_cores_share_none_and_one_more_does():
    assert not exceeds_cores(2, 2) and exceeds_cores(3, 2)
    assert oversubscription((1, 2), 1, 2) is None
    assert oversubscription((1, 2), 2, 4) is None


def test_the_warning_names_every_point_that_shares_cores_and_the_limit():
    said = oversubscription((4, 1, 2, 3), 1, 2)
    assert said is not None
    assert said.startswith("the embedded cluster runs 4 processes at 4 nodes (1 process per node)")
    assert "on this machine's 2 cores: at 3 and 4 nodes the processes share cores" in said
    assert "keep nodes x processes per node at most 2" in said
    one = oversubscription((1,), 4, 2)
    assert one is not None and "4 processes at 1 node (4 processes per node)" in one


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "400"}).invoke(app, list(args))


def test_a_bench_on_more_processes_than_cores_warns(tmp_path, two_cores):
    out = str(tmp_path / "runs")
    over = dtrun("bench", "--dry-run", "--nodes", "1,2,4", "--output", out)
    assert over.exit_code == 0, over.output
    assert f"{WARNING} 4 processes at 4 nodes (1 process per node) on this machine's 2 cores" in (
        over.output
    )
    within = dtrun("bench", "--dry-run", "--nodes", "1,2", "--output", out)
    assert within.exit_code == 0, within.output
    assert WARNING not in within.output
    per_node = dtrun("bench", "--dry-run", "--nodes", "1,2", "--procs-per-node", "2", "-o", out)
    assert f"{WARNING} 4 processes at 2 nodes (2 processes per node)" in per_node.output


def test_a_run_on_more_processes_than_cores_warns(tmp_path, two_cores):
    out = str(tmp_path / "runs")
    done = dtrun("run", "--dry-run", "--nodes", "3", "--output", out, "--", "python", "t.py")
    assert done.exit_code == 0, done.output
    assert f"{WARNING} 3 processes at 3 nodes" in done.output
