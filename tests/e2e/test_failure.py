"""failure: the tests that start daemons or real launches; the others are in
tests/unit/test_failure.py."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_dtrun
from tests.unit.test_failure import RAISED


@pytest.mark.e2e
def test_a_failed_run_prints_and_records_the_program_s_own_exception(no_leftovers):
    script = no_leftovers / "bad.py"
    script.write_text(
        "import os\n\n\ndef load_shard(n):\n    raise ValueError(f'bad shard {n}')\n\n\n"
        "if os.environ['RANK'] == '1':\n    load_shard(17)\n"
    )
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--nodes", "2", "--port", "29786", "--output", str(out), "--run-id", "bad",
        "--", "python", str(script), cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr[done.stderr.index("error: node-1 (127.0.0.3) failed") :]
    assert "rank 1 (local rank 0) exited with exit code 1; its error:" in said
    assert said.index(RAISED) < said.index("ChildFailedError")
    record = json.loads((out / "bad" / "run.json").read_text())
    assert record["status"] == "failed"
    assert RAISED in record["error"]
    assert "its error:" in record["error"]
