"""Counts read as English: '1 node', '2 nodes', never 'node(s)' (issue 27)."""

from __future__ import annotations

import re

import pytest

from dtrun.render import environment
from dtrun.spec.text import noun, plural
from tests.paths import REPO

ROOT = REPO


@pytest.mark.parametrize(
    ("count", "word", "said"),
    [
        (1, "node", "1 node"),
        (2, "node", "2 nodes"),
        (0, "launch", "0 launches"),
        (1, "process", "1 process"),
        (8, "process", "8 processes"),
        (3, "measured node count", "3 measured node counts"),
    ],
)
def test_plural_agrees_with_the_count(count: int, word: str, said: str) -> None:
    assert plural(count, word) == said


def test_noun_alone_agrees_with_the_count() -> None:
    assert (noun(1, "rank"), noun(2, "rank")) == ("rank", "ranks")


def test_templates_count_with_the_same_words() -> None:
    filters = environment().filters
    assert (filters["plural"], filters["noun"]) == (plural, noun)


def test_no_message_or_template_writes_a_bracketed_plural() -> None:
    pattern = re.compile(r"\w\((?:s|es)\)")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("runner", "templates", "infra")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in {".py", ".j2"}
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, "\n".join(found)
