"""stdout that takes no more output (a full disk, a closed descriptor): one message, no
traceback; the run directory's files are written all the same."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import DTRUN
from tests.paths import REPO

SWEEP = REPO / "tests" / "data" / "sweeps" / "default-noisy"


@pytest.mark.parametrize(
    ("stdout", "why"),
    [("/dev/full", "No space left on device"), (None, "it is closed")],
)
@pytest.mark.parametrize("json", [False, True])
def test_a_report_whose_stdout_takes_nothing_says_so_in_one_message(
    tmp_path: Path, stdout: str | None, why: str, json: bool
):
    run = tmp_path / "run"
    shutil.copytree(SWEEP, run)
    args = [*DTRUN, "report", str(run), *(["--json"] if json else [])]
    if stdout is None:  # `>&-`: the descriptor is closed
        done = subprocess.run(
            ["bash", "-c", '"$@" >&-', "-", *args], capture_output=True, text=True, timeout=120
        )
    else:
        with Path(stdout).open("w") as full:
            done = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"error: cannot write the output to stdout: {why}" in done.stderr
    assert (run / "report.md").is_file()  # what the report writes is written


def test_the_version_whose_stdout_takes_nothing_says_so_in_one_message():
    with Path("/dev/full").open("w") as full:
        done = subprocess.run(
            [*DTRUN, "--version"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "error: cannot write the output to stdout: No space left on device" in done.stderr
