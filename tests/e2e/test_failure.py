"""failure: the tests that start daemons or real launches; the others are in
tests/unit/test_failure.py."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from tests.conftest import DTRUN, default_signals, launch_processes, run_dtrun, wait_for
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


@pytest.mark.e2e
def test_a_sigkilled_dtrun_run_leaves_run_json_saying_unrecorded_not_running(no_leftovers):
    """SIGKILL runs none of dtrun's code; the guard beside the run (runner/record/ended.py)
    rewrites run.json's "running" once dtrun is gone. Before: "running" for ever."""
    program = no_leftovers / "slow.py"
    program.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    out = no_leftovers / "runs"
    log = out / "killed" / "launch" / "node-0.log"
    dtrun = subprocess.Popen(
        [*DTRUN, "run", "--nodes", "1", "--port", "29788", "--output", str(out),
         "--run-id", "killed", "--", "python", str(program)],
        cwd=no_leftovers, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=default_signals,
    )  # fmt: skip
    try:
        wait_for(lambda: log.is_file() and "started" in log.read_text(), timeout=120,
                 what="the program to start")  # fmt: skip
        assert json.loads((out / "killed" / "run.json").read_text())["status"] == "running"
    finally:
        dtrun.send_signal(signal.SIGKILL)
        dtrun.wait(timeout=10)

    def status() -> str:
        return str(json.loads((out / "killed" / "run.json").read_text())["status"])

    wait_for(lambda: status() != "running", timeout=30, what="the guard to rewrite run.json")
    record = json.loads((out / "killed" / "run.json").read_text())
    assert record["status"] == "unrecorded"
    assert record["error"].startswith("dtrun ended without recording how the run ended (SIGKILL")
    assert record["spec"]["run_id"] == "killed"  # the rest of the record is kept
    wait_for(lambda: launch_processes() == [], timeout=30, what="the launch's guard")
