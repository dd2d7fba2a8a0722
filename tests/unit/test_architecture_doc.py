"""docs/architecture.md's module tour names every module under runner/ and infra/, once, and
nothing that is not there: the modules are found by walking the folders, so a module added,
moved or removed fails here until the tour says so."""

from __future__ import annotations

import re

from tests.paths import REPO

ROOT = REPO
PACKAGES = ("runner", "infra")
# A tour line: a list item that starts with a path in backticks and a colon.
ROW = re.compile(r"^- `([^`]+)`:", re.MULTILINE)


def modules() -> set[str]:
    """Every .py file under runner/ and infra/, a package by its folder (``runner/cli/``)."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT)
            if path.name == "__init__.py":
                found.add(f"{relative.parent.as_posix()}/")
            else:
                found.add(relative.as_posix())
    return found


def toured(text: str) -> list[str]:
    tour = text.split("\n## Module tour\n")[1].split("\n## ")[0]
    return ROW.findall(tour)


def test_the_module_tour_names_every_module_once_and_nothing_else():
    named = toured((ROOT / "docs" / "architecture.md").read_text())
    found = modules()
    assert sorted(set(found) - set(named)) == [], "modules the tour leaves out"
    assert sorted(set(named) - found) == [], "tour lines naming no module"
    assert sorted(name for name in set(named) if named.count(name) > 1) == []


def test_a_module_missing_from_the_tour_or_one_it_invents_is_caught():
    text = (ROOT / "docs" / "architecture.md").read_text()
    without = text.replace("- `runner/report/summaryfile.py`:", "- runner/report/summaryfile.py:")
    assert "runner/report/summaryfile.py" in modules() - set(toured(without))
    invented = text.replace("- `runner/errors.py`:", "- `runner/errors.py`: x\n- `runner/gone.py`:")
    assert "runner/gone.py" in set(toured(invented)) - modules()


def test_the_readme_links_the_architecture_page_and_keeps_no_tour():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
    assert "## A tour of the code" not in readme
    assert "`runner/cluster/connect.py`" not in readme  # module lines live in the tour
