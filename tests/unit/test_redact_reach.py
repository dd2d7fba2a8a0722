"""A line read alone is masked where it holds a long secret's end, start or middle
(runner/redact/cuts.py mask_wrapped); the lines no piece can reach are found in the whole text
at once, not read one by one against every piece: a 12.6 MB log with 10 secrets took 7 s, most
of it there (1.8 s now, the note's figures)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtrun.redact import REDACTED, cuts

PIECES = ["Zq8rT2vLx9WmK4pN", "ab12cd34ef56gh78ij90", "Zq8rT2vL-shared-start-0123"]


def _line_by_line(text: str, pieces: list[str]) -> str:
    """mask_wrapped as it read every line against every piece (before the lines were picked)."""
    pieces = [piece for piece in pieces if len(piece) >= cuts.WRAPPED_PIECE_SHORTEST]
    lines = cuts._WRAP_BREAKS.split(text)
    for index, line in enumerate(lines):
        if index % 2:
            continue
        for piece in pieces:
            inner = line.strip()
            if len(inner) >= cuts.WRAPPED_SHORTEST and inner in piece:
                line = line.replace(inner, REDACTED)
                continue
            head, tail = cuts._wrapped_ends(line, piece)
            lead = len(line) - len(line.lstrip())
            end = cuts._body_end(line)
            if tail >= cuts.WRAPPED_SHORTEST and end - tail >= lead + head:
                line = line[: end - tail] + REDACTED + line[end:]
            if head >= cuts.WRAPPED_SHORTEST:
                line = line[:lead] + REDACTED + line[lead + head :]
        lines[index] = line
    return "".join(lines)


def test_an_ordinary_log_s_lines_are_not_read_against_each_piece(monkeypatch):
    def refuse(line: str, piece: str) -> tuple[int, int]:
        raise AssertionError(f"an ordinary line was read against a piece: {line!r}")

    monkeypatch.setattr(cuts, "_wrapped_ends", refuse)
    log = "step 12: loss 0.5123 lr 3.0e-04 tokens/s 12,345.6\n" * 2000
    assert cuts.mask_wrapped(log, PIECES) == log


@pytest.mark.parametrize(
    "text",
    [
        "password begins Zq8rT2vLx9\n  WmK4pN and goes on",  # its start ends a line
        "x\n    2vLx9WmK4pN then more",  # its end starts one, indented
        "dump: ab12cd34ef56\u2026\nnext",  # a quoted line cut short with "…"
        "  cd34ef56gh78  \nrest",  # a line wholly inside it
        "Zq8rT2vL-shared-st\\nart-0123",  # a JSON \\n break
        "Zq8rT2vLZq8rT2vLx9\r\r\nWmK4pN",  # a repeated start, progress-bar redraws
    ],
)
def test_a_cut_piece_is_masked_on_the_lines_it_reaches(text):
    shown = cuts.mask_wrapped(text, PIECES)
    assert REDACTED in shown
    assert shown == _line_by_line(text, PIECES)


_PARTS = st.sampled_from(
    [
        *(piece[start:stop] for piece in PIECES for start in (0, 3, 8) for stop in (9, 12, None)),
        "\n",
        "\r",
        "\\n",
        "\r\n",
        " ",
        "  ",
        "\t",
        "\u2026",
        "step 3 loss 0.5",
        "x",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PARTS, max_size=14))
def test_the_lines_picked_are_masked_as_reading_every_line_masks_them(parts):
    text = "".join(parts)
    assert cuts.mask_wrapped(text, PIECES) == _line_by_line(text, PIECES)
