"""The SSH session's host keys (runner/engines/ssh/session.py): parsed once for all its
connections, not once a connection (issue 41: N x N known_hosts lines at N nodes), and read
again once the file has changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.session import SshSession


def _host_key(tmp_path: Path, name: str) -> str:
    key = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
    )  # fmt: skip
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def test_a_session_parses_its_known_hosts_once_and_again_only_when_the_file_changes(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.2]:2222 {_host_key(tmp_path, 'a')}\n")
    text = f"user: u\nport: 2222\nknown_hosts: {known}\nhosts: [127.0.0.2, 127.0.0.3]\n"
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))
    with SshSession(inventory) as session:
        first = session._known_hosts()
        assert session._known_hosts() is first  # the next connection's: the same, parsed once
        assert first.match("127.0.0.3", "", 2222)[0] == []
        with known.open("a") as more:  # what --accept-new-host-keys does
            more.write(f"[127.0.0.3]:2222 {_host_key(tmp_path, 'b')}\n")
        again = session._known_hosts()
        assert again is not first and len(again.match("127.0.0.3", "", 2222)[0]) == 1


def test_a_connection_still_opening_when_the_session_closes_prints_no_traceback(caplog):
    """One node fails at once and the exec ends; another's opening is still under way and
    fails as it is stopped (asyncssh's connect does). Closing the session says nothing: its
    error was never the user's to read, and asyncio's "unhandled exception during shutdown"
    traceback is one (seen under load with a user's Ciphers that no node accepts)."""
    import asyncio

    text = "user: u\nport: 2222\nhosts: [127.0.0.2, 127.0.0.3]\n"
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))
    first, second = inventory.nodes

    async def open_(node):
        if node is first:
            raise ConnectionError("no cipher in common")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise ConnectionError("closed while opening") from None

    async def both(session):
        await asyncio.gather(session.connection(first), session.connection(second))

    session = SshSession(inventory)
    session._open = open_  # type: ignore[method-assign]
    with pytest.raises(ConnectionError, match="no cipher"):
        session.call(both(session))
    session.close()
    assert [r.getMessage() for r in caplog.records] == []  # asyncio's logger: stderr
