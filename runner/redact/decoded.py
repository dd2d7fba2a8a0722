"""Text as a reader reads it where some of a secret's characters are written escaped or apart:
colour codes between them (a logger's highlighting), quotes a shell joins (``'ab'"cd"``), and
escapes of JSON (``\\u0041``, ``\\t``, ``\\/``), Python and shells (``\\x41``, ``\\!``), URLs
(``%41``) and HTML (``&#65;``, ``&amp;``) for some of them only. ``decoded`` reads each as the one
character it stands for, quotes and colours as none, and keeps where each came from, so that a
secret found in what it reads is masked in the text as written (runner/redact/__init__.py).
"""

from __future__ import annotations

import bisect
import html
import re
from dataclasses import dataclass

# An escape, a quote or a colour: read as one character, or as none (group "none"). A colour is
# an ANSI CSI sequence, raw or written as an escape (a line dtrun printed, its ESC shown).
_ESCAPE = re.compile(
    r"(?P<none>(?:\x1b|\\x1b|\\u001[bB]|\\033|\\e)\[[0-?]{0,32}[ -/]{0,4}[@-~]|['\"])"
    # a character past U+FFFF as JSON writes it, two UTF-16 halves (\ud83d\ude00)
    r"|(?P<pair>\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|\\u(?P<u>[0-9a-fA-F]{4})|\\U(?P<big>000[0-9a-fA-F]{5}|0010[0-9a-fA-F]{4})"
    r"|\\x(?P<x>[0-9a-fA-F]{2})|%(?P<url>[0-9a-fA-F]{2})"
    r"|(?P<entity>&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|amp|lt|gt|quot|apos);)"
    r"|\\(?P<control>[tnrbfv])"  # JSON's, Python's and $'...' tab, line breaks, ...
    r"|\\(?P<char>[^0-9A-Za-z\s]| )"  # JSON's \/, a shell's \! \$ \\ and \  (printf %q)
)
_QUOTES = frozenset("'\"")
_CONTROLS = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "v": "\v"}


def _character(match: re.Match[str]) -> str:
    hexadecimal = match.group("u") or match.group("big") or match.group("x") or match.group("url")
    if match.group("pair"):
        high, low = (int(half, 16) for half in match.group("pair")[2:].split("\\u"))
        character = chr(0x10000 + (high - 0xD800) * 0x400 + low - 0xDC00)
    elif match.group("control"):
        character = _CONTROLS[match.group("control")]
    elif hexadecimal:
        character = chr(int(hexadecimal, 16))
    elif match.group("entity"):
        character = html.unescape(match.group("entity"))
    else:
        character = match.group("char") or ""
    return "" if character in _QUOTES else character  # an escaped quote is a quote


@dataclass(frozen=True)
class Decoded:
    """``text`` as read, and for each run of it where in the original it starts (``starts``):
    a run of plain characters (``ends`` None), or one character read from an escape that ends
    where ``ends`` says."""

    text: str
    at: tuple[int, ...]  # where each run starts in ``text``
    starts: tuple[int, ...]
    ends: tuple[int | None, ...]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Where ``text[start:end]`` was written in the original."""
        first = bisect.bisect_right(self.at, start) - 1
        last = bisect.bisect_right(self.at, end - 1) - 1
        begin = self.starts[first] + (0 if self.ends[first] is not None else start - self.at[first])
        stop = self.ends[last]
        if stop is None:
            stop = self.starts[last] + end - self.at[last]
        return begin, stop


def readings(piece: str) -> set[str]:
    """A secret's piece as ``mask`` looks for it: as ``decoded`` reads it, and as it is, where
    a backslash and a letter are its own (``C:\\temp`` written as JSON's ``C:\\\\temp``)."""
    return {piece, decoded(piece).text}


def has_escapes(text: str) -> bool:
    return _ESCAPE.search(text) is not None


def decoded(text: str) -> Decoded:
    """``text`` with its escapes read and its quotes and colours taken out."""
    parts: list[str] = []
    at: list[int] = []
    starts: list[int] = []
    ends: list[int | None] = []
    length = plain_from = 0

    def plain(until: int) -> None:
        nonlocal length
        if until > plain_from:
            at.append(length)
            starts.append(plain_from)
            ends.append(None)
            parts.append(text[plain_from:until])
            length += until - plain_from

    for match in _ESCAPE.finditer(text):
        plain(match.start())
        plain_from = match.end()
        character = "" if match.group("none") else _character(match)
        if character:
            at.append(length)
            starts.append(match.start())
            ends.append(match.end())
            parts.append(character)
            length += 1
    plain(len(text))
    return Decoded("".join(parts), tuple(at), tuple(starts), tuple(ends))


def mask(text: str, pieces: tuple[str, ...], mark: str) -> str:
    """``text`` with every place where it reads as one of ``pieces`` (each already read by
    ``decoded``) replaced by ``mark``, from the first character written to the last."""
    if not pieces or not has_escapes(text):
        return text
    view = decoded(text)
    spans: list[tuple[int, int]] = []
    for piece in pieces:
        found = view.text.find(piece)
        while found != -1:
            spans.append(view.span(found, found + len(piece)))
            found = view.text.find(piece, found + 1)
    if not spans:
        return text
    shown: list[str] = []
    done = 0
    for begin, stop in sorted(spans):
        if stop <= done:
            continue
        shown.append(text[done:begin] if begin > done else "")
        if begin >= done:
            shown.append(mark)
        done = stop
    shown.append(text[done:])
    return "".join(shown)
