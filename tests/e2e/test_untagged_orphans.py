"""A daemon a program starts without dtrun's tag (a cleared environment) and orphans (a double
fork) is stopped with the launch, on the embedded cluster, over SSH and under Slurm: each node's
script runs under the reaper (runner/execute/reaper.py), to which the daemon is reparented, not
to init. Without it, stop.sh, which finds processes by the tag, missed it, and so did Slurm's
proctrack/linuxproc, which follows the step's process tree: it ran on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import DTRUN, default_signals, ended, run_dtrun, wait_for
from tests.e2e.test_ssh import hosts_file_text
from tests.paths import TESTS

PROGRAM = TESTS / "programs" / "helper_daemon.py"


@pytest.fixture
def pids(no_leftovers: Path) -> Iterator[Path]:
    """Where each rank writes its daemon's pid; whatever a failing test leaves is killed."""
    where = no_leftovers / "pids"
    where.mkdir()
    yield where
    for found in where.glob("daemon-*.pid"):
        with contextlib.suppress(psutil.Error, ValueError):
            proc = psutil.Process(int(found.read_text()))
            if proc.name() == "sleep":
                proc.kill()


def daemons(where: Path) -> list[int]:
    return [int(found.read_text()) for found in sorted(where.glob("daemon-*.pid"))]


@pytest.fixture(params=["embedded", "ssh", "slurm"])
def cluster(request: pytest.FixtureRequest, no_leftovers: Path) -> tuple[list[str], dict[str, str]]:
    """dtrun's options for 2 nodes and its environment: the embedded cluster, 2 real sshd
    nodes, or the Slurm test cluster's 2 slurmd."""
    if request.param == "embedded":
        return [], dict(os.environ)
    if request.param == "slurm":
        slurm = request.getfixturevalue("slurm")
        return ["--slurm"], dict(slurm.env)
    sshd_cluster = request.getfixturevalue("sshd_cluster")
    hosts = no_leftovers / "hosts.yaml"
    hosts.write_text(hosts_file_text(sshd_cluster, no_leftovers, count=2))
    return ["--hosts", str(hosts)], dict(os.environ)


def test_an_untagged_daemon_is_gone_when_the_launch_ends_by_itself(cluster, no_leftovers, pids):
    options, env = cluster
    done = run_dtrun(
        "run", *options, "--nodes", "2", "--port", "29966", "--output",
        str(no_leftovers / "runs"), "--run-id", "ends", "--", "python", str(PROGRAM),
        "--pids", str(pids), cwd=no_leftovers, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    started = daemons(pids)
    assert len(started) == 2  # one daemon a node
    assert [pid for pid in started if not ended(pid)] == [], "the daemons outlived the launch"


def test_an_untagged_daemon_is_gone_after_sigterm_to_dtrun(cluster, no_leftovers, pids):
    options, env = cluster
    dtrun = subprocess.Popen(
        [*DTRUN, "run", *options, "--nodes", "2", "--port", "29968", "--output",
         str(no_leftovers / "runs"), "--run-id", "stopped", "--", "python", str(PROGRAM),
         "--pids", str(pids), "--hold"],
        cwd=no_leftovers, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    try:
        wait_for(lambda: len(daemons(pids)) == 2, timeout=120, what="both daemons to start")
    except BaseException:
        dtrun.kill()
        dtrun.communicate()
        raise
    started = daemons(pids)
    assert [pid for pid in started if ended(pid)] == []  # running, until the stop
    dtrun.send_signal(signal.SIGTERM)
    said, _ = dtrun.communicate(timeout=120)
    assert dtrun.returncode == 128 + signal.SIGTERM, said
    assert [pid for pid in started if not ended(pid)] == [], "the daemons outlived the stop"
    assert (no_leftovers / "runs" / "stopped" / "run.json").is_file()  # the record is kept
