"""The reaper (runner/execute/reaper.py): a node's script runs under it, and what the script
leaves, with dtrun's tag or without it, is stopped before it exits with the script's code."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from dtrun.execute.guard import TAG, reaper_command, stop_script
from dtrun.execute.reaper import exit_code, grace_within, parent_of
from tests.conftest import ended, wait_for
from tests.paths import REPO

PACKAGE = str(REPO / "dtrun")
# what some libraries do: a helper without the tag (env -i), in a session of its own, whose
# parent ends at once (a double fork); its pid on the script's output
DAEMON = "env -i setsid sh -c 'sleep 600 </dev/null >/dev/null 2>&1 & echo $!'\n"
# the same, deaf to SIGTERM, as a helper that traps it and carries on
DEAF_DAEMON = (
    "env -i setsid sh -c 'trap \"\" TERM; sleep 600 </dev/null >/dev/null 2>&1 & echo $!'\n"
)


@pytest.mark.parametrize(("stop_grace", "grace"), [(5.0, 4.0), (2.0, 1.0), (1.0, 0.5), (0.2, 0.1)])
def test_the_reaper_s_grace_ends_inside_the_stop_s(stop_grace, grace):
    assert grace_within(stop_grace) == pytest.approx(grace)


def test_a_parent_is_read_after_the_last_parenthesis_whatever_the_name_holds():
    assert parent_of(b"42 (a) b) 3 (c) S 17 42 42 0 -1") == 17
    assert parent_of(b"7 (sleep) Z 1 7 7 0 -1 4194560") == 1


def test_a_signal_is_128_plus_it_as_bash_reports_it():
    assert exit_code(3 << 8) == 3
    assert exit_code(signal.SIGTERM) == 128 + signal.SIGTERM


def run(tmp_path: Path, script: str, grace_s: float = 1.0, tag: str = "") -> subprocess.Popen[str]:
    (tmp_path / "node-0.sh").write_text(script)
    env = {**os.environ, TAG: tag} if tag else None
    return subprocess.Popen(
        [*reaper_command(sys.executable, PACKAGE, grace_s), "bash", "node-0.sh"],
        cwd=tmp_path, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env,
    )  # fmt: skip


@contextlib.contextmanager
def cleaned(reaper: subprocess.Popen[str], daemons: list[int]):
    """Whatever a failing test leaves is killed."""
    try:
        yield
    finally:
        for pid in daemons:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).name() == "sleep":
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(reaper.pid, signal.SIGKILL)
        reaper.wait()


def test_an_untagged_orphan_is_stopped_when_the_script_ends_and_its_code_comes_through(
    tmp_path,
):
    reaper = run(tmp_path, DAEMON + "exit 3\n")
    daemons: list[int] = []
    with cleaned(reaper, daemons):
        assert reaper.stdout is not None
        daemons.append(int(reaper.stdout.readline()))
        assert reaper.wait(timeout=30) == 3
        assert ended(daemons[0]), "the daemon outlived the script"


def test_an_orphan_deaf_to_sigterm_is_killed_after_the_grace(tmp_path):
    reaper = run(tmp_path, DEAF_DAEMON + "kill -TERM $$\n", grace_s=0.4)
    daemons: list[int] = []
    with cleaned(reaper, daemons):
        assert reaper.stdout is not None
        daemons.append(int(reaper.stdout.readline()))
        assert reaper.wait(timeout=30) == -signal.SIGTERM  # ended as the script did
        assert ended(daemons[0])


def test_a_stop_ends_what_the_reaper_adopted_before_its_sigkill_reaches_the_reaper(tmp_path):
    """stop.sh signals every tagged process, the reaper too: the reaper's SIGKILLs to its
    untagged children come first, so none is orphaned to init by the stop's SIGKILL."""
    tag = secrets.token_hex(4)
    # the trap before the daemon's pid is said: a stop that came between the two ended the
    # script by SIGTERM (seen once, a fresh-clone suite on 4 workers beside the lint)
    reaper = run(tmp_path, "trap '' TERM\n" + DEAF_DAEMON + "sleep 600\n", tag=tag)
    daemons: list[int] = []
    with cleaned(reaper, daemons):
        assert reaper.stdout is not None
        daemons.append(int(reaper.stdout.readline()))
        wait_for(
            lambda: psutil.Process(daemons[0]).ppid() == reaper.pid,
            timeout=10, what="the daemon to be reparented to the reaper",
        )  # fmt: skip
        stop = subprocess.run(
            ["bash", "-c", stop_script(tag, 1.0)], capture_output=True, text=True, timeout=30
        )
        assert stop.stdout.split() == ["dtrun-left:"]
        assert ended(daemons[0]), "the stop's SIGKILL orphaned the daemon"
        assert reaper.wait(timeout=10) == -signal.SIGKILL  # as the script, deaf to SIGTERM


def test_a_command_that_cannot_start_is_127_as_a_shell_says(tmp_path):
    done = subprocess.run(
        [*reaper_command(sys.executable, PACKAGE, 1.0), str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 127
    assert "missing" in done.stderr
