"""dtrun's workload code goes to a node only where the node lacks it (transfer.py, exec_put):
the staging script asks the node with `sha256sum -c`, and only a node that answers "wanted"
is sent the code, in the same channel. Run here against a real local `sh -s`, through
a connection that speaks asyncssh's process API."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from dtrun.engines.ssh.session import SshError
from dtrun.engines.ssh.transfer import Files, checkable, exec_put, put_script
from dtrun.spec.cluster import Node


class _Completed:
    def __init__(self, status: int, stderr: str) -> None:
        self.exit_status, self.stderr = status, stderr


class _Writer:
    def __init__(self, process: asyncio.subprocess.Process, sent: list[str]) -> None:
        self.process, self.sent = process, sent

    def write(self, text: str) -> None:
        self.sent.append(text)
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode())

    def write_eof(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()


class _Reader:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def readline(self) -> str:
        assert self.process.stdout is not None
        return (await self.process.stdout.readline()).decode()


class _LocalProcess:
    def __init__(self, process: asyncio.subprocess.Process, sent: list[str]) -> None:
        self.process = process
        self.stdin, self.stdout = _Writer(process, sent), _Reader(process)

    async def wait(self, check: bool = False) -> _Completed:
        _, err = await self.process.communicate()
        assert self.process.returncode is not None
        return _Completed(self.process.returncode, err.decode())


class _Local:
    """A node's connection whose `sh -s` runs here; records what was written to it."""

    def __init__(self, path: str | None = None) -> None:
        self.sent: list[str] = []
        self.env = {**os.environ, **({"PATH": path} if path is not None else {})}

    async def create_process(self, command: str, **_: object) -> _LocalProcess:
        assert command == "sh -s"
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-s", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self.env,
        )  # fmt: skip
        return _LocalProcess(process, self.sent)

    async def run(self, command: str, *, input: str, check: bool) -> _Completed:
        process = await self.create_process(command)
        process.stdin.write(input)
        process.stdin.write_eof()
        return await process.wait()


NODE = Node("node-0", "127.0.0.1")


def _put(connection: _Local, files: Files, code: Files) -> bool:
    return asyncio.run(exec_put(connection, NODE, files, code))  # type: ignore[arg-type]


def _code(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        f"{root}/code/dtrun/__init__.py": (b"# dtrun\n", 0o644),
        f"{root}/code/dtrun/workloads/train.py": (b"print('train')\n" * 500, 0o644),
    }


def test_a_node_without_the_code_gets_it_and_a_node_with_it_is_not_sent_it_again(tmp_path):
    code = _code(tmp_path)
    files = {f"{tmp_path}/runs/r0/node-0.sh": (b"true\n", 0o700)}
    first = _Local()
    assert _put(first, files, code) is True
    for path, (content, mode) in code.items():
        assert Path(path).read_bytes() == content
        assert stat.S_IMODE(Path(path).stat().st_mode) == mode
    again = _Local()
    assert _put(again, files, code) is False
    assert not any("cHJpbnQo" in chunk for chunk in again.sent)  # base64 of "print("
    assert any("cHJpbnQo" in chunk for chunk in first.sent)
    assert Path(next(iter(files))).read_bytes() == b"true\n"  # the launch's own files still go


def test_a_changed_or_missing_code_file_is_sent_again(tmp_path):
    code = _code(tmp_path)
    _put(_Local(), {}, code)
    first, second = list(code)
    Path(second).write_bytes(b"edited on the node\n")
    assert _put(_Local(), {}, code) is True
    assert Path(second).read_bytes() == code[second][0]
    Path(first).unlink()
    assert _put(_Local(), {}, code) is True
    assert Path(first).read_bytes() == code[first][0]


def test_a_node_without_sha256sum_is_sent_the_code_every_time(tmp_path):
    code = _code(tmp_path)
    bin_dir = tmp_path / "bin"  # the tools the script needs, without sha256sum
    bin_dir.mkdir()
    for tool in ("base64", "mkdir", "chmod", "mv", "rm"):
        (bin_dir / tool).symlink_to(f"/usr/bin/{tool}" if Path(f"/usr/bin/{tool}").exists()
                                    else f"/bin/{tool}")  # fmt: skip
    _put(_Local(), {}, code)
    assert _put(_Local(path=str(bin_dir)), {}, code) is True


def test_a_path_sha256sum_would_escape_is_never_checked_and_always_sent(tmp_path):
    odd = tmp_path / "work\\dir"
    code = _code(odd)
    assert not checkable(code)
    assert _put(_Local(), {}, code) is True
    assert _put(_Local(), {}, code) is True
    assert Path(next(iter(code))).read_bytes() == b"# dtrun\n"


def test_a_failed_write_names_the_node_and_sends_no_code(tmp_path):
    (tmp_path / "blocker").write_text("a file where a directory should be")
    files = {f"{tmp_path}/blocker/node-0.sh": (b"true\n", 0o700)}
    local = _Local()
    with pytest.raises(SshError, match="node-0"):
        _put(local, files, _code(tmp_path))
    assert not (tmp_path / "code").exists()


class _LoginScriptExits(_Local):
    """A node whose login script (~/.bashrc) exits 3 before `sh -s` starts: nothing said."""

    async def create_process(self, command: str, **_: object) -> _LocalProcess:
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", "exit 3", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return _LocalProcess(process, self.sent)


def test_a_staging_ended_before_sh_said_anything_points_at_the_login_script(tmp_path):
    files = {f"{tmp_path}/runs/r0/node-0.sh": (b"true\n", 0o700)}
    with pytest.raises(SshError) as failed:
        _put(_LoginScriptExits(), files, {})
    assert "`sh -s` exited 3" in failed.value.why
    assert "said nothing" in failed.value.why
    assert "~/.bashrc" in failed.value.fix
    assert "dtrun exec --hosts ... -- true" in failed.value.fix


@pytest.mark.parametrize("signal", ["HUP", "TERM", "PIPE"])
def test_a_staging_stopped_by_a_signal_mid_file_leaves_no_part_file(tmp_path, signal):
    """A node's logind ending the session's processes, or an admin's kill, while a file is
    half written: sh, killed by the signal, ran no EXIT trap and left `x.sh.dtrun-part.PID`."""
    import subprocess

    script = put_script({f"{tmp_path}/x.sh": (b"x" * 100_000, 0o700)})
    # the signal while the file is half made: written, not yet renamed
    script = script.replace("chmod 700", f"kill -s {signal} $$\nchmod 700", 1)
    subprocess.run(["sh", "-s"], input=script, text=True, capture_output=True, check=False)
    assert list(tmp_path.iterdir()) == []
