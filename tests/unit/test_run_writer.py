"""One dtrun writes a run directory at a time, and a dtrun that ended without recording how
(SIGKILL, out of memory) is told from one still writing: runner/record/writer.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dtrun.errors import OutputDirError
from dtrun.record.rundir import create_run_dir
from dtrun.record.writer import LOCK_FILE, hold_writer, release_writer, writer_alive
from dtrun.report.build import build_report
from dtrun.spec.outcome import SweepStatus
from dtrun.spec.request import BenchSpec
from tests.conftest import require_tool, run_dtrun
from tests.factories import fake_run_dir


@contextmanager
def held_elsewhere(path: Path) -> Iterator[None]:
    """The lock held by another process, util-linux's flock(1), as another dtrun holds it."""
    require_tool("flock")
    holder = subprocess.Popen(
        ["flock", "--exclusive", str(path / LOCK_FILE), "sh", "-c", "echo held; exec sleep 60"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep, which holds the lock too
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_new_run_directory_is_held_by_the_dtrun_that_made_it(tmp_path: Path):
    run_dir = create_run_dir(tmp_path, "mine")
    try:
        assert writer_alive(run_dir.path) is True
        code = "import sys; from pathlib import Path; from dtrun.record.writer import hold_writer"
        done = subprocess.run(
            [sys.executable, "-c", f"{code}; hold_writer(Path(sys.argv[1]))", str(run_dir.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode != 0 and f"another dtrun is writing {run_dir.path}" in done.stderr
    finally:
        release_writer()
    assert writer_alive(run_dir.path) is False  # the lock file stays; nobody holds it


def test_a_sigkilled_writer_leaves_its_run_directory_held_by_nobody(tmp_path: Path):
    code = (
        "import sys, time; from pathlib import Path; from dtrun.record.rundir import "
        "create_run_dir; create_run_dir(Path(sys.argv[1]), 'k'); print('held', flush=True); "
        "time.sleep(60)"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "held\n"
        assert writer_alive(tmp_path / "k") is True
    finally:
        writer.kill()  # SIGKILL: none of dtrun's code runs
        writer.wait()
    assert writer_alive(tmp_path / "k") is False


def test_resume_of_a_sweep_another_dtrun_still_writes_is_refused(tmp_path: Path, fixed_inventory):
    run_dir = fake_run_dir(
        tmp_path / "busy", BenchSpec(run_id="busy", node_counts=(1, 2)), fixed_inventory,
        {1: [1000]}, SweepStatus.RUNNING,
    )  # fmt: skip
    runs = run_dir.runs.read_bytes()
    with held_elsewhere(run_dir.path):
        done = run_dtrun("bench", "--resume", str(run_dir.path), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"another dtrun is writing {run_dir.path}" in done.stderr
    assert "Traceback" not in done.stderr and run_dir.runs.read_bytes() == runs


@pytest.mark.parametrize(
    ("holder", "said"),
    [
        ("gone", "Status: **running** as last recorded, yet no dtrun holds this run directory: "
                 "it ended without recording how"),
        ("alive", "Status: **running**: a dtrun is writing it."),
        ("no lock file", "Status: **running** as last recorded. The tables"),
    ],
)  # fmt: skip
def test_a_running_sweep_s_report_tells_a_killed_dtrun_from_one_still_writing(
    tmp_path: Path, fixed_inventory, holder: str, said: str
):
    run_dir = fake_run_dir(
        tmp_path / "k", BenchSpec(run_id="k", node_counts=(1, 2)), fixed_inventory,
        {1: [1000], 2: [1800]}, SweepStatus.RUNNING,
    )  # fmt: skip
    if holder != "no lock file":
        (run_dir.path / LOCK_FILE).touch()
    if holder == "alive":
        with held_elsewhere(run_dir.path):
            build_report(run_dir)
    else:
        build_report(run_dir)
    assert said in run_dir.report.read_text()
    if holder == "gone":
        done = run_dtrun("report", str(run_dir.path), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "status: running as last recorded, yet no dtrun holds" in " ".join(
            (done.stdout + done.stderr).split()
        )


def test_a_link_or_fifo_in_the_lock_s_place_is_refused_not_followed(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / LOCK_FILE).symlink_to(target)
    (tmp_path / "b").mkdir()
    os.mkfifo(tmp_path / "b" / LOCK_FILE)
    for name in ("a", "b"):
        with pytest.raises(OutputDirError, match="cannot take"):
            hold_writer(tmp_path / name)
        assert writer_alive(tmp_path / name) is None
    assert target.read_text() == "keep"


@pytest.mark.parametrize(
    ("holder", "said"),
    [
        ("gone", ["runs.json is missing", "its dtrun ended in its first launch without recording "
                  "how", "next: run the sweep again: dtrun bench --rerun"]),
        ("alive", ["has no launch recorded yet", "a dtrun is running its first launch",
                   "next: wait for the first launch to end"]),
        ("no lock file", ["runs.json is missing", "it stopped before its first launch ended"]),
    ],
)  # fmt: skip
def test_a_sweep_with_no_launch_recorded_says_whether_its_dtrun_is_still_in_it(
    tmp_path: Path, fixed_inventory, holder: str, said: list[str]
):
    run_dir = fake_run_dir(
        tmp_path / "first", BenchSpec(run_id="first", node_counts=(1, 2)), fixed_inventory, {},
        SweepStatus.RUNNING,
    )  # fmt: skip
    run_dir.runs.unlink()  # as a sweep is before its first launch ends
    if holder != "no lock file":
        (run_dir.path / LOCK_FILE).touch()
    for command in (("report",), ("bench", "--resume")):
        if holder == "alive":
            with held_elsewhere(run_dir.path):
                done = run_dtrun(*command, str(run_dir.path), cwd=tmp_path)
        else:
            done = run_dtrun(*command, str(run_dir.path), cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        text = " ".join(done.stderr.split())
        # --resume says the same, its own advice aside; without the lock, its own words
        wanted = said if command == ("report",) else said[: 1 if holder == "no lock file" else 2]
        assert all(part in text for part in wanted), text
        assert "Traceback" not in done.stderr and not run_dir.report.exists()
