"""The single Jinja environment that lays out every rendered artifact.

Python computes values; templates only place them. Undefined variables are errors
(StrictUndefined); every value that reaches a shell goes through the ``shquote`` filter, and
every value that reaches YAML through ``yaml_str`` or ``yaml_block``.

Scripts and configs (every template but the reports) are held to one rule, checked on every
``{{ ... }}`` as it is written (``_placed``): a value is a number, the output of a quoting
filter (``shquote``, ``shwords``, ``yaml_str``, ``yaml_block``, ``oneline``), a fragment dtrun
composed itself (``verbatim``), or a plain word that no shell, comment or config reads as more
than itself. Anything else stops the render (UnsafeValueError) instead of writing a script in
which a value from a hosts file, a stack or a scheduler could become a command
(docs/security.md, "Threat model").
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING

from dtrun.errors import UnsafeValueError
from dtrun.locations import templates_dir
from dtrun.spec.text import CONTROL, escaped, noun, one_line, percent, percent_range, plural

if TYPE_CHECKING:  # jinja2 loads with the first template, not with every command (21 ms)
    import jinja2


class Placed(str):
    """Text a quoting filter made fit for the place it lands; ``_placed`` writes it as is."""


# What a raw value may hold: shlex.quote's own "needs no quoting" set, so such a word reads the
# same unquoted in a shell command, a comment, a Slurm config line or a YAML plain scalar.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")


def _quoted(value: object) -> str:
    text = str(value)
    if "\x00" in text:
        # No shell string holds NUL (bash drops it from a script): no quoting reads it back.
        raise UnsafeValueError(
            f"{text!r} holds a NUL character", why="a shell script cannot carry one"
        )
    return shlex.quote(text)


def shquote(value: object) -> str:
    """Quote any value for POSIX shells; numbers and plain words pass through unchanged."""
    return Placed(_quoted(value))


def shwords(values: Iterable[object]) -> str:
    """Words for a shell command line, each quoted: ``a 'b c'``."""
    return Placed(" ".join(_quoted(value) for value in values))


def oneline(value: object) -> str:
    """Any value as one line of text (a comment, a systemd Description=): control characters
    written as escapes (``\\n``, ``\\x1b``), so nothing it holds can end the line."""
    return Placed(one_line(str(value)))


def _ansi_c(word: str) -> str:
    """A word in bash's $'...' quoting: its control characters as the escapes bash reads back
    (``\\n``, ``\\x1b``, ``\\u2028``), its backslashes and quotes escaped."""
    body = word.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + CONTROL.sub(lambda m: _bash_escape(m.group(0)), body) + "'"


def _bash_escape(character: str) -> str:
    # bash reads \xHH as a byte: a character past ASCII (NEL, U+2028) goes as \uHHHH
    return escaped(character) if character < "\x80" else f"\\u{ord(character):04x}"


def shell_line(words: Iterable[object]) -> str:
    """Words as one shell command line to show (a report, the console): shlex.quote's quoting,
    and a word holding a line break or another control character in bash's $'...' quoting, so
    the command reads, and pastes, as one line."""
    return Placed(
        " ".join(
            _ansi_c(text) if CONTROL.search(text) else shlex.quote(text) for text in map(str, words)
        )
    )


def command_shown(command: str) -> str:
    """A recorded command line (a manifest's, shell-quoted) as one line: where its line breaks
    are all inside its words, each such word in $'...' (shell_line); else (a break between
    commands, a quote left open) the line with them as escapes. A line without a break is as
    recorded (code_block writes its other control characters as escapes)."""
    if "\n" not in command:
        return command
    try:
        words = shlex.split(command)
    except ValueError:  # a quote left open
        return _one_line(command)
    inside = sum(word.count("\n") for word in words)
    return shell_line(words) if inside == command.count("\n") else _one_line(command)


def verbatim(value: object) -> str:
    """A fragment of shell or config dtrun composed from its own constants (an expression such
    as ``${OMPI_COMM_WORLD_RANK}``), or Markdown a report template's macro composed (its values
    already quoted): written as is. Never for a value that came from outside."""
    return Placed(str(value))


# Characters past U+FFFF: JSON writes each as a surrogate pair of \u escapes, which YAML reads
# as two characters (PyYAML, cloud-init's); YAML's own escape is \UXXXXXXXX.
_ASTRAL = re.compile(r"([\U00010000-\U0010ffff])")


def yaml_str(value: object) -> str:
    """A YAML double-quoted scalar: JSON's escapes (valid YAML), and YAML's ``\\U`` escape for
    a character past U+FFFF. Safe for any text."""
    parts = _ASTRAL.split(str(value))  # odd indices: the characters past U+FFFF
    body = "".join(
        f"\\U{ord(part):08x}" if index % 2 else json.dumps(part)[1:-1]
        for index, part in enumerate(parts)
    )
    return Placed(f'"{body}"')


# What a literal block cannot carry as it is: a line break other than \n (YAML reads \r, NEL
# and the Unicode separators as breaks), another control character, a byte-order mark, and
# what YAML reads nowhere in a document (U+FFFE, U+FFFF, a surrogate).
_NOT_IN_BLOCK = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]"
)


def yaml_block(text: str, indent: int) -> str:
    """A YAML literal block scalar, indented by ``indent`` spaces: the text kept verbatim; text
    a block would change (see _NOT_IN_BLOCK, or a first line starting with a blank) is written
    as a double-quoted scalar instead."""
    if _NOT_IN_BLOCK.search(text) or text[:1] in (" ", "\t", "\n"):
        return yaml_str(text)
    chomp = "" if text.endswith("\n") else "-"
    if text.endswith("\n\n"):
        chomp = "+"
    lines = text.splitlines()
    pad = " " * indent
    return Placed(f"|{chomp}\n" + "\n".join(pad + line if line else "" for line in lines))


def duration(seconds: float) -> str:
    """A span of time in the unit that reads best: 42 s, 12.5 min, 3.2 h, 4.1 days."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def byte_size(size: int) -> str:
    """nccl-tests' spelling where exact (4K, 64M, 1G), else the bytes with separators."""
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size:,} B"


