"""A connection the node closes during the handshake is tried once more, at once, even where a
session makes one attempt per look (runner/engines/ssh/session.py, _connect): OpenSSH's sshd,
finding no algorithm in common, exits without a word, sometimes before its own offer reaches
dtrun, and the user then saw "cannot reach node-0: Connection lost" (exit 1) in place of the
algorithms named (exit 2). asyncssh.connect is replaced; nothing is connected."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import asyncssh
import pytest

from dtrun.engines.ssh.endpoint import endpoint
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.session import SshAlgorithmsError, SshError, SshSession


def _session(retries: int) -> SshSession:
    text = "user: u\nhosts: [10.0.0.4]\n"
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))
    return SshSession(inventory, retries=retries)


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[list[Exception]]:
    """What each call of asyncssh.connect raises, in turn; the calls made are counted by
    what is left."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config of this machine's
    queue: list[Exception] = []

    async def connect(*args: object, **kwargs: object) -> object:
        raise queue.pop(0)

    monkeypatch.setattr(asyncssh, "connect", connect)
    yield queue


def _connect(session: SshSession) -> None:
    node = session.inventory.nodes[0]
    session.call(session._connect(node.name, endpoint(session.inventory, node), None))


NO_KEX = "No matching key exchange algorithm found, sent diffie-hellman-group1-sha1"


def test_a_close_during_the_handshake_is_tried_again_and_the_algorithms_named(answers):
    answers += [asyncssh.ConnectionLost("Connection lost"), asyncssh.KeyExchangeFailed(NO_KEX)]
    with _session(retries=1) as session, pytest.raises(SshAlgorithmsError) as raised:
        _connect(session)
    assert NO_KEX in raised.value.why
    assert not answers  # both calls made


def test_a_node_that_closes_every_time_is_unreachable_after_two_tries(answers):
    answers += [asyncssh.ConnectionLost("Connection lost")] * 3
    with _session(retries=1) as session, pytest.raises(SshError) as raised:
        _connect(session)
    assert "after 2 attempts" in raised.value.why
    assert len(answers) == 1  # two tries, not three


def test_a_refused_connection_is_not_tried_again_in_one_look(answers):
    answers += [ConnectionRefusedError(111, "Connection refused")] * 2
    with _session(retries=1) as session, pytest.raises(SshError) as raised:
        _connect(session)
    assert "attempts" not in raised.value.why
    assert len(answers) == 1
