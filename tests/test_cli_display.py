"""What people see while long phases run."""

from __future__ import annotations

import io

from rich.console import Console

from runner.cli.display import RegistryBar


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=120), out


def test_the_registry_bar_follows_nodes_until_all_are_ready():
    console, out = _console()
    with RegistryBar(console) as bar:
        bar(0, 0, 3, 0.0)
        bar(2, 1, 3, 10.0)
        bar(3, 3, 3, 20.0)
        assert bar.progress is None  # stopped as soon as every node was ready
    text = out.getvalue()
    assert "nodes ready (3 of 3 registered)" in text and "3/3" in text


def test_the_registry_bar_stays_silent_when_every_node_is_ready_at_once():
    console, out = _console()
    with RegistryBar(console) as bar:
        bar(2, 2, 2, 0.0)
    assert out.getvalue() == ""


def test_the_registry_bar_stops_when_the_wait_fails():
    console, out = _console()
    bar = RegistryBar(console)
    with bar:
        bar(1, 0, 2, 0.0)
        assert bar.progress is not None
    assert bar.progress is None
    assert "nodes ready (1 of 2 registered)" in out.getvalue()
