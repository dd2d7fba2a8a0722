"""A secret value cut by line breaks: a logger or rich wrapping a config dump, ``base64`` at 76
columns, a progress bar's "\\r" redraw. Where the lines at a break are read together (a record,
a report, an upload, a node's next line on the console), the value read across the break is
masked on both lines, however short its parts (``mask_cuts``); where a line is read alone, its
end that starts a long value and its start that ends one (``mask_wrapped``). Pure.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Iterator

from dtrun.redact.encoded import own_digits
from dtrun.redact.shapes import REDACTED

# A value, or a line of one, is looked for in free text only from this length (__init__.py).
SHORTEST = 6
# A line read alone: its end that is the start of a value (a line that lies wholly inside it,
# its start that is the value's end) is masked from this many characters, in values of at
# least WRAPPED_PIECE_SHORTEST (a short value's pieces would be ordinary words).
WRAPPED_SHORTEST = 8
WRAPPED_PIECE_SHORTEST = 16
_WRAP_BREAKS = re.compile(r"(\r\n|\r|\n|\\r\\n|\\r|\\n)")
# A break with the white space around it that a wrapper adds or drops (an indent, a space it
# broke at; JSON writes a tab \t), read as nothing or, in a value holding a space, as one.
_SEAM = re.compile(r"(?:[ \t]|\\t)*(?:\r\n|\r|\n|\\r\\n|\\r|\\n)(?:[ \t]|\\t)*")


def cut_forms(piece: str) -> list[str]:
    """What of ``piece`` may be cut by line breaks: the piece raw, in JSON and repr, its base64
    as a whole value encoded (``base64`` and MIME wrap it at 76 columns, PEM at 64) and its
    hexadecimal (``xxd -p`` at 60), from SHORTEST characters."""
    raw = piece.encode()
    forms = [piece, json.dumps(piece)[1:-1], repr(piece)[1:-1], own_digits(raw, 0), raw.hex()]
    return [form for form in dict.fromkeys(forms) if len(form) >= SHORTEST]


def _reading(text: str, seams: list[re.Match[str]], glue: str) -> tuple[str, list[int], list[int]]:
    """``text`` with each seam read as ``glue``; where each run between seams starts in that
    reading and in ``text``."""
    parts, read_at, text_at = [], [], []
    start = length = 0
    for seam in [*seams, None]:
        end = len(text) if seam is None else seam.start()
        read_at.append(length)
        text_at.append(start)
        parts.append(text[start:end])
        length += end - start + len(glue)
        start = 0 if seam is None else seam.end()
    return glue.join(parts), read_at, text_at


def _found(read: str, read_at: list[int], glue: int, form: str) -> Iterator[tuple[int, int, int]]:
    """Where ``form`` is in ``read``: each run it covers, and where in that run it begins and
    ends."""
    found = read.find(form)
    while found != -1:
        end = found + len(form)
        for run in range(bisect.bisect_right(read_at, found) - 1, bisect.bisect_left(read_at, end)):
            run_end = read_at[run + 1] - glue if run + 1 < len(read_at) else len(read)
            begin, stop = max(found, read_at[run]), min(end, run_end)
            if begin < stop:
                yield run, begin - read_at[run], stop - read_at[run]
        found = read.find(form, found + 1)


def mask_cuts(text: str, forms: Iterable[str]) -> str:
    """``text`` with each of ``forms`` masked where line breaks cut it, on every line it spans:
    line i ending with its first k characters and line i+1 starting with the rest, for every
    k, the break's indent and trailing white space aside (a space the form holds may be the one
    a wrapper broke at)."""
    seams = list(_SEAM.finditer(text))
    if not seams:
        return text
    spans: list[tuple[int, int]] = []
    for glue in ("", " "):
        read, read_at, text_at = _reading(text, seams, glue)
        for form in forms if not glue else [form for form in forms if " " in form]:
            found = _found(read, read_at, len(glue), form)
            spans += [(text_at[run] + begin, text_at[run] + stop) for run, begin, stop in found]
    shown, done = [], 0
    for begin, stop in sorted(spans):
        if begin >= done:
            shown += [text[done:begin], REDACTED]
        done = max(done, stop)
    return "".join([*shown, text[done:]])


def started(line: str, forms: Iterable[str]) -> int:
    """How many characters at ``line``'s end (its trailing white space aside) are the start of
    one of ``forms``, whose rest the next line may begin: the most, 0 for none."""
    body, most = line.rstrip(), 0
    for form in forms:
        at = body.find(form[0], max(0, len(body) - len(form) + 1))
        while at != -1 and len(body) - at > most:
            if form.startswith(body[at:]):
                most = len(body) - at
                break
            at = body.find(form[0], at + 1)
    return most


def _body_end(line: str) -> int:
    """Where ``line``'s text ends: before its trailing white space and the "…" that marks a
    line cut short (runner/execute/failure.py quotes a log's lines so), where a secret may
    be cut as at a line break."""
    return len(line.rstrip().removesuffix("…"))


def _wrapped_ends(line: str, piece: str) -> tuple[int, int]:
    """How many characters at the start and at the end of ``line`` (its indent and trailing
    white space aside) belong to ``piece`` broken across lines: its end, and its start."""
    first = piece[:WRAPPED_SHORTEST]
    body = line[: _body_end(line)]
    tail = 0
    at = body.find(first, max(0, len(body) - len(piece) + 1))
    while at != -1:
        if piece.startswith(body[at:]):
            tail = len(body) - at
            break
        at = body.find(first, at + 1)
    lead = len(line) - len(line.lstrip())
    head, opening = 0, line[lead : lead + WRAPPED_SHORTEST]
    if len(opening) == WRAPPED_SHORTEST:
        at = piece.find(opening, 1)
        while at != -1:
            if line.startswith(piece[at:], lead):
                head = len(piece) - at
                break
            at = piece.find(opening, at + 1)
    return head, tail


def mask_wrapped(text: str, pieces: Iterable[str]) -> str:
    """``text`` with every piece's fragments at line breaks masked (WRAPPED_SHORTEST): "\\n",
    a lone "\\r" that redraws a progress bar (its states are lines of their own), and either
    written as an escape (a JSON log line's string)."""
    pieces = [piece for piece in pieces if len(piece) >= WRAPPED_PIECE_SHORTEST]
    lines = _WRAP_BREAKS.split(text)  # odd indices: the breaks
    for index in _reached(text, lines, pieces):
        line = lines[index]
        for piece in pieces:
            inner = line.strip()
            if len(inner) >= WRAPPED_SHORTEST and inner in piece:
                line = line.replace(inner, REDACTED)
                continue
            head, tail = _wrapped_ends(line, piece)
            lead = len(line) - len(line.lstrip())
            end = _body_end(line)
            if tail >= WRAPPED_SHORTEST and end - tail >= lead + head:
                line = line[: end - tail] + REDACTED + line[end:]
            if head >= WRAPPED_SHORTEST:
                line = line[:lead] + REDACTED + line[lead + head :]
        lines[index] = line
    return "".join(lines)


def _reached(text: str, lines: list[str], pieces: list[str]) -> list[int]:
    """The lines (even indices of ``lines``, ``text`` split at its breaks) ``mask_wrapped`` may
    change, a few of a long log's: those starting (after their indent) with WRAPPED_SHORTEST
    characters of a piece, or holding a piece's first WRAPPED_SHORTEST (each found in the
    whole text at once). Any other line no piece's end, start or middle can match."""
    if not pieces:
        return []
    openings = {
        p[at : at + WRAPPED_SHORTEST] for p in pieces for at in range(len(p) - WRAPPED_SHORTEST + 1)
    }
    starts, at = [], 0
    for part in lines:
        starts.append(at)
        at += len(part)
    reached = {
        i for i in range(0, len(lines), 2) if lines[i].lstrip()[:WRAPPED_SHORTEST] in openings
    }
    for first in {piece[:WRAPPED_SHORTEST] for piece in pieces}:
        at = text.find(first)
        while at != -1:
            reached.add(bisect.bisect_right(starts, at) - 1)
            at = text.find(first, at + 1)
    return sorted(index for index in reached if index % 2 == 0)
