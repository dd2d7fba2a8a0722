"""Quiet stops (issue 27): once dtrun stops the nodes, what they print while they go is their
logs' only; the console keeps dtrun's own message. The whole path, a real bench stopped by
each signal, is tests/e2e/test_e2e.py's test_a_signal_stops_every_process_and_keeps_the_record."""

from __future__ import annotations

from rich.console import Console

from dtrun.cli import common


def test_node_lines_reach_the_console_until_the_nodes_are_being_stopped(monkeypatch):
    monkeypatch.setattr(common, "_node_lines_muted", [])
    out = Console(record=True, width=120)
    common.print_node_line(out, "node-0", "step 3: loss 2.1")
    common.mute_node_lines()
    common.print_node_line(out, "node-1", "torch.distributed.elastic...SignalException: 15")
    text = out.export_text()
    assert "[node-0] step 3: loss 2.1" in text
    assert "SignalException" not in text


def test_a_line_too_long_to_echo_is_named_by_its_length_and_not_shown(monkeypatch):
    """Redacting a 200 KB line for the console held the program's pipe for 0.2 s a step."""
    monkeypatch.setattr(common, "_node_lines_muted", [])
    out = Console(record=True, width=120)
    longest = "a" * common.ECHO_LONGEST
    common.print_node_line(out, "node-0", longest)
    common.print_node_line(out, "node-0", "b" * (common.ECHO_LONGEST + 1))
    text = out.export_text()
    assert longest in text
    assert "bb" not in text
    assert f"[node-0] (a line of {common.ECHO_LONGEST + 1:,} characters, not shown" in text
