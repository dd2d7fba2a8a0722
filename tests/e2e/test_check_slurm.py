"""`dtrun check --slurm` on the tests' Slurm cluster (docs/check.md). Its own file: the Slurm
daemons are the machine's, so tests/machine.py keeps every test that uses them on one worker."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_dtrun

pytestmark = pytest.mark.e2e


def test_a_check_on_slurm_names_its_nodes_as_slurm_does_and_ends_its_job(slurm, no_leftovers):
    done = run_dtrun(
        "check", "--slurm", "--local-nodes", "2", "--port", "29880", "--json",
        "--output", str(no_leftovers / "runs"), "--run-id", "check",
        cwd=no_leftovers, env=slurm.env, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [(n["host"], n["verdict"]) for n in data["nodes"]] == [("n1", "ok"), ("n2", "ok")]
    assert [(link["a"], link["b"], link["verdict"]) for link in data["links"]] == [
        ("n1", "n2", "ok")
    ]
    assert slurm.jobs() == []  # the allocation dtrun asked for is gone
