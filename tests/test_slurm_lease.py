"""The lease of dtrun's Slurm allocation (runner/cluster/slurmlease.py): its batch script run
for real by sh against a stand-in squeue that prints the job's comment from a file (or fails,
or is missing), and the lease setting's checks. The whole path, with a real Slurm and a
SIGKILLed dtrun, is in tests/test_e2e_slurm.py."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from runner.cluster.slurmlease import DEFAULT_LEASE_S, Lease, hold_script, lease_seconds
from runner.errors import UsageError
from runner.execute.slurmshell import SlurmShell

LEASE_S = 4  # the script polls every 2 s (its shortest)


@contextlib.contextmanager
def holding(tmp_path: Path, squeue: str | None) -> Iterator[subprocess.Popen[bytes]]:
    """The batch script under sh, with ``squeue`` (a shell body; None: no squeue on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("date", "sleep"):  # the script's other tools, and nothing else
        (bin_dir / tool).symlink_to(f"/bin/{tool}")
    if squeue is not None:
        (bin_dir / "squeue").write_text(f"#!/bin/sh\n{squeue}\n")
        (bin_dir / "squeue").chmod(0o755)
    env = {"PATH": str(bin_dir), "SLURM_JOB_ID": "7"}
    script = subprocess.Popen(["/bin/sh", "-c", hold_script(LEASE_S)], env=env)
    try:
        yield script
    finally:
        with contextlib.suppress(psutil.Error):  # gone already when it ended itself
            parent = psutil.Process(script.pid)
            for proc in [*parent.children(recursive=True), parent]:
                proc.kill()
        script.wait()


def test_the_job_ends_itself_when_the_lease_is_not_renewed(tmp_path):
    comment = tmp_path / "comment"
    comment.write_text("dtrun-lease:0")
    with holding(tmp_path, f"read -r line < {comment}; echo $line") as script:
        assert script.wait(timeout=LEASE_S + 6) == 0  # one lease after the first poll


def test_the_job_holds_while_the_lease_is_renewed(tmp_path):
    comment = tmp_path / "comment"
    comment.write_text("dtrun-lease:0")
    with holding(tmp_path, f"read -r line < {comment}; echo $line") as script:
        for count in range(1, 6):  # 10 s: two and a half leases, renewed every 2 s
            time.sleep(2)
            comment.write_text(f"dtrun-lease:{count}")
            assert script.poll() is None
        assert script.wait(timeout=LEASE_S + 6) == 0  # and ends once the renewals stop


def test_a_controller_that_does_not_answer_ends_no_job(tmp_path):
    with holding(tmp_path, "exit 1") as script:
        time.sleep(3 * LEASE_S)
        assert script.poll() is None


def test_a_node_without_squeue_holds_the_nodes_until_cancelled(tmp_path):
    with holding(tmp_path, None) as script:
        time.sleep(1)
        assert script.poll() is None
        assert psutil.Process(script.pid).cmdline() == ["sleep", "infinity"]  # exec'd


def test_the_lease_is_renewed_through_scontrol(tmp_path, monkeypatch):
    """Lease renews with `scontrol update JobId=J Comment=dtrun-lease:N`, N counting up."""
    calls = tmp_path / "calls"
    (tmp_path / "scontrol").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with Lease(SlurmShell(), "812", lease_s=1) as lease:  # every 0.2 s
        time.sleep(1.1)
    seen = calls.read_text().splitlines()
    assert seen[:2] == [
        "update JobId=812 Comment=dtrun-lease:1",
        "update JobId=812 Comment=dtrun-lease:2",
    ]
    assert lease.renewals == len(seen) >= 4
    time.sleep(0.5)
    assert len(calls.read_text().splitlines()) == len(seen)  # none after the lease closed


@pytest.mark.parametrize("value", ["5", "soon", "-1", "3.5"])
def test_a_bad_lease_setting_is_one_clear_error(value):
    with pytest.raises(UsageError, match=f"DTRUN_SLURM_LEASE_S is '{value}'") as caught:
        lease_seconds({"DTRUN_SLURM_LEASE_S": value})
    assert caught.value.exit_code == 2


def test_the_lease_setting():
    assert lease_seconds({}) == DEFAULT_LEASE_S == 300
    assert lease_seconds({"DTRUN_SLURM_LEASE_S": " 60 "}) == 60
