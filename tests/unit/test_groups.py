"""Option groups: a dataclass of typer options spread into a command, handed back as one value."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as _fields
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from dtrun.cli.groups import by_name, grouped
from dtrun.cli.options import Launching
from dtrun.cli.sweep_options import SweepOptions
from dtrun.cli.workload_options import (
    ALLREDUCE_NAMES_OF,
    GATE_NAMES_OF,
    STRATEGY_NAMES_OF,
    AllreduceOptions,
    GateOptions,
    StrategyOptions,
)
from dtrun.spec.request import (
    AllreduceSpec,
    BenchSpec,
    HealthGate,
    LauncherOptions,
    StrategySpec,
)


@dataclass(frozen=True)
class Colour:
    red: Annotated[int, typer.Option(help="Red.")] = 1
    name: Annotated[str, typer.Option("--name", "-n", help="A name.")] = "x"


def test_every_field_is_an_option_and_the_command_gets_one_object():
    seen: list[object] = []
    app = typer.Typer()

    @app.command()
    @grouped
    def paint(colour: Colour, times: Annotated[int, typer.Option()] = 2) -> None:
        seen.append((colour, times))

    @app.command()
    def other() -> None:
        pass

    result = CliRunner().invoke(app, ["paint", "--red", "7", "-n", "sky"])
    assert result.exit_code == 0, result.output
    assert seen == [(Colour(7, "sky"), 2)]
    help_text = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["paint", "--help"]).output
    assert "--red" in help_text and "--name" in help_text and "--times" in help_text


@dataclass(frozen=True)
class Shade:
    red: Annotated[int, typer.Option()] = 0


def test_two_groups_that_share_a_field_name_are_refused():
    def paint(colour: Colour, shade: Shade) -> None:
        pass

    with pytest.raises(TypeError, match="two option groups share a field name"):
        grouped(paint)


# --- option groups into specs, by field name (issue 28: each option declared once) ----------


@pytest.mark.parametrize(
    ("group", "spec", "named"),
    [
        (StrategyOptions, StrategySpec, STRATEGY_NAMES_OF),
        (AllreduceOptions, AllreduceSpec, ALLREDUCE_NAMES_OF),
        (GateOptions, HealthGate, GATE_NAMES_OF),
        (Launching, LauncherOptions, {}),
    ],
    ids=["strategy", "allreduce", "gate", "launcher"],
)
def test_every_field_of_a_group_s_spec_comes_from_an_option_of_the_group(group, spec, named):
    options = {field.name for field in _fields(group)}
    taken = {named.get(field.name, field.name) for field in _fields(spec)}
    assert taken <= options, f"spec fields no option fills: {taken - options}"


def test_every_sweep_option_reaches_the_bench_spec_under_its_own_name_or_says_why():
    # parsed before they are placed (nodes -> node_counts; max_launches -> repeat with
    # --until-decided) or choosing the run (resume, rerun) and approving it (yes)
    elsewhere = {"nodes", "timeout", "resume", "rerun", "max_launches", "yes"}
    spec = {field.name for field in _fields(BenchSpec)}
    options = {field.name for field in _fields(SweepOptions)}
    assert options - elsewhere <= spec, f"sweep options with no BenchSpec field: {options - spec}"
    sweep = SweepOptions(steps=37, warmup=3, repeat=4, timeout=12.5, project_tokens=7)
    placed = by_name(sweep, BenchSpec, timeout_s="timeout")
    assert (placed["steps"], placed["warmup"], placed["repeat"]) == (37, 3, 4)
    assert (placed["timeout_s"], placed["project_tokens"]) == (12.5, 7)
