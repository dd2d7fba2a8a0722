"""What dtrun prints reaches a terminal as text, whatever the values in it hold.

A run id, a node's name, a program's output or an error quoting a record can hold rich markup
(``[/bold]``, ``[link=...]``) and control characters (ESC sequences that set a window's title or
clear the screen). dtrun's consoles read no markup (rich's ``markup=False``: a string is printed
as it is; styles come from Text objects, ``styled``), and every control character but the line
breaks and tabs of the layout is written as its escape (``\\x1b``), both in the text before
rich lays it out and in every segment rich renders, so a Text made elsewhere is held to it too.
rich's own styles are not text: the console adds them after this, from the segments' styles.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dtrun.spec.text import BIDI, SURROGATES, escaped, one_line

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# runner/spec/text.py's CONTROL (bidirectional controls too) but the layout's \n and \t; and
# lone surrogates (a record's "\ud800", a byte that was not UTF-8): stdout cannot encode them.
SHOWN_AS_ESCAPES = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{BIDI}{SURROGATES}]")


def printable(text: str, *, tabs: bool = True) -> str:
    """``text`` with every control character but \\n and \\t written as its escape; and its
    tabs too without ``tabs`` (a table cell: rich measures a tab as one cell, then expands it)."""
    shown = SHOWN_AS_ESCAPES.sub(lambda m: escaped(m.group(0)), text)
    return shown if tabs else shown.replace("\t", "\\t")


def styled(*parts: str | tuple[str, str], layout: bool = False) -> Text:
    """One line of text from plain strings and (text, style) pairs; no part is read as markup,
    and a line break in a part (a value it quotes: a node's name from a result file, a path)
    is written as its escape (``\\n``), so no value prints a line of its own. With ``layout``
    their line breaks and tabs are kept (an error's message: runner/errors.py Lines; a node's
    output line, its tabs expanded)."""
    from rich.text import Text

    shown = printable if layout else one_line
    return Text.assemble(*((shown(p), "") if isinstance(p, str) else (shown(p[0]), p[1])
                           for p in parts))  # fmt: skip


@functools.cache
def inert_console_class() -> type[Console]:
    """A rich Console that reads no markup and writes no control character it was given."""
    from rich.console import Console
    from rich.segment import Segment

    class InertConsole(Console):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(markup=False, emoji=False, **kwargs)

        def render_str(self, text: str, **kwargs: Any) -> Text:
            # Before the layout, so that a table measures the escapes it shows.
            return super().render_str(printable(text), **kwargs)

        def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
            for segment in super().render(renderable, options):
                text, style, control = segment
                if control is None and SHOWN_AS_ESCAPES.search(text):
                    yield Segment(printable(text), style)
                else:  # rich's own cursor moves (live displays) are not text
                    yield segment

    return InertConsole