# Markdown (report.md, and report.html rendered from it): CommonMark 0.31.2 with GFM's tables
# (docs/report.md, "What the report quotes"). Any ASCII punctuation can be backslash-escaped
# and then stands for itself (CommonMark §2.4); these are the characters that open an inline
# construct (emphasis, code, link, image, autolink, raw HTML, entity), end a table cell (GFM
# §4.10), or open strikethrough and math in GitHub's renderer. An '_' between two letters or
# digits can neither open nor close emphasis (§6.2, "flanking"): node_0 stays as it is.
_MD_INLINE = re.compile(r"[\\`*\[\]<>&|~$]|(?<![^\W_])_|_(?![^\W_])")
# What opens a block at the start of a line, after up to three spaces (§4, §5): an ATX
# heading or a list item (its marker then a blank or the end), a block quote, a setext
# underline or thematic break. '2.13.0', '-3' or '+5' opens none and is left as it is.
_MD_BLOCK_START = re.compile(r" {0,3}(?:(?:#{1,6}|[-+]|\d{1,9}[.)])(?=[ \t]|$)|[>=]|-(?=[ \t]*-))")
_MD_NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?%?")
# report.md.j2's marker paragraphs for report.html's <details> (runner/report/htmlpage.py):
# a private-use character, removed from every value so no value can make one.
_MD_MARK = "\ue000"


def _one_line(text: str) -> str:
    """Control characters and lone surrogates as escapes (``\\n``, ``\\x1b``, ``\\udcff``),
    the <details> marker removed."""
    return one_line(text.replace(_MD_MARK, ""))


