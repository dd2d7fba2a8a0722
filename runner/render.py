"""The single Jinja environment that lays out every rendered artifact.

Python computes values; templates only place them. Undefined variables are errors
(StrictUndefined); every value that reaches a shell goes through the ``shquote`` filter, and
every value that reaches YAML through ``yaml_str`` or ``yaml_block``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import jinja2


def templates_dir() -> Path:
    """``templates/`` beside the package in a checkout; ``runner/_templates`` in a wheel."""
    package = Path(__file__).resolve().parent
    for candidate in (package.parent / "templates", package / "_templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"dtrun templates not found beside {package}")


def shquote(value: object) -> str:
    """Quote any value for POSIX shells; numbers and plain words pass through unchanged."""
    return shlex.quote(str(value))


def yaml_str(value: object) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML): safe for any text."""
    return json.dumps(str(value))


def yaml_block(text: str, indent: int) -> str:
    """A YAML literal block scalar, indented by ``indent`` spaces: the text kept verbatim."""
    chomp = "" if text.endswith("\n") else "-"
    if text.endswith("\n\n"):
        chomp = "+"
    lines = text.splitlines()
    pad = " " * indent
    return f"|{chomp}\n" + "\n".join(pad + line if line else "" for line in lines)


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


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # shell, YAML and markdown, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shquote"] = shquote
    env.filters["yaml_str"] = yaml_str
    env.filters["yaml_block"] = yaml_block
    env.filters["duration"] = duration
    env.filters["cell"] = cell
    env.filters["byte_size"] = byte_size
    return env


def render(template: str, context: Mapping[str, object]) -> str:
    return environment().get_template(template).render(**context)
