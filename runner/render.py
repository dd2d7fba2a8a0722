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
from pathlib import Path

import jinja2

from runner.errors import UnsafeValueError
from runner.spec.text import CONTROL, escaped, noun, plural


class Placed(str):
    """Text a quoting filter made fit for the place it lands; ``_placed`` writes it as is."""


# What a raw value may hold: shlex.quote's own "needs no quoting" set, so such a word reads the
# same unquoted in a shell command, a comment, a Slurm config line or a YAML plain scalar.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")


def templates_dir() -> Path:
    """``templates/`` beside the package in a checkout; ``runner/_templates`` in a wheel."""
    package = Path(__file__).resolve().parent
    for candidate in (package.parent / "templates", package / "_templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"dtrun templates not found beside {package}")


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
    text = str(value)
    return Placed(CONTROL.sub(lambda m: escaped(m.group(0)), text))


def verbatim(value: object) -> str:
    """A fragment of shell or config dtrun composed from its own constants (an expression such
    as ``${OMPI_COMM_WORLD_RANK}``): written as is. Never for a value that came from outside."""
    return Placed(str(value))


def yaml_str(value: object) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML): safe for any text."""
    return Placed(json.dumps(str(value)))


# What a literal block cannot carry as it is: a line break other than \n (YAML reads \r, NEL
# and the Unicode separators as breaks), another control character, a byte-order mark.
_NOT_IN_BLOCK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


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


def cell(value: object) -> str:
    """Text for one Markdown table cell: pipes escaped, lines joined."""
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def _is_report(name: str | None) -> bool:
    """The reports are Markdown (escaped by ``cell``) and HTML (autoescaped), not scripts."""
    return bool(name) and str(name).startswith("report")


@jinja2.pass_context
def _placed(context: jinja2.runtime.Context, value: object) -> object:
    """Every ``{{ ... }}`` of a script or config: a number, quoted text, or a plain word."""
    if _is_report(context.name) or isinstance(value, Placed | int | float):
        return value
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
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        undefined=jinja2.StrictUndefined,
        # shell, YAML and Markdown are not HTML; report.html.j2 escapes what it places itself
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_placed,
    )
    env.filters["shquote"] = shquote
    env.filters["shwords"] = shwords
    env.filters["oneline"] = oneline
    env.filters["verbatim"] = verbatim
    env.filters["yaml_str"] = yaml_str
    env.filters["yaml_block"] = yaml_block
    env.filters["duration"] = duration
    env.filters["cell"] = cell
    env.filters["byte_size"] = byte_size
    env.filters["plural"] = plural
    env.filters["noun"] = noun
    return env


def render(template: str, context: Mapping[str, object]) -> str:
    return environment().get_template(template).render(**context)