def md(value: object) -> str:
    """Any value as Markdown text that reads as itself: one line (control characters written
    as escapes), every character that could open an inline construct or end a table cell
    backslash-escaped, and a block marker at its start escaped, so that it makes no heading,
    list or quote wherever a template places it. Safe in a table cell."""
    text = _one_line(str(value))
    if _MD_NUMBER.fullmatch(text):
        return Placed(text)
    text = _MD_INLINE.sub(lambda m: "\\" + m.group(0), text)
    start = _MD_BLOCK_START.match(text)
    if start:  # the escape goes before a heading's first '#', else before the marker's last
        at = text.index("#") if "#" in start.group(0) else start.end() - 1
        text = text[:at] + "\\" + text[at:]
    return Placed(text)


def cell(value: object) -> str:
    """A value for one Markdown table cell: Markdown dtrun composed (Placed) as it is, anything
    else as ``md`` writes it (pipes escaped, one line)."""
    return value if isinstance(value, Placed) else md(value)


def code(value: object, table: bool = False) -> str:
    """A value as a Markdown code span: its text shown as it is (one line), fenced with more
    backticks than any run of backticks it holds, and padded with a space where it starts or
    ends with a backtick or a space (CommonMark 0.31.2 §6.1, "Code spans"). In a ``table``
    cell each '|' goes between spans, escaped: GFM splits a row at a '|' even inside a span."""
    text = _one_line(str(value))
    if table and "|" in text:
        return Placed("\\|".join(code(part) for part in text.split("|")))
    if not text:
        return Placed("")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] in " `" or text[-1] in " `" else ""
    return Placed(f"{fence}{pad}{text}{pad}{fence}")


def code_block(text: str, info: str = "") -> str:
    """``text`` as a fenced Markdown code block whose fence is longer than any run of
    backticks in it (CommonMark 0.31.2 §4.5, "Fenced code blocks"): nothing in the text (a
    command, an error quoting a node's output) can end the block and be read as Markdown. Its
    lines stay lines; other control characters are written as escapes."""
    lines = [_one_line(line) for line in str(text).split("\n")]
    body = "\n".join(lines)
    runs = [len(run) for run in re.findall(r"`+", body)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return Placed(f"{fence}{info}\n{body}\n{fence}")


def _is_report(name: str | None) -> bool:
    """The reports are Markdown (escaped by ``md``) and HTML (autoescaped), not scripts."""
    return bool(name) and str(name).startswith("report")


def _placed(context: jinja2.runtime.Context, value: object) -> object:
    """Every ``{{ ... }}`` of a script or config: a number, quoted text, or a plain word. In
    the Markdown reports any other value is written as Markdown text that reads as itself
    (``md``): what a template composes itself (a macro's output) is marked ``verbatim``."""
    if isinstance(value, Placed | int | float):
        return value
    if _is_report(context.name):
        return md(value) if str(context.name).endswith(".md.j2") else value
    text = str(value)
    if _PLAIN_WORD.fullmatch(text):
        return value
    raise UnsafeValueError(
        f"{text!r} would be written unquoted into {context.name}",
        why="only plain words (letters, digits and _@%+=:,./-) are placed there as they are",
        fix="remove spaces, quotes and control characters from that value where you gave it "
        "(an option, a hosts file, a stack output); if dtrun made it, report it as a bug",
    )


@cache
def environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        undefined=jinja2.StrictUndefined,
        # shell, YAML and Markdown are not HTML; report.html.j2 escapes what it places itself
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=jinja2.pass_context(_placed),
    )
    env.filters["shquote"] = shquote
    env.filters["shwords"] = shwords
    env.filters["oneline"] = oneline
    env.filters["verbatim"] = verbatim
    env.filters["yaml_str"] = yaml_str
    env.filters["yaml_block"] = yaml_block
    env.filters["duration"] = duration
    env.filters["cell"] = cell
    env.filters["md"] = md
    env.filters["code"] = code
    env.filters["byte_size"] = byte_size
    env.filters["plural"] = plural
    env.filters["noun"] = noun
    env.filters["percent"] = percent  # an efficiency beside its target: never across it
    env.filters["percent_range"] = percent_range
    return env


def render(template: str, context: Mapping[str, object]) -> str:
    return environment().get_template(template).render(**context)
