"""report.html's body from report.md: Markdown rendered by markdown-it-py, the method text folded
into <details> between marker paragraphs, every table in a box of its own that scrolls sideways."""

from __future__ import annotations

import base64
import functools
import re
from typing import TYPE_CHECKING

from dtrun.render import verbatim

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

# report.md.j2 renders its method text (templates/report_method.md.j2) for the HTML between
# these marker paragraphs, which report_html_body turns into <details>; in report.md the text
# is one line naming its section of docs/report.md. Private-use characters: no figure or name
# the report shows holds them (runner/render.py removes them from every value it places), and
# any left are removed before the HTML is written.
_MARK = "\ue000"


METHOD_MARKERS = {
    "details_open": verbatim(f"{_MARK}details{_MARK}"),
    "details_close": verbatim(f"{_MARK}end{_MARK}"),
}


_DETAILS_OPEN = re.compile(f"<p>{_MARK}details{_MARK} (.*?)</p>")


_DETAILS_CLOSE = f"<p>{_MARK}end{_MARK}</p>"


def report_html_body(markdown: str) -> str:
    """The HTML report's body: method text collapsed into <details>, every table in a box of
    its own that scrolls sideways (so a wide table never widens the page)."""
    html = markdown_to_html(markdown)
    html = _DETAILS_OPEN.sub(r"<details>\n<summary>\1</summary>", html)
    html = html.replace(_DETAILS_CLOSE, "</details>").replace(_MARK, "")
    return html.replace("<table>", '<div class="table">\n<table>').replace(
        "</table>", "</table>\n</div>"
    )


def markdown_to_html(text: str) -> str:
    """CommonMark with tables; raw HTML in the text is escaped, not passed through."""
    html: str = markdown_parser().render(text)
    return html


@functools.cache
def markdown_parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
