"""The lease of dtrun's Slurm allocation (runner/engines/slurm/lease.py): its batch script run
for real by sh against a stand-in squeue that prints the job's comment from a file (or fails,
or is missing), and the lease setting's checks. The whole path, with a real Slurm and a
SIGKILLed dtrun, is in tests/e2e/test_e2e_slurm.py."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dtrun.engines.slurm.lease import Lease, hold_script, lease_seconds
from dtrun.engines.slurm.shell import SlurmShell
from dtrun.errors import RunError, UsageError
from dtrun.spec.slurmrequest import DEFAULT_LEASE_S

LEASE_S = 6  # and the script polls every 2 s (hold_script's poll_s, for a quick test)


@contextlib.contextmanager
def holding(
    tmp_path: Path, squeue: str | None, clock: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The batch script under sh, with ``squeue`` (a shell body; None: no squeue on PATH);
    with ``clock``, its `date +%s` reads that file (a clock the test moves), else the real."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("date", "sleep"):  # the script's other tools, and nothing else
        if tool == "date" and clock is not None:
            (bin_dir / tool).write_text(f"#!/bin/sh\nread -r now < {clock}; echo $now\n")
            (bin_dir / tool).chmod(0o755)
        else:
            (bin_dir / tool).symlink_to(f"/bin/{tool}")
    if squeue is not None:
        (bin_dir / "squeue").write_text(f"#!/bin/sh\n{squeue}\n")
        (bin_dir / "squeue").chmod(0o755)
    env = {"PATH": str(bin_dir), "SLURM_JOB_ID": "7"}
    script = subprocess.Popen(["/bin/sh", "-c", hold_script(LEASE_S, poll_s=2)], env=env)
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
        assert script.wait(timeout=LEASE_S + 60) == 0  # one lease after the first poll


def _move(path: Path, text: str) -> None:
    """Write ``path`` whole (rename): the script never reads it half-written."""
    part = path.with_suffix(".part")
    part.write_text(text)
    part.replace(path)


def test_the_job_holds_while_the_lease_is_renewed(tmp_path):
    """On a clock the test moves, 2 s a renewal: a busy machine delaying the test (it failed
    a fresh-clone run so, on the real clock) delays the clock too, never ends the lease."""
    comment, clock = tmp_path / "comment", tmp_path / "clock"
    _move(comment, "dtrun-lease:0")
    _move(clock, "1000")
    with holding(tmp_path, f"read -r line < {comment}; echo $line", clock) as script:
        for count in range(1, 8):  # 14 s of its clock: over two leases, renewed every 2 s
            time.sleep(2)  # a poll or so of the script's (its sleep is real)
            _move(comment, f"dtrun-lease:{count}")
            _move(clock, str(1000 + 2 * count))
            assert script.poll() is None
        for now in range(1016, 1100, 2):  # the clock goes on, with no renewal
            _move(clock, str(now))
            with contextlib.suppress(subprocess.TimeoutExpired):
                script.wait(timeout=2)
            if script.poll() is not None:
                break
        assert script.poll() == 0 and now >= 1014 + LEASE_S  # ends once renewals stop


def test_a_controller_that_does_not_answer_ends_no_job(tmp_path):
    with holding(tmp_path, "exit 1") as script:
        time.sleep(3 * LEASE_S)
        assert script.poll() is None


def test_a_node_without_squeue_holds_the_nodes_until_cancelled(tmp_path):
    with holding(tmp_path, None) as script:
        time.sleep(1)
        assert script.poll() is None
        assert psutil.Process(script.pid).cmdline() == ["sleep", "infinity"]  # exec'd


def fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """scontrol on PATH: records its arguments in the file it returns, then runs ``body``."""
    calls = tmp_path / "calls"
    (tmp_path / "scontrol").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{body}\n')
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return calls


def test_the_lease_is_renewed_through_scontrol(tmp_path, monkeypatch):
    """Lease renews with `scontrol update JobId=J Comment=dtrun-lease:N`, N counting up: once
    as it opens, then every fifth of the lease."""
    calls = fake_scontrol(tmp_path, monkeypatch, "exit 0")
    warned: list[str] = []
    with Lease(SlurmShell(), "812", 1, warned.append) as lease:  # every 0.2 s
        # five renewals, however slow a loaded machine makes each scontrol (a 1.1 s sleep saw
        # only 4 beside a suite); the deadline only ends a lease that stopped renewing
        deadline = time.monotonic() + 60
        while lease.renewals < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    seen = calls.read_text().splitlines()
    assert seen[:2] == [
        "update JobId=812 Comment=dtrun-lease:1",
        "update JobId=812 Comment=dtrun-lease:2",
    ]
    assert lease.renewals == len(seen) >= 5 and warned == []
    time.sleep(0.5)
    assert len(calls.read_text().splitlines()) == len(seen)  # none after the lease closed


def test_a_slurm_that_refuses_the_first_renewal_is_one_clear_error(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, "echo 'Access/permission denied' >&2; exit 1")
    lease = Lease(SlurmShell(), "812", 300, print)
    with pytest.raises(RunError, match="did not take the lease of job 812") as caught:
        lease.__enter__()
    assert "Access/permission denied" in caught.value.message
    assert "DTRUN_SLURM_LEASE_S=0" in caught.value.fix


def test_renewals_slurm_stops_taking_are_said_once_and_closing_does_not_wait(tmp_path, monkeypatch):
    flag = tmp_path / "refuse"
    fake_scontrol(tmp_path, monkeypatch, f"[ -e {flag} ] && exit 1; exit 0")
    warned: list[str] = []
    with Lease(SlurmShell(), "812", 1, warned.append):
        flag.touch()
        time.sleep(1.3)  # six renewals refused
        closing = time.monotonic()
    assert time.monotonic() - closing < 1.5
    assert len(warned) == 1 and "did not take the last 2 renewals of job 812" in warned[0]


@pytest.mark.parametrize(
    "value", ["5", "soon", "-1", "3.5", "86401", "99999999999999999999", "\u00b2"]
)
def test_a_bad_lease_setting_is_one_clear_error(value):
    with pytest.raises(UsageError, match=f"DTRUN_SLURM_LEASE_S is '{value}'") as caught:
        lease_seconds({"DTRUN_SLURM_LEASE_S": value})
    assert caught.value.exit_code == 2


def test_the_lease_setting():
    assert lease_seconds({}) == DEFAULT_LEASE_S == 300
    assert lease_seconds({"DTRUN_SLURM_LEASE_S": " 60 "}) == 60
    assert lease_seconds({"DTRUN_SLURM_LEASE_S": "0"}) == 0  # no lease
    assert hold_script(0) == "exec sleep infinity"
