"""The report's helper process (runner/report/builder.py): where its work fails for a reason
dtrun explains (a full disk), that is the error; the work is not done a second time here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dtrun.errors import DiskFullError
from dtrun.report.builder import ReportBuilder


def _fail_as_a_full_disk(tries: Path) -> None:
    with tries.open("a") as file:
        file.write(f"{os.getpid()}\n")
    raise DiskFullError("the disk holding runs/x is full", why="report.html could not be written")


def test_an_error_dtrun_explains_in_the_helper_is_raised_once_not_retried_here(tmp_path: Path):
    # Retried here, the second try named another file than the one the first had left
    # unwritten (throughput.png, where report.html was missing).
    tries = tmp_path / "tries"
    builder = ReportBuilder()
    try:
        assert builder._pool is not None
        with pytest.raises(DiskFullError) as raised:
            builder.call(_fail_as_a_full_disk, tries)
    finally:
        builder.close()
    assert raised.value.why == "report.html could not be written"
    (pid,) = tries.read_text().split()
    assert int(pid) != os.getpid()  # the helper's try, and no other
