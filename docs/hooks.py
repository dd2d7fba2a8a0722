"""MkDocs hook: heading anchors as GitHub makes them, so one link works on both.

GitHub lower-cases a heading's text, drops punctuation and turns each space into a hyphen
("`--json`" is #--json); Python-Markdown's default also folds runs of hyphens ("#-json").
mkdocs.yml names this file under `hooks:`; `mkdocs build --strict` then checks every anchor
as GitHub resolves it."""

from __future__ import annotations

import re
from typing import Any


def github_slug(value: str, separator: str) -> str:
    """The anchor GitHub gives a heading whose text is ``value``."""
    return re.sub(r"[^\w\- ]", "", value.strip().lower()).replace(" ", separator)


def on_config(config: Any) -> Any:
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config
