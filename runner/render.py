"""The single Jinja environment that lays out every rendered artifact.

Python computes values; templates only place them. Undefined variables are errors
(StrictUndefined) and every value that reaches a shell goes through the ``shquote`` filter.
"""

from __future__ import annotations

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
    return env


def render(template: str, context: Mapping[str, object]) -> str:
    return environment().get_template(template).render(**context)
