"""A host's ProxyCommand as dtrun resolves and runs it (runner/engines/ssh/proxy.py): which of
ProxyCommand and ProxyJump applies, what a failure says, and asyncio's raw warnings kept off
the terminal. The connections themselves: tests/e2e/test_ssh_proxycommand.py."""

from __future__ import annotations

import asyncio
import logging
import shlex
from pathlib import Path

import pytest

from dtrun import redact
from dtrun.engines.ssh.endpoint import resolve
from dtrun.engines.ssh.proxy import MARK, ProxyLoop, ProxyRun
from dtrun.redact import REDACTED


@pytest.fixture
def ssh_config(tmp_path, monkeypatch):
    """Writes ~/.ssh/config of a HOME of its own."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()

    def write(text: str) -> None:
        (tmp_path / ".ssh" / "config").write_text(text)

    return write


@pytest.mark.parametrize(
    ("config", "jump", "command"),
    [
        ("Host n\n  ProxyCommand nc %h %p\nHost *\n  ProxyJump bastion\n", "", ("nc", "n", "22")),
        ("Host n\n  ProxyJump bastion\nHost *\n  ProxyCommand nc %h %p\n", "bastion", ()),
        ("Host n\n  ProxyCommand none\nHost *\n  ProxyJump bastion\n", "", ()),
        ("Host n\n  ProxyJump none\nHost *\n  ProxyCommand nc %h %p\n", "", ()),
    ],
    ids=["command-first", "jump-first", "command-none", "jump-none"],
)
def test_the_first_of_proxycommand_and_proxyjump_applies_as_in_openssh(
    ssh_config, config, jump, command
):
    """`ssh -G n` says the same for each: OpenSSH ignores the later one, `none` included.
    Before, the ProxyJump applied whatever came first."""
    ssh_config(config)
    target = resolve("n", None, None, None)
    assert (target.proxy_jump, target.proxy_command) == (jump, command)
    assert target.proxy_written == ("nc n 22" if command else "")


def test_a_failed_proxycommand_says_its_last_lines_with_secrets_hidden(tmp_path):
    token = "ghp_" + "a1B2" * 9
    target_stderr = tmp_path / "stderr"
    target_stderr.write_text("starting\n\n" + "x" * 500 + f"\nbastion refused {token}\n")
    run = ProxyRun("ssh -W n:22 bastion", (MARK, str(target_stderr), "ssh"), str(target_stderr))
    said = run.said()
    assert said.startswith('; its ProxyCommand `ssh -W n:22 bastion` said "starting | xxx')
    assert "…" in said and len(said) < 400  # a long line cut
    assert token not in said and "bastion refused" in said
    run.remove()
    assert not target_stderr.exists()
    assert ProxyRun().said() == ""  # no ProxyCommand: nothing added


@pytest.mark.parametrize("secret", ["hunter2pw", "s3cr3t-Pass-0042", "aB9xY7wQ2zLm5Rt8"])
def test_a_secret_a_line_break_cuts_in_a_proxycommand_s_stderr_is_hidden(tmp_path, secret):
    """Its last lines are quoted apart, joined by " | ": each part of a secret the command
    wrapped showed, where a log's lines (runner/execute/failure.py) were masked together."""
    redact.remember_secrets([secret])
    stderr = tmp_path / "stderr"
    stderr.write_text(f"auth with {secret[:5]}\n{secret[5:]} refused\n")
    said = ProxyRun("ssh -W n:22 bastion", (MARK, str(stderr), "ssh"), str(stderr)).said()
    assert secret[:5] not in said and secret[5:] not in said
    assert "auth with" in said and "refused" in said


@pytest.mark.parametrize(
    "written",
    ["sshpass -p Hunter2pw ssh -W n:22 bastion", "sh -c 'curl -su bob:Hunter2pw https://b/n'"],
)
def test_a_password_in_a_proxycommand_s_words_is_hidden_where_it_is_named(tmp_path, written):
    """The error quotes the command as ~/.ssh/config writes it: a tool's password in it (not a
    secret dtrun was given, nor a token's shape) showed there."""
    stderr = tmp_path / "stderr"
    stderr.write_text(f"debug1: Executing proxy command: exec {written}\nPermission denied\n")
    argv = (MARK, str(stderr), *shlex.split(written))
    said = ProxyRun(written, argv, str(stderr)).said()
    assert "Hunter2pw" not in said and "Permission denied" in said
    assert said.startswith(f"; its ProxyCommand `{written.replace('Hunter2pw', REDACTED)}`")


def test_asyncio_s_early_reaping_warning_is_kept_off_the_terminal(ssh_config, caplog):
    """asyncio's transport may reap an exited command before its child watcher does, which
    then logged "Unknown child process pid N, will report returncode 255", printed raw."""
    ssh_config("Host n\n  ProxyCommand nc %h %p\n")
    ProxyRun.of(resolve("n", None, None, None), tunneled=False).remove()
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.warning("Unknown child process pid %d, will report returncode 255", 4321)
    asyncio_logger.warning("another asyncio warning")
    # what reaches any handler (Python's last resort prints to stderr)
    assert [record.getMessage() for record in caplog.records] == ["another asyncio warning"]


def test_a_command_s_stderr_goes_to_its_file_and_its_end_is_waited_for(tmp_path):
    """The loop writes the marked command's stderr to its file (not the pipe asyncssh reads
    into the SSH stream), and closing waits until its end is known: else asyncio printed
    "Loop ... that handles pid N is closed" raw."""
    stderr = tmp_path / "stderr"

    async def run() -> tuple[bytes, int | None]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, ProxyLoop)
        out: list[bytes] = []

        class Read(asyncio.SubprocessProtocol):
            def pipe_data_received(self, fd: int, data: bytes) -> None:
                out.append(data)

        command = ("sh", "-c", "echo said >&2; echo out; exec sleep 30")
        transport, _ = await loop.subprocess_exec(Read, MARK, str(stderr), *command)
        while not stderr.read_text():
            await asyncio.sleep(0.01)
        transport.close()  # as asyncssh closes it: SIGKILL
        await loop.proxies_ended()
        return b"".join(out), transport.get_returncode()

    with asyncio.Runner(loop_factory=ProxyLoop) as runner:
        printed, returncode = runner.run(run())
    assert b"said" not in printed and Path(stderr).read_text() == "said\n"
    assert returncode is not None
