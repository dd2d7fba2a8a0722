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
