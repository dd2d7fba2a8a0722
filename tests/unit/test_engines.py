"""The engines behind one interface: the registry holds the four, each choice selects one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from runner.engines.base import ClusterChoice, Hooks
from runner.engines.registry import ENGINES, open_cluster, selected
from runner.spec.launchplan import LaunchPlan
from runner.spec.slurmrequest import SlurmRequest

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
    from runner.engines.ssh.remote import code_files

    shipped = code_files()
    assert "runner/__init__.py" in shipped
    assert "runner/workloads/train.py" in shipped
    assert all(path.startswith(("runner/__init__.py", "runner/workloads/")) for path in shipped)


# Where's options that shape --slurm's request (SlurmRequest) rather than the choice itself.
SLURM_SHAPING = {"partition", "account", "qos", "time", "constraint", "exclude", "nodelist"}


def test_every_where_option_reaches_the_cluster_choice_by_its_own_name():
    from runner.cli.options import Where
    from runner.cli.session import DERIVED

    carried = {field.name for field in fields(Where)} - DERIVED - SLURM_SHAPING - {"queue_timeout"}
    assert carried <= {field.name for field in fields(ClusterChoice)}


def test_choose_copies_where_s_options_into_the_choice():
    from runner.cli.options import Where
    from runner.cli.session import choose

    where = Where(hosts="h1:4", accept_new_host_keys=True, ready_timeout=7.0, connect_timeout=5.0)
    assert choose(where, 3, check=True) == ClusterChoice(
        hosts="h1:4",
        local_nodes=3,
        accept_new_host_keys=True,
        check=True,
        ready_timeout=7.0,
        connect_timeout=5.0,
    )
    assert choose(Where(spark="spark://head:7077", local_nodes=2), 1).spark == "spark://head:7077"
    assert choose(Where(outputs=Path("dev.json")), 1).stack_name == "dev"


def test_choose_turns_slurm_and_its_options_into_the_request():
    from runner.cli.options import Where
    from runner.cli.session import choose

    choice = choose(Where(slurm=True, partition="gpu", queue_timeout=60.0), 2, job_name="j")
    assert choice.slurm is not None
    assert (choice.slurm.partition, choice.slurm.queue_timeout_s) == ("gpu", 60.0)
    assert (choice.local_nodes, choice.job_name) == (2, "j")
