"""Checks that what dtrun wrote shows data as text: the console, report.md (parsed by a real
CommonMark parser, markdown-it-py) and report.html (parsed by the standard library's
html.parser). Each hostile value starts with a sentinel (``⟦7⟧``, no letter: case changes leave
it) and its checked part follows it; wherever a sentinel is found, the checked part must follow
it whole, as text, or something read part of it as markup."""

from __future__ import annotations

import re
from collections.abc import Mapping
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from markdown_it.token import Token

# CommonMark with GFM's tables, raw HTML on: HTML in the text would show as html_* tokens
PARSER = MarkdownIt("commonmark").enable("table")
PLOTS = frozenset({"throughput.png", "efficiency.png", "busbw.png"})
# C0 but the layout's line break (and tabs, which rich expands), DEL, C1, and the bidirectional
# controls that reorder a shown line (runner/spec/text.py's BIDI)
RAW_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f" r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_SENTINEL = re.compile(r"⟦\d+⟧")


Expected = Mapping[str, tuple[str, bool]]  # sentinel -> (checked part, before the sentinel)


def followed(pieces: list[str], expected: Expected, where: str) -> list[str]:
    """Each place a sentinel is found in ``pieces`` where its checked part is not whole beside
    it (after it, or before it)."""
    problems = []
    for piece in pieces:
        for found in _SENTINEL.finditer(piece):
            if found.group(0) not in expected:
                continue
            want, before = expected[found.group(0)]
            if before:
                got = piece[max(0, found.start() - len(want) - 10) : found.start()]
                ok = piece.endswith(want, 0, found.start())
            else:
                got = piece[found.end() : found.end() + len(want) + 10]
                ok = piece.startswith(want, found.end())
            if not ok:
                problems.append(f"{where}: {found.group(0)} shows {got!r}, not {want!r}")
    return problems


def console_problems(output: str, expected: Expected) -> list[str]:
    """A console's output (no terminal: rich writes no escape sequence of its own)."""
    problems = [f"console: raw {c!r}" for c in sorted(set(RAW_CONTROL.findall(output)))]
    return problems + followed(output.split("\n"), expected, "console")


def markdown_problems(text: str, expected: Expected) -> list[str]:
    """report.md: no link, raw HTML, hard break or image but the plots; no heading holding a
    value; every value's text whole in a text node or code span."""
    problems = [f"report.md: raw {c!r}" for c in sorted(set(RAW_CONTROL.findall(text)))]
    pieces: list[str] = []
    heading = False
    for token in PARSER.parse(text):
        if token.type == "html_block":
            problems.append(f"report.md: raw HTML block {token.content[:60]!r}")
        elif token.type in ("fence", "code_block"):
            pieces.append(token.content)
        elif token.type == "heading_open":
            heading = True
        elif token.type == "inline":
            inline = _inline_text(token.children or [], problems)
            if heading and _SENTINEL.search(inline):
                problems.append(f"report.md: a heading made of a value: {inline[:60]!r}")
            heading = False
            pieces.append(inline)
    return problems + followed(pieces, expected, "report.md")


_EMPHASIS = frozenset({"strong_open", "strong_close", "em_open", "em_close"})  # the template's


def _inline_text(children: list[Token], problems: list[str]) -> str:
    """An inline token's text and code spans, joined; anything else it made, in ``problems``."""
    inline = ""
    for child in children:
        if child.type in ("text", "code_inline"):
            inline += child.content
        elif child.type == "softbreak":
            inline += "\n"
        elif child.type == "image" and child.attrs.get("src") in PLOTS:
            continue
        elif child.type not in _EMPHASIS:
            problems.append(f"report.md: {child.type} {child.content[:60]!r}")
    return inline


# What report.html's template and the report's Markdown make; inline ones join their text.
_ALLOWED = frozenset(
    ("html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "strong", "em",
     "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "div", "details", "summary",
     "code", "pre", "img")
)  # fmt: skip
_INLINE = frozenset({"strong", "em", "code"})


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.text = ""
        self.summary = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _ALLOWED:
            self.problems.append(f"report.html: a <{tag}> element")
        if tag == "img":
            src = dict(attrs).get("src") or ""
            if not src.startswith("data:image/png;base64,"):
                self.problems.append(f"report.html: an image from {src[:60]!r}")
        self.summary = tag == "summary"
        if tag not in _INLINE:
            self.text += "\n"

    def handle_endtag(self, tag: str) -> None:
        if tag not in _INLINE:
            self.text += "\n"

    def handle_data(self, data: str) -> None:
        if self.summary and _SENTINEL.search(data):
            self.problems.append(f"report.html: a <details> made of a value: {data[:60]!r}")
        self.text += data


def html_problems(page: str, expected: Expected) -> list[str]:
    """report.html: only the elements the report makes, images inline, values as text."""
    parser = _Page()
    parser.feed(page)
    parser.close()
    raw = [f"report.html: raw {c!r}" for c in sorted(set(RAW_CONTROL.findall(page)))]
    pieces = parser.text.split("\n")
    return raw + parser.problems + followed(pieces, expected, "report.html")
