"""The README and the docs say what the code does: the defaults the quickstart quotes, the
strategies `--help` offers, what `--drain-failing` does to the sweep."""

from __future__ import annotations

import re

import typer
from typer.core import TyperGroup, TyperOption

from dtrun.cli.app import app
from dtrun.cli.sweep_options import SweepOptions, launches_of
from dtrun.engines.embedded.engine import EmbeddedEngine
from dtrun.plan.strategies import STRATEGIES
from dtrun.spec.request import BenchSpec
from tests.paths import REPO

ROOT = REPO


def _help(command: str, option: str) -> str:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    (param,) = [p for p in group.commands[command].params if option in p.opts]
    assert isinstance(param, TyperOption) and param.help is not None
    return " ".join(param.help.split())


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_quickstart_quotes_the_default_sweep():
    readme = _words((ROOT / "README.md").read_text())
    said = re.search(r"a (\d+)- and (\d+)-node sweep .*?\(launches of (\d+) steps at each node "
                     r"count until .*? decides, .*?at most (\d+);", readme)  # fmt: skip
    assert said, "the quickstart no longer says what the default sweep runs"
    first, second, steps, most = map(int, said.groups())
    spec = BenchSpec("defaults")
    assert (first, second) == spec.node_counts
    # the quickstart runs on the embedded cluster, with its own most launches
    assert (steps, most) == (spec.steps, EmbeddedEngine.max_launches)
    # and the default is that: a sweep of the quickstart's node counts launches until decided
    launches = launches_of(SweepOptions(), spec.node_counts, EmbeddedEngine.max_launches)
    assert launches["until_decided"] is True
    assert launches["max_launches"] == EmbeddedEngine.max_launches


def test_the_strategies_the_docs_list_are_those_bench_help_offers():
    offered = _help("bench", "--strategy").split("How the model trains: ")[1].split(" (")[0]
    assert offered.split(", ") == list(STRATEGIES)
    workloads = (ROOT / "docs" / "workloads.md").read_text()
    table = workloads.split("| strategy | program |")[1].split("\n\n")[0]
    rows = re.findall(r"^\| (`[^|]+`) \|", table, re.MULTILINE)
    listed = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
    assert listed == set(STRATEGIES)
    bench = (ROOT / "docs" / "bench.md").read_text()
    (row,) = [line for line in bench.splitlines() if line.startswith("| `--strategy` |")]
    assert set(re.findall(r"`([a-z0-9]+)`", row.split("|")[3])) == set(STRATEGIES)


def test_drain_failings_help_says_the_sweep_stops_as_the_code_and_docs_do():
    said = _help("bench", "--drain-failing")
    assert "stop the sweep (exit 4)" in said and "leave them out" not in said
    bench = (ROOT / "docs" / "bench.md").read_text()
    assert "stops the sweep (exit 4)" in bench.split("| `--drain-failing` |")[1].split("\n")[0]


def test_the_engines_the_architecture_page_names_are_all_there_are():
    page = _words((ROOT / "docs" / "architecture.md").read_text())
    said = page.split("An **engine** is where the nodes come from")[1].split("(")[0]
    assert "next" not in said  # nothing promised: each works
    for engine in ("embedded cluster", "SSH", "Slurm", "Spark"):
        assert engine in said


def test_every_test_file_the_docs_name_exists():
    named = {
        (doc.name, path)
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for path in re.findall(r"\btests/[\w/]+\.py\b", doc.read_text())
    }
    assert named, "no test file named in the docs: the pattern is wrong"
    assert sorted((doc, path) for doc, path in named if not (ROOT / path).exists()) == []
