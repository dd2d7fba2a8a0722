"""The engines behind one interface: the registry holds the four, each choice selects one."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.engines.base import ClusterChoice, Hooks
from runner.engines.registry import ENGINES, open_cluster, selected
from runner.spec.launch import LaunchPlan
from runner.spec.slurm import SlurmRequest

CHOICES = {
    "embedded": [ClusterChoice(), ClusterChoice(local_nodes=3, check=True)],
    "ssh": [
        ClusterChoice(hosts="h1:4,h2:4"),
        ClusterChoice(stack="dev"),
        ClusterChoice(outputs=Path("dev.json")),
    ],
    "slurm": [
        ClusterChoice(slurm=SlurmRequest()),
        ClusterChoice(slurm=SlurmRequest(partition="gpu"), stack="dev"),
        ClusterChoice(slurm=SlurmRequest(), outputs=Path("dev.json")),
    ],
    "spark": [ClusterChoice(spark="spark://head:7077")],
}


def test_the_registry_holds_the_four_engines_once_each():
    assert [engine.name for engine in ENGINES] == ["slurm", "spark", "embedded", "ssh"]


@pytest.mark.parametrize(
    ("name", "choice"), [(name, choice) for name, choices in CHOICES.items() for choice in choices]
)
def test_each_choice_selects_exactly_one_engine(name, choice):
    assert [engine.name for engine in ENGINES if engine.selects(choice)] == [name]
    assert selected(choice).name == name


def test_the_embedded_choice_opens_local_nodes_with_no_dry_run_preview():
    with open_cluster(ClusterChoice(local_nodes=2), Hooks(notice=print)) as cluster:
        assert cluster.engine.name == "embedded"
        assert [node.address for node in cluster.inventory.nodes] == ["127.0.0.2", "127.0.0.3"]
        assert cluster.preview is None


def test_the_spark_choice_opens_with_its_dry_run_preview():
    choice = ClusterChoice(spark="spark://head:7077", local_nodes=2)
    with open_cluster(choice, Hooks(notice=print)) as cluster:
        assert cluster.engine.name == "spark"
        assert cluster.preview is not None
        assert cluster.preview.allocation.startswith("Spark master spark://head:7077: 2 executors")


def test_spark_readiness_waits_for_nothing_before_its_barrier_job():
    choice = ClusterChoice(spark="spark://head:7077", local_nodes=2)
    with open_cluster(choice, Hooks(notice=print)) as cluster:
        plan = LaunchPlan.__new__(LaunchPlan)  # no fields: reading one would raise
        cluster.ready(plan)  # Spark's barrier job does the waiting, not a look at the nodes


def test_ssh_ships_the_runner_package_root_wherever_its_executor_module_lives():
    from runner.engines.ssh.executor import code_files

    shipped = code_files()
    assert "runner/__init__.py" in shipped
    assert "runner/workloads/train.py" in shipped
    assert all(path.startswith(("runner/__init__.py", "runner/workloads/")) for path in shipped)
