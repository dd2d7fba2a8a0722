"""The command dtrun's SSH engine gives each node's login shell (templates/remote/launch.sh.j2),
run here under sh (dash) and bash as a login shell would run it, with no sshd: the script's
output and exit code come through, and the guard stops every process of the launch when the
connection's input closes (as it does when dtrun is SIGKILLed)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dtrun.engines.ssh.remote import launch_command, swept_marker
from dtrun.execute.guard import TAG
from tests.conftest import ended, launch_processes, require_tool, wait_for
from tests.paths import REPO

ONE_LINE = r"""exec sh -c 'eval "\$\(printf %s ([A-Za-z0-9+/=]+) \| base64 -d\)"'"""
ODD_DIR = 'it\'s a "dir" $(touch pwned) `id`'


def wrapper(where: Path, script: str, tag: str, python: str = sys.executable) -> str:
    """The node's command, its script under the reaper: this python, this checkout's code."""
    return launch_command(str(where), script, tag, 1.0, python=python, package=str(REPO / "dtrun"))


def ours(tag: str) -> list[psutil.Process]:
    """This test's processes of the launch: another run's on this machine are not ours."""
    found = []
    for proc in launch_processes():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(TAG) == tag:
                found.append(proc)
    return found


@pytest.fixture
def launch_dir(tmp_path: Path) -> Path:
    where = tmp_path / ODD_DIR
    where.mkdir()
    return where


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_script_runs_in_its_directory_and_its_exit_code_comes_through(
    tmp_path, launch_dir, shell
):
    (launch_dir / "node-0.sh").write_text('pwd\necho "tag $DTRUN_LAUNCH"\nexit 3\n')
    launch = secrets.token_hex(4)
    tag = f"{launch}-0"
    # another node's process of the same launch on this machine (its own tag): neither this
    # node's stop at the script's end nor a guard that outlived it may stop it
    other = subprocess.Popen(["sleep", "600"], env={**os.environ, TAG: f"{launch}-1"})
    try:
        for _ in range(10):
            login = subprocess.Popen(
                [shell, "-c", wrapper(launch_dir, "node-0.sh", tag)], cwd=tmp_path,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert login.stdout is not None and login.stdin is not None
            said = login.stdout.read()
            assert said == f"{launch_dir}\ntag {tag}\n{swept_marker(tag)}  \n", said
            assert login.wait(timeout=30) == 3
            login.stdin.close()  # the connection closes after the exit status, as sshd's does
            login.stdout.close()
        time.sleep(0.5)
        assert other.poll() is None, "a guard ran its stop after a normal end"
    finally:
        other.kill()
        other.wait()
    assert not list(tmp_path.rglob("pwned"))  # the odd directory name ran nothing


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_what_the_script_left_running_is_stopped_at_its_end_and_said_so(launch_dir, shell):
    """A daemon the script started outlives it: the wrapper stops it (dtrun need not log in
    again) and says that nothing is left, on its last line."""
    (launch_dir / "node-0.sh").write_text("setsid sleep 600 >/dev/null 2>&1 &\necho started\n")
    tag = f"{secrets.token_hex(4)}-0"
    login = subprocess.Popen(
        [shell, "-c", wrapper(launch_dir, "node-0.sh", tag)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert login.stdout is not None
        said = login.stdout.read().splitlines()
        assert login.wait(timeout=30) == 0
        assert said[0] == "started" and said[-1].split() == [swept_marker(tag)], said
        assert ours(tag) == []
    finally:
        for proc in ours(tag):
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(login.pid, signal.SIGKILL)
        login.wait()


@pytest.mark.parametrize("python", [sys.executable, "/nonexistent/bin/python"])
def test_a_daemon_without_the_tag_is_stopped_at_the_script_s_end_where_python_is(
    launch_dir, python
):
    """A helper started with a cleared environment and a double fork carries no tag: the reaper
    it was reparented to stops it. A node without the launch's python runs the script as
    before, and the daemon outlives it, as it did."""
    (launch_dir / "node-0.sh").write_text(
        "env -i setsid sh -c 'sleep 600 </dev/null >/dev/null 2>&1 & echo $!'\nexit 3\n"
    )
    tag = f"{secrets.token_hex(4)}-0"
    login = subprocess.Popen(
        ["sh", "-c", wrapper(launch_dir, "node-0.sh", tag, python)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    daemon = None
    try:
        assert login.stdout is not None
        daemon = int(login.stdout.readline())
        said = login.stdout.read().splitlines()
        assert login.wait(timeout=30) == 3
        assert said[-1].split() == [swept_marker(tag)], said
        assert ended(daemon) is (python == sys.executable)
    finally:
        if daemon is not None and not ended(daemon):
            os.kill(daemon, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(login.pid, signal.SIGKILL)
        login.wait()


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_script_ended_by_a_signal_reports_128_plus_it(launch_dir, shell):
    (launch_dir / "node-0.sh").write_text("kill -TERM $$\n")
    done = subprocess.run(
        [shell, "-c", wrapper(launch_dir, "node-0.sh", secrets.token_hex(4))],
        stdin=subprocess.PIPE, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_when_the_input_closes_the_guard_stops_every_process_of_the_launch(launch_dir, shell):
    # a child in a session of its own, as torchrun's workers are
    (launch_dir / "node-0.sh").write_text("setsid sleep 600 &\necho started\nwait\n")
    tag = secrets.token_hex(4)
    login = subprocess.Popen(
        [shell, "-c", wrapper(launch_dir, "node-0.sh", tag)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert login.stdout is not None and login.stdout.readline() == "started\n"
        wait_for(lambda: len(ours(tag)) == 3, timeout=10, what="the reaper, bash and sleep")
        assert login.stdin is not None
        login.stdin.close()  # sshd closes it when dtrun's connection goes
        wait_for(lambda: ours(tag) == [], timeout=15, what="the guard's stop")
        assert login.wait(timeout=10) in (128 + signal.SIGTERM, 128 + signal.SIGKILL)
    finally:  # whatever the guard left, a failing run of this test leaves nothing
        for proc in ours(tag):
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(login.pid, signal.SIGKILL)
        login.wait()


def test_the_login_shell_gets_one_line_any_shell_reads_alike(launch_dir):
    """No quote, backslash, $ or ; of the directory or the script reaches the login shell:
    fish and csh read it as sh does."""
    line = wrapper(launch_dir, "node-0.sh", "t3")
    assert re.fullmatch(ONE_LINE, line), line


def test_the_wrapper_passes_shellcheck_as_sh(launch_dir):
    shellcheck = require_tool("shellcheck")
    found = re.fullmatch(ONE_LINE, wrapper(launch_dir, "node-0.sh", "t3"))
    assert found is not None
    carried = found.group(1)
    checked = subprocess.run(
        [shellcheck, "--shell=sh", "--severity=style", "-"],
        input=base64.b64decode(carried).decode(), text=True, capture_output=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout
