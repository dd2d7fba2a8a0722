"""dtrun's code imports as dtrun, never as runner or infra (issue 40): a training project's own
package by either name on PYTHONPATH would take its place. tests/e2e/test_install.py runs an
installed dtrun beside such a package."""

from __future__ import annotations

import ast
import re

from tests.paths import REPO

FOLDERS = ("runner", "infra", "tests", "benchmarks")
OLD_NAMES = ("runner", "infra")


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_no_module_imports_dtrun_by_its_folder_names():
    found = {
        f"{path.relative_to(REPO)}: {name}"
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
        for name in imported(ast.parse(path.read_text()))
        if name.split(".")[0] in OLD_NAMES
    }
    assert found == set()


def test_no_template_or_script_runs_a_module_by_the_folder_name():
    pattern = re.compile(r"(-m|--module)\s+['\"]?(runner|infra)\.")
    found = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "templates").rglob("*"))
        if path.is_file() and pattern.search(path.read_text())
    ]
    assert found == []


def test_the_finder_catches_an_import_by_the_old_name():
    old, infra = OLD_NAMES  # spelt so that rename-import.sh leaves this example alone
    tree = ast.parse(f"import {old}.cli\nfrom {infra}.config import x\nfrom dtrun import errors\n")
    found = {name for name in imported(tree) if name.split(".")[0] in OLD_NAMES}
    assert found == {f"{old}.cli", f"{infra}.config"}
