"""Where each engine is named outside its own package (issue 39): the registry, and the few
modules that read a recorded fact the engine set; never runner/cli/ or runner/plan/, which ask
the ``Engine`` interface what an engine can do (docs/engines.md).

A module names an engine when it imports the engine's package or compares a value with the
engine's name (``engine.name == "spark"``, ``source == "embedded"``). Help text and docstrings
that speak of Slurm or Spark to the user do not count: they name the option, not the code."""

from __future__ import annotations

import ast
from pathlib import Path

from dtrun.engines.registry import ENGINES
from tests.paths import REPO

RUNNER = REPO / "runner"

# What each engine is named by outside runner/engines/<name>/, and why.
EXPECTED = {
    "embedded": {
        "runner/engines/registry.py",  # the one list
        # a recorded run's inventory source: the report's cost, prediction and reproduce lines,
        # and the machine sample taken when the nodes share this machine
        "runner/report/cost.py",
        "runner/report/predicted.py",
        "runner/report/reproduce.py",
        "runner/sweep/run.py",
    },
    "ssh": {"runner/engines/registry.py"},
    # cluster/outputs.py: a stack's `dtrun:scheduler` setting, which may be "slurm"
    "slurm": {"runner/engines/registry.py", "runner/cluster/outputs.py"},
    "spark": {"runner/engines/registry.py"},
}


def names(path: Path, engine: str) -> bool:
    package = f"dtrun.engines.{engine}"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported = [node.module or ""]
        else:
            imported = []
        if any(name == package or name.startswith(f"{package}.") for name in imported):
            return True
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(side, ast.Constant) and side.value == engine for side in sides):
                return True
    return False


def naming(engine: str) -> set[str]:
    own = RUNNER / "engines" / engine
    return {
        path.relative_to(REPO).as_posix()
        for path in sorted(RUNNER.rglob("*.py"))
        if "infra" not in path.relative_to(RUNNER).parts[:1]
        and own not in path.parents
        and names(path, engine)
    }


def test_each_engine_is_named_outside_its_package_only_where_listed():
    assert {engine.name for engine in ENGINES} == set(EXPECTED)
    assert {engine.name: naming(engine.name) for engine in ENGINES} == EXPECTED


def test_the_commands_and_the_planner_name_no_engine():
    named = {
        f"{path} names {engine.name}"
        for engine in ENGINES
        for path in naming(engine.name)
        if path.startswith(("runner/cli/", "runner/plan/"))
    }
    assert named == set()


def test_the_rule_sees_an_import_and_a_comparison(tmp_path):
    """The check can fail: a module that imports an engine or compares with its name is seen."""
    imports = tmp_path / "imports.py"
    imports.write_text("from dtrun.engines.slurm.executor import SlurmExecutor\n")
    compares = tmp_path / "compares.py"
    compares.write_text('def f(engine):\n    return engine.name != "spark"\n')
    speaks = tmp_path / "speaks.py"
    speaks.write_text('"""Runs on Spark."""\nHELP = "--spark MASTER: run on spark"\n')
    assert names(imports, "slurm") and names(compares, "spark")
    assert not names(speaks, "spark") and not names(imports, "spark")
