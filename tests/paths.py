"""Where the tests' own files are, for test modules at any depth under tests/."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: data/, golden/, programs/
REPO = TESTS.parent


def require_e2e(what: str) -> None:
    """Refuse to start ``what`` (a daemon, a cluster) for a test outside tests/e2e/: the unit
    part must run with nothing else on the machine (tests/conftest.py, PARTS)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    if current and not current.startswith("tests/e2e/"):
        test = current.split(" ")[0]
        raise RuntimeError(f"{test} starts {what}: move it to tests/e2e/")
