"""A slow console never slows the program: the threads reading the nodes' pipes hand their
lines to the echo and go back to reading (runner/cli/echoing.py)."""

from __future__ import annotations

import io
import re
import threading

from rich.console import Console

from dtrun.cli.common import node_lines_shown, queue_node_line, release_node_lines
from dtrun.cli.display import SweepDisplay
from dtrun.cli.echoing import BACKLOG, Echo, skipped_note
from dtrun.spec.request import BenchSpec
from tests.plans import sweep_plan


class _StalledFile(io.StringIO):
    """A console's file that takes nothing until ``opened`` is set (a terminal scrolled back,
    a pager stopped, a slow link)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = threading.Event()

    def write(self, text: str) -> int:
        self.opened.wait()
        return super().write(text)


def test_a_stalled_console_never_blocks_the_reader_and_says_what_it_skipped(fixed_inventory):
    out = _StalledFile()
    console = Console(file=out, force_terminal=False, width=120)
    spec = BenchSpec("echo", node_counts=(1,), steps=4, warmup=1)
    display = SweepDisplay(console, sweep_plan(fixed_inventory, spec), quiet=False)
    printed = BACKLOG * 3

    def reader() -> None:  # as an engine's pipe-reading thread calls it, line by line
        for step in range(printed):
            display.on_line("node-1", f"step {step} loss 0.5")

    reading = threading.Thread(target=reader, daemon=True)
    reading.start()
    try:
        reading.join(timeout=60)
        # every line handed over while the console took none
        assert not reading.is_alive()
    finally:
        out.opened.set()
    reading.join()
    node_lines_shown()
    shown = -1  # the last step shown; each note counts the steps between two shown
    skipped = 0
    for line in out.getvalue().splitlines():
        step = re.fullmatch(r"\[node-1\] step (\d+) loss 0\.5", line)
        if step is None:
            assert skipped == 0  # one note for each run of skipped lines
            count = re.search(r"dtrun: ([\d,]+) lines? of node-1 not shown", line)
            skipped = int(count[1].replace(",", "")) if count else -1
            assert line == f"[node-1] {skipped_note('node-1', skipped)}"
            continue
        assert int(step[1]) == shown + 1 + skipped  # in order, and the note says how many
        shown, skipped = int(step[1]), 0
    assert shown + 1 + skipped == printed
    assert shown < printed - 1  # the console fell behind: lines were skipped


def test_the_note_comes_before_the_next_line_shown_of_that_node():
    shown: list[tuple[str, str]] = []
    taken, opened = threading.Event(), threading.Event()

    def show(node: str, line: str) -> None:
        taken.set()
        opened.wait()
        shown.append((node, line))

    echo = Echo(backlog=3)
    echo.put(show, "node-0", "a")
    taken.wait()  # "a" on its way to the console, which takes nothing more
    for line in ("b", "c", "d", "e", "f"):  # three wait; two are skipped
        echo.put(show, "node-0", line)
    echo.put(show, "node-1", "x")  # skipped too: the backlog is all nodes'
    opened.set()
    assert echo.drain()
    echo.put(show, "node-0", "g")  # no second note
    assert echo.drain()
    assert shown == [
        ("node-0", "a"), ("node-0", "b"), ("node-0", "c"), ("node-0", "d"),
        # a drain (a launch's end) says what each node skipped, before what comes next
        ("node-0", skipped_note("node-0", 2)), ("node-1", skipped_note("node-1", 1)),
        ("node-0", "g"),
    ]  # fmt: skip


def test_the_end_of_a_command_shows_every_line_waiting():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    for step in range(50):
        queue_node_line(console, "node-2", f"step {step}")
    release_node_lines()
    assert out.getvalue().splitlines() == [f"[node-2] step {step}" for step in range(50)]


def test_the_note_says_one_line_or_many():
    assert skipped_note("node-0", 1) == (
        "dtrun: 1 line of node-0 not shown (the console fell behind): its log keeps them"
    )
    assert skipped_note("gpu017", 12345).startswith("dtrun: 12,345 lines of gpu017 not shown")
