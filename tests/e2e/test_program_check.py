"""program check: the tests that start daemons or real launches; the others are in
tests/unit/test_program_check.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_dtrun


@pytest.mark.e2e
def test_dtrun_run_of_a_missing_script_exits_2_before_anything_is_written(no_leftovers):
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--nodes", "2", "--output", str(out), "--", "python", "nosuch.py",
        cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    missing = Path(no_leftovers) / "nosuch.py"
    assert done.stderr.startswith(
        f"error: the script {missing} cannot be run: on node-0 and node-1 it does not exist"
    )
    assert "Traceback" not in done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 2  # the error and what to do
    assert not out.exists()  # nothing was written
