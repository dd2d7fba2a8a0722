"""No module of runner/ or infra/ is over 400 lines (issue 28): a module that grows past it is
split along what it holds, as runner/cli/options.py, runner/report/build.py and the engines'
executors were."""

from __future__ import annotations

from tests.paths import REPO

LIMIT = 400


def test_no_module_of_runner_or_infra_is_over_400_lines():
    over = {
        str(path.relative_to(REPO)): lines
        for package in ("runner", "infra")
        for path in sorted((REPO / package).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > LIMIT
    }
    assert over == {}, f"split these along what they hold: {over}"
