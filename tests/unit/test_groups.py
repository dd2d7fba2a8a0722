"""Option groups: a dataclass of typer options spread into a command, handed back as one value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from runner.cli.groups import grouped


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
