"""Console tables that fit the terminal without cutting a number or a name.

Each column has a priority. At the console's width, the lowest-priority columns are left out
until the rest fit with every cell whole (rich measures them); a line under the table names what
was left out and how to see it. A number column's cells never wrap; a wrapping column's cells
and every header break between words only. ``--wide`` keeps every column at its full width and
lets the terminal wrap the lines. A folding column (an error's text) breaks a word longer than
it has room for, an algorithm list or a long path, rather than being left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dtrun.spec.text import one_line

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod
    from rich.table import Table
    from rich.text import Text

# rich's default cell padding, (0, 1): one space each side
_PADDING = 2
# a cell measured for its full width: wider than any terminal, so nothing caps the measurement
_UNBOUNDED = 10_000
# the least width a folding column asks for: its longer words break across lines
FOLD_WIDTH = 24
WIDE_HINT = "--wide shows every column (the terminal wraps), --json every figure"


@dataclass(frozen=True)
class Column:
    """A column: its header, how long it stays as the width shrinks (the highest last),
    whether its cells may wrap between words (names, phrases) or never (numbers), and the
    columns it goes with."""

    header: str
    priority: int
    justify: JustifyMethod = "right"
    wrap: bool = False
    pair: str | None = None  # columns read side by side (A and B): left out together
    fold: bool = False  # wrapping, and a word longer than its width breaks (an error's text)


@dataclass(frozen=True)
class Grid:
    """A table's content before it meets a width: rows of plain strings (or styled Text)."""

    columns: tuple[Column, ...]
    rows: Sequence[Sequence[str | Text]] = ()
    title: str | None = None
    caption: str | None = None
    hint: str = WIDE_HINT
    min_columns: int = 1  # the columns never left out, however narrow the terminal


@dataclass(frozen=True)
class Fitted:
    """A grid laid out for one width: the table, the columns left out, the width it needs."""

    table: Table
    dropped: tuple[str, ...] = ()
    width: int = 0
    kept: tuple[int, ...] = ()


def _text(cell: str | Text, no_wrap: bool, fold: bool = False) -> Text:
    from rich.text import Text

    from dtrun.redact import redact_text
    from dtrun.spec.text import one_line

    # plain text on one line, its control characters and line breaks as escapes: a value (a
    # node's name from a result file) makes no line of its own; measured as shown; redacted
    # before the layout, which would cut a secret across lines and pad it with borders
    text = Text(one_line(redact_text(cell))) if isinstance(cell, str) else cell.copy()
    text.no_wrap = no_wrap
    if fold:
        text.overflow = "fold"
    return text


def _measure(console: Console, grid: Grid) -> list[tuple[int, int]]:
    """Each column's (need, natural) width with padding: the least that keeps every cell and
    header word whole, and the width that puts every cell on one line."""
    from rich.measure import Measurement

    options = console.options.update_width(_UNBOUNDED)
    sizes = []
    for index, column in enumerate(grid.columns):
        head = Measurement.get(console, options, _text(column.header, False))
        body = [Measurement.get(console, options, _text(row[index], False)) for row in grid.rows]
        natural = max([head.maximum, *(cell.maximum for cell in body)])
        need = max(
            [head.minimum, *(cell.minimum if column.wrap else cell.maximum for cell in body)]
        )
        if column.fold:  # its longer words break rather than the column going
            need = min(need, max(head.minimum, FOLD_WIDTH))
        sizes.append((need + _PADDING, natural + _PADDING))
    return sizes


def fit(console: Console, grid: Grid, *, wide: bool = False) -> Fitted:
    """The grid as a table for ``console.width``: the lowest-priority columns left out until
    the others' cells fit whole, and the room left given to the highest-priority columns first.
    ``wide`` keeps every column at its full width; ``Fitted.width`` passes the console's then, or
    where a word is wider than the terminal, and the terminal wraps the table's lines."""
    sizes = _measure(console, grid)
    kept = list(range(len(grid.columns)))
    if wide:
        widths = {index: sizes[index][1] for index in kept}
    else:
        # the table's borders: one rule between columns and one at each edge
        while (
            len(kept) > grid.min_columns
            and sum(sizes[i][0] for i in kept) + len(kept) + 1 > console.width
        ):
            last = grid.columns[min(reversed(kept), key=lambda i: grid.columns[i].priority)]
            kept = [i for i in kept if not _together(grid.columns[i], last)]
        widths = {index: sizes[index][0] for index in kept}
        # Still too wide (a word longer than the terminal): whole, and the terminal wraps.
        room = max(0, console.width - sum(widths.values()) - len(kept) - 1)
        for index in sorted(kept, key=lambda i: -grid.columns[i].priority):
            grow = max(0, min(room, sizes[index][1] - widths[index]))
            widths[index] += grow
            room -= grow
    table = _table(grid, kept, widths)
    dropped = tuple(grid.columns[i].header for i in range(len(grid.columns)) if i not in kept)
    return Fitted(table, dropped, sum(widths.values()) + len(kept) + 1, tuple(kept))


def _together(column: Column, other: Column) -> bool:
    return column is other or (column.pair is not None and column.pair == other.pair)


def _table(grid: Grid, kept: list[int], widths: dict[int, int]) -> Table:
    from rich.table import Table

    table = Table()
    for index in kept:
        column = grid.columns[index]
        table.add_column(
            _text(column.header, False), justify=column.justify, width=widths[index] - _PADDING
        )
    for row in grid.rows:
        table.add_row(
            *(_text(row[i], not grid.columns[i].wrap, grid.columns[i].fold) for i in kept)
        )
    return table


def print_grid(out: Console, grid: Grid, *, wide: bool = False) -> Fitted:
    """Print the grid's title, its table fitted to ``out`` (or whole with ``wide``), its
    caption, and a line naming the columns left out and how to see them."""
    from dtrun.cli.inert import inert_console_class

    fitted = fit(out, grid, wide=wide)
    if grid.title:  # one line: it names what the user gave (--from's file, a run's id)
        out.print(one_line(grid.title), markup=False, highlight=False)
    if fitted.width > out.width:
        # as wide as the table: the terminal wraps its lines instead of rich cutting its cells
        whole = inert_console_class()(file=out.file, width=fitted.width, highlight=False,
                        force_terminal=out.is_terminal,
                        color_system="auto" if out.color_system else None)  # fmt: skip
        whole.print(fitted.table)
    else:
        out.print(fitted.table)
    if grid.caption:
        out.print(grid.caption, markup=False, highlight=False)
    if fitted.dropped:
        out.print(
            f"left out to fit {out.width} columns: {', '.join(fitted.dropped)}; {grid.hint}",
            markup=False,
            highlight=False,
        )
    return fitted
