"""`dtrun bench --resume RUN_DIR` on the embedded cluster: a 1,2,4-node sweep interrupted after
its 2-node point, resumed to one report with only the missing point run."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DTRUN, default_signals, run_dtrun, wait_for

pytestmark = pytest.mark.e2e


def _runs(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "runs.json").read_text())
    return data


def test_an_interrupted_sweep_resumes_to_one_report_running_only_what_is_missing(no_leftovers):
    out = no_leftovers / "runs"
    run = out / "rs"
    sweep = subprocess.Popen(
        [*DTRUN, "bench", "--nodes", "1,2,4", "--steps", "6", "--warmup", "2", "--repeat", "1",
         "--no-health-gate", "--quiet", "--output", str(out), "--run-id", "rs",
         "--port", "29750"],
        cwd=no_leftovers, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip

    def two_done() -> bool:
        try:
            return [r["nodes"] for r in _runs(run)["runs"] if r["status"] == "ok"] == [1, 2]
        except (OSError, ValueError):
            return False  # not written yet, or being rewritten

    wait_for(two_done, timeout=180, what="the 1- and 2-node points to finish")
    sweep.send_signal(signal.SIGINT)
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, stderr
    # the launches without a result (the 4-node one, if the Ctrl-C came after it began)
    stopped = [r for r in _runs(run)["runs"] if r["status"] != "ok"]
    assert f"dtrun bench --resume {run}" in stderr
    kept = {n: (run / f"n{n}" / "r0" / "result.json").read_text() for n in (1, 2)}

    done = run_dtrun("bench", "--resume", str(run), "--quiet", cwd=no_leftovers, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = _runs(run)
    assert runs["status"] == "complete"
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(1, "ok"), (2, "ok"), (4, "ok")]
    for n, text in kept.items():  # the finished points were not run again
        assert (run / f"n{n}" / "r0" / "result.json").read_text() == text
    four = json.loads((run / "n4" / "r0" / "result.json").read_text())
    assert four["world_size"] == 4 and four["steps"] == 6  # the recorded sweep's settings
    summary = json.loads((run / "summary.json").read_text())
    assert [row["nodes"] for row in summary["rows"]] == [1, 2, 4]
    assert "Status: **complete**" in (run / "report.md").read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    assert [entry["launches_kept"] for entry in manifest["resumed"]] == [2]
    assert list(out.iterdir()) == [run]  # one run directory, one report
    # each run of dtrun's wall time, and the launch the Ctrl-C stopped (if the 4-node point
    # had begun) kept as replaced: both were paid for, and the cost counts them
    first, second = runs["segment_wall_s"]
    assert first > 0 and second > 0 and runs["wall_s"] == pytest.approx(first + second)
    assert runs["replaced"] == stopped
    cost = summary["cost"]
    assert cost["segment_wall_s"] == [first, second]
    assert cost["points"][-1]["launches"] == 1 + len(stopped)
    assert cost["points"][-1]["launch_s"] == pytest.approx(
        sum(r["wall_s"] for r in runs["runs"] + stopped if r["nodes"] == 4)
    )


def test_a_rerun_measures_the_recorded_sweep_again_as_a_new_run(no_leftovers):
    out = no_leftovers / "runs"
    first = run_dtrun("bench", "--nodes", "1,2", "--steps", "6", "--warmup", "2", "--repeat", "1",
                      "--no-health-gate", "--quiet", "--output", str(out), "--run-id", "one",
                      "--env", "MODE=fast", cwd=no_leftovers, timeout=300)  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    before = {p: p.read_bytes() for p in (out / "one").rglob("*") if p.is_file()}

    # the record's --env runs only when approved (docs/security.md): --yes, with no terminal
    done = run_dtrun("bench", "--rerun", str(out / "one"), "--run-id", "two", "--quiet", "--yes",
                     cwd=no_leftovers, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    old, new = (json.loads((out / r / "manifest.json").read_text()) for r in ("one", "two"))
    assert new["bench"] == {**old["bench"], "run_id": "two"}  # the same sweep, a new run
    assert new["command"] == f"dtrun bench --rerun {out / 'one'} --run-id two --quiet --yes"
    assert [r["status"] for r in _runs(out / "two")["runs"]] == ["ok", "ok"]
    assert (out / "two" / "report.md").is_file()
    assert {p: p.read_bytes() for p in (out / "one").rglob("*") if p.is_file()} == before
