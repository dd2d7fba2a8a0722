"""A held command (runner/engines/ssh/remote.py): the program check's session, kept for the
launch's staging. Its line is run here under sh (dash) and bash as a node's login shell runs it,
with no sshd: the script's output and exit code come before the held marker, then `stage` makes
the session the staging's `sh -s`, and the end of the input, or any other line, ends it having
run nothing more."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

from dtrun.engines.ssh.remote import STAGE, command_line, end_of_script, held_marker
from dtrun.engines.ssh.transfer import put_script


def _start(shell: str, script: str) -> tuple[subprocess.Popen[str], str]:
    token = secrets.token_hex(8)
    node = subprocess.Popen(
        [shell, "-c", command_line(token, hold=True)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert node.stdin is not None
    node.stdin.write(f"{script}\n{end_of_script(token)}\n")
    node.stdin.flush()
    return node, token


def _until_held(node: subprocess.Popen[str], token: str) -> tuple[list[str], str]:
    """The script's lines, and what follows the marker (its exit code), read as dtrun does:
    nothing is written to the session before the marker."""
    assert node.stdout is not None
    lines: list[str] = []
    while line := node.stdout.readline():
        if line.startswith(held_marker(token)):
            return lines, line[len(held_marker(token)) :].strip()
        lines.append(line.rstrip("\n"))
    raise AssertionError(f"no held marker; output {lines}")


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_held_command_says_its_exit_code_then_stages_the_files_sent_after_stage(tmp_path, shell):
    node, token = _start(shell, "echo checked\necho to-stderr >&2\nexit 3")
    lines, status = _until_held(node, token)
    assert (lines, status) == (["checked"], "3")  # stderr on its own pipe here (dtrun merges it)
    target = tmp_path / "launch" / "node-0.sh"
    out, err = node.communicate(STAGE + put_script({str(target): (b"echo hi\n", 0o700)}))
    assert (node.returncode, out, err) == (0, "", "to-stderr\n")
    assert target.read_bytes() == b"echo hi\n"
    assert oct(target.stat().st_mode & 0o777) == oct(0o700)


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("then", ["", "echo not-stage\n"])
def test_a_held_command_whose_input_ends_or_says_anything_else_runs_nothing_more(
    tmp_path, shell, then
):
    node, token = _start(shell, "exit 0")
    assert _until_held(node, token) == ([], "0")
    ran = tmp_path / "ran"
    out, _ = node.communicate(f"{then}touch {ran}\n")
    assert node.returncode == 0 and out == ""
    assert not ran.exists()


def test_a_staging_that_fails_in_a_held_session_ends_it_with_the_failure(tmp_path: Path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    node, token = _start("sh", "true")
    _until_held(node, token)
    _, err = node.communicate(STAGE + put_script({str(blocker / "x.sh"): (b"x", 0o700)}))
    assert node.returncode != 0
    assert "Not a directory" in err or "File exists" in err
