"""A progress bar redrawn in place ("\r" and no "\n", as tqdm draws the HF Trainer's and
Lightning's bars): each state is a line of its own, the console shows one every
PROGRESS_EVERY_S and the bar's last state, and the log keeps every byte
(runner/engines/common/scripts.py segments, runner/cli/common.py print_node_line)."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from dtrun.cli import common
from dtrun.cli.common import PROGRESS_EVERY_S, print_node_line
from dtrun.cli.inert import inert_console_class
from dtrun.engines.common.scripts import line_text, segments

# tqdm writes "\r" before each state and "\n" when the bar closes
BAR = b"\r  0%|  | 0/3\r 33%|# | 1/3\r 67%|##| 2/3\r100%|##| 3/3\ndone\r\nno end"


class Reads(io.BytesIO):
    """A pipe that gives at most ``sizes[i]`` bytes on its i-th read."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        super().__init__(data)
        self.sizes = sizes

    def read1(self, size: int | None = -1, /) -> bytes:
        size = 1 << 20 if size is None or size < 0 else size
        return super().read1(min(size, self.sizes.pop(0)) if self.sizes else size)


def test_a_bar_s_states_are_lines_and_a_crlf_is_one_line_end():
    assert list(segments(Reads(BAR, []))) == [
        b"\r", b"  0%|  | 0/3\r", b" 33%|# | 1/3\r", b" 67%|##| 2/3\r", b"100%|##| 3/3\n",
        b"done\r\n", b"no end",
    ]  # fmt: skip
    shown = [line_text(part.decode()) for part in segments(Reads(BAR, []))]
    assert shown[1] == "  0%|  | 0/3\r" and shown[4:] == ["100%|##| 3/3", "done", "no end"]


@given(st.binary(max_size=200), st.lists(st.integers(1, 7), max_size=80))
def test_the_segments_are_the_stream_byte_for_byte_however_it_is_read(data, sizes):
    data = data + BAR  # the bar, cut wherever the reads fall
    parts = list(segments(Reads(data, sizes)))
    assert b"".join(parts) == data
    assert all(part for part in parts)
    # each ends at its first line end: "\n", or a "\r" not followed by "\n"
    for part in parts[:-1]:
        assert part.endswith((b"\n", b"\r"))
        body = part.removesuffix(b"\r\n").removesuffix(b"\n").removesuffix(b"\r")
        assert b"\n" not in body and b"\r" not in body


def _console(out: io.StringIO):
    return inert_console_class()(file=out, force_terminal=True, color_system="truecolor")


def test_the_console_shows_a_state_every_few_seconds_and_the_last_always(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    monkeypatch.setattr(common, "_progress_shown", {})
    out = io.StringIO()
    for second, state in enumerate(["first 0/30\r", "second 1/30\r", "third 2/30\r"]):
        now[0] = 100.0 + second
        print_node_line(_console(out), "node-0", state)
    now[0] = 100.0 + PROGRESS_EVERY_S
    print_node_line(_console(out), "node-0", "due 12/30\r")
    print_node_line(_console(out), "node-1", "other 1/30\r")  # each node its own clock
    print_node_line(_console(out), "node-0", "last 30/30")  # the bar's end: its own line
    print_node_line(_console(out), "node-0", "\r")  # tqdm's clearing write: nothing to show
    shown = out.getvalue()
    assert [
        word for word in ("first", "second", "third", "due", "other", "last") if word in shown
    ] == ["first", "due", "other", "last"]
    assert "\\r" not in shown and "\r" not in shown


def test_a_line_holding_every_state_shows_the_last_as_a_terminal_would():
    # engines that read whole lines (Slurm's srun --label, Spark, Ray) pass the bar as one line
    out = io.StringIO()
    print_node_line(_console(out), "node-0", "\r  0%| 0/3\r 33%| 1/3\r100%| 3/3   ")
    shown = out.getvalue()
    assert "100%| 3/3" in shown and "0/3" not in shown and "\\r" not in shown


def test_a_command_s_answer_holds_a_bar_s_states_and_no_empty_line_for_its_lone_cr():
    from dtrun.engines.embedded.executor import LocalExecutor

    (answer,) = (
        LocalExecutor().command({"node-0": "printf '\\r 50%%\\r100%%\\n\\nend\\n'"}).values()
    )
    assert answer.exit_code == 0
    assert answer.output.splitlines() == [" 50%", "100%", "", "end"]  # a real empty line stays


def test_a_line_without_an_end_is_passed_on_in_pieces_not_held_whole():
    """A program that writes without a line end (a binary blob to stdout) was held whole in
    dtrun's memory, however large, until its first line end or its exit."""
    mib = 1 << 20
    data = b"x" * (4 * mib + 100) + b"\nend"
    parts = list(segments(io.BytesIO(data)))
    assert b"".join(parts) == data
    assert max(map(len, parts)) <= 2 * mib  # LONGEST_LINE and a read at most
    assert parts[-2].endswith(b"x\n") and parts[-1] == b"end"
