"""sweep records: the tests that start daemons or real launches; the others are in
tests/unit/test_sweep_records.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dtrun.spec.launchplan import RESULT_FILE
from tests.conftest import run_dtrun
from tests.unit.test_sweep_records import runs_of


@pytest.mark.e2e
@pytest.mark.parametrize("size_k", [24, 200])
def test_a_real_sweep_on_a_full_disk_exits_1_with_every_file_whole(
    small_disk: Callable[[int], Path], no_leftovers: Path, size_k: int
):
    """The embedded cluster's real launches, -o on a disk too small for the sweep: no
    traceback, no partial file, no empty file that should hold something, and no record
    claiming a result that is not there."""
    disk = small_disk(size_k)
    done = run_dtrun(
        "bench", "--nodes", "1,2", "--steps", "4", "--warmup", "1", "--repeat", "1", "--quiet",
        "-o", str(disk), "--run-id", "full", "--port", "29724" if size_k == 24 else "29726",
        cwd=no_leftovers, timeout=300,
    )  # fmt: skip
    run = disk / "full"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: the disk holding {run} is full (" in done.stderr
    assert f"next: free space and run `dtrun report {run}`" in done.stderr
    files = [path for path in run.rglob("*") if path.is_file()]
    assert not [path for path in files if ".partial" in path.name]
    for name in ("manifest.json", "runs.json", "summary.json", "report.md", "report.html"):
        assert not (run / name).exists() or (run / name).stat().st_size > 0, name
    if (run / "runs.json").exists():
        for entry in runs_of(run)["runs"]:
            if entry["status"] == "ok":  # ok means its result is there, whole
                json.loads((run / entry["run_dir"] / RESULT_FILE).read_text())


@pytest.mark.e2e
def test_a_node_log_cut_by_a_full_disk_is_named_when_dtrun_run_stops(
    small_disk: Callable[[int], Path], no_leftovers: Path
):
    """A program printing more than the disk holds: its node log stops where the disk
    filled, and the full disk's message names that log rather than calling every file whole."""
    disk = small_disk(120)
    (no_leftovers / "chatty.py").write_text("for i in range(6000):\n    print('x' * 100, i)\n")
    done = run_dtrun(
        "run", "-o", str(disk), "--run-id", "chatty", "--port", "29728", "--",
        "python", "chatty.py", cwd=no_leftovers, timeout=300,
    )  # fmt: skip
    run = disk / "chatty"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: the disk holding {run} is full (" in done.stderr
    assert "the node log launch/node-0.log stops where the disk filled" in done.stderr
    log = (run / "launch" / "node-0.log").read_text()
    assert "x" * 100 in log and " 5999\n" not in log  # cut, not whole


@pytest.mark.e2e
def test_a_launch_whose_node_logs_fill_the_disk_is_stopped_and_said_full(
    small_disk: Callable[[int], Path], no_leftovers: Path
):
    """A program that prints without end, -o on a disk too small for its logs: once a node's
    log cannot be written every node is stopped, as for a failed node, and the full disk is
    the error. Before, the nodes ran on unseen until --timeout (here: never)."""
    disk = small_disk(200)
    (no_leftovers / "spew.py").write_text("while True:\n    print('x' * 200, flush=True)\n")
    done = run_dtrun(
        "bench", "--nodes", "2", "--repeat", "1", "--no-health-gate", "-o", str(disk),
        "--run-id", "spew", "--port", "29668", "--", "python", "spew.py",
        cwd=no_leftovers, timeout=240,
    )  # fmt: skip
    run = disk / "spew"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: the disk holding {run} is full (" in done.stderr
    assert "where the disk filled" in done.stderr  # the node logs it cut short are named
    assert "did not finish within" not in done.stderr
    assert "x" * 200 in (run / "n2" / "r0" / "node-0.log").read_text()  # kept to the cut
    assert not [path for path in run.rglob("*") if ".partial" in path.name]
