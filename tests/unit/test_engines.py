"""The engines behind one interface: the registry holds the four, each choice selects one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from dtrun.engines.base import ClusterChoice, Hooks
from dtrun.engines.registry import ENGINES, EngineOptions, open_cluster, selected
from dtrun.errors import UsageError
from dtrun.spec.launchplan import LaunchPlan


def _given(**options: object) -> ClusterChoice:
    return ClusterChoice(EngineOptions(**options))  # type: ignore[arg-type]


CHOICES = {
    "embedded": [ClusterChoice(), ClusterChoice(nodes=3, check=True), _given()],
    "ssh": [_given(hosts="h1:4,h2:4"), _given(stack="dev"), _given(outputs=Path("dev.json"))],
    "slurm": [
        _given(slurm=True),
        _given(slurm=True, partition="gpu", stack="dev"),
        _given(slurm=True, outputs=Path("dev.json")),
    ],
    "spark": [_given(spark="spark://head:7077")],
    "ray": [_given(ray="127.0.0.2:6379")],
}


def test_the_registry_holds_each_engine_once():
    assert [engine.name for engine in ENGINES] == ["slurm", "spark", "ray", "ssh", "embedded"]


@pytest.mark.parametrize(
    ("name", "choice"), [(name, choice) for name, choices in CHOICES.items() for choice in choices]
)
def test_each_choice_selects_the_first_engine_that_claims_it(name, choice):
    assert selected(choice).name == name
    claiming = [engine.name for engine in ENGINES if engine.selects(choice)]
    assert claiming[0] == name and claiming[-1] == "embedded"  # the default claims everything


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"slurm": True, "hosts": "h1"}, "--slurm runs on the nodes Slurm gives, and --hosts"),
        (
            {"spark": "yarn", "stack": "dev"},
            "--spark runs on a Spark master's executors, and --stack",
        ),
        ({"spark": "yarn", "slurm": True}, "and --slurm names other nodes"),
        ({"hosts": "h1", "outputs": Path("o.json")}, "--hosts and --outputs name two clusters"),
    ],
)
def test_engine_options_that_name_two_clusters_are_refused(options, said):
    with pytest.raises(UsageError, match=said):
        EngineOptions(**options).refuse_two_clusters()


def test_each_engine_reads_its_own_options_from_the_choice():
    from dtrun.engines.slurm.options import SlurmOptions
    from dtrun.engines.ssh.options import SshOptions

    choice = _given(outputs=Path("dev.json"), connect_timeout=5.0)
    assert choice.of(SshOptions).stack_name == "dev"
    assert choice.of(SlurmOptions).slurm is False
    assert ClusterChoice().of(SshOptions) == SshOptions()  # nothing given: the defaults
    with pytest.raises(TypeError):
        ClusterChoice(options=SshOptions()).of(SlurmOptions)  # type: ignore[arg-type]


def test_the_embedded_choice_opens_local_nodes_with_no_dry_run_preview():
    with open_cluster(ClusterChoice(nodes=2), Hooks(notice=print)) as cluster:
        assert cluster.engine.name == "embedded"
        assert [node.address for node in cluster.inventory.nodes] == ["127.0.0.2", "127.0.0.3"]
        assert cluster.preview is None


def test_the_spark_choice_opens_with_its_dry_run_preview():
    choice = ClusterChoice(EngineOptions(spark="spark://head:7077"), nodes=2)
    with open_cluster(choice, Hooks(notice=print)) as cluster:
        assert cluster.engine.name == "spark"
        assert cluster.preview is not None
        assert cluster.preview.allocation.startswith("Spark master spark://head:7077: 2 executors")


def test_spark_readiness_waits_for_nothing_before_its_barrier_job():
    choice = ClusterChoice(EngineOptions(spark="spark://head:7077"), nodes=2)
    with open_cluster(choice, Hooks(notice=print)) as cluster:
        plan = LaunchPlan.__new__(LaunchPlan)  # no fields: reading one would raise
        cluster.ready(plan)  # Spark's barrier job does the waiting, not a look at the nodes


def test_ssh_ships_the_runner_package_root_wherever_its_executor_module_lives():
    from dtrun.engines.common.code import code_files
    from dtrun.engines.ssh import remote

    name = remote.__name__.split(".")[0]  # the import name the nodes import the workloads by
    shipped = code_files()
    assert f"{name}/__init__.py" in shipped
    assert f"{name}/workloads/train.py" in shipped
    assert f"{name}/execute/reaper.py" in shipped  # what each node's script runs under
    kept = (f"{name}/__init__.py", f"{name}/workloads/", f"{name}/execute/reaper.py")
    assert all(path.startswith(kept) for path in shipped)


def test_every_engine_options_class_is_among_engine_options_bases():
    """A new engine's options reach bench, run and exec only through EngineOptions' bases."""
    import importlib
    import pkgutil

    import dtrun.engines

    packages = [
        m.name
        for m in pkgutil.iter_modules(dtrun.engines.__path__)
        if m.ispkg and m.name != "common"
    ]
    assert sorted(packages) == sorted(engine.name for engine in ENGINES)
    for name in packages:
        module = importlib.import_module(f"dtrun.engines.{name}.options")
        classes = [
            v
            for v in vars(module).values()
            if isinstance(v, type)
            and v.__module__ == module.__name__
            and v.__name__.endswith("Options")
        ]
        assert classes and all(issubclass(EngineOptions, cls) for cls in classes), name


def test_every_where_option_is_an_engine_option_declared_once():
    from dtrun.cli.options import Where

    names = [field.name for field in fields(Where)]
    assert Where is EngineOptions and len(names) == len(set(names))


def test_choose_hands_the_options_to_the_engines_and_adds_the_command_s_own():
    from dtrun.cli.options import Where
    from dtrun.cli.session import choose
    from dtrun.cluster.readiness import Patience
    from dtrun.engines.ssh.options import SshOptions

    where = Where(hosts="h1:4", accept_new_host_keys=True, ready_timeout=7.0, connect_timeout=5.0)
    choice = choose(where, 3, check=True)
    assert choice == ClusterChoice(options=where, nodes=3, check=True)  # nothing copied
    assert choice.local_nodes == 3
    assert choice.patience == Patience(5.0, 2.0, 2.0, "--connect-timeout")
    assert choice.of(SshOptions).accept_new_host_keys is True
    assert choose(Where(local_nodes=2), 1).local_nodes == 2
    assert choose(Where(outputs=Path("dev.json")), 1).patience == Patience(900.0)


def test_choose_turns_slurm_and_its_options_into_the_request():
    from dtrun.cli.options import Where
    from dtrun.cli.session import choose
    from dtrun.engines.slurm.options import request_of

    choice = choose(Where(slurm=True, partition="gpu", queue_timeout=60.0), 2, job_name="j")
    request = request_of(choice)
    assert (request.partition, request.queue_timeout_s) == ("gpu", 60.0)
    assert (choice.local_nodes, choice.job_name) == (2, "j")


def test_each_engine_checks_its_own_options_in_its_options_class():
    """The ranges and rules of an engine's options sit in its options class, which the
    commands call through EngineOptions.check (runner/cli/ names none of them)."""
    from dtrun.errors import PlanError, UsageError

    assert all("check" in vars(group) for group in EngineOptions.__bases__)
    refused: dict[str, tuple[Any, type[Exception], str]] = {
        "connect_timeout": (0.0, PlanError, "--connect-timeout must be"),
        "queue_timeout": (float("nan"), PlanError, "--queue-timeout must be"),
        "local_nodes": (0, PlanError, "--local-nodes must be"),
        "partition": ("gpu", UsageError, "--partition shapes a Slurm allocation"),
    }
    for field, (value, error, message) in refused.items():
        with pytest.raises(error, match=message):
            EngineOptions(**{field: value}).check()
    with pytest.raises(UsageError, match="--drain-failing shapes a Slurm allocation"):
        EngineOptions(drain_failing=True).check()
    EngineOptions(slurm=True, drain_failing=True).check()
