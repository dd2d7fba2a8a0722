"""The SSH session loop's executor (runner/engines/ssh/endpoint.py, InlineOptions): asyncssh's
options for a connection without a config file are built at once in the loop's thread; with a
config file (whose `Match exec` runs commands), and any other work, in a thread as before."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import asyncssh
import pytest

from dtrun.engines.ssh.endpoint import InlineOptions


@pytest.fixture
def built_in(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread each options object was built in."""
    threads: list[int] = []

    class Recorded(asyncssh.SSHClientConnectionOptions):
        def __init__(self, *args: object, **kwargs: object) -> None:
            threads.append(threading.get_ident())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(asyncssh, "SSHClientConnectionOptions", Recorded)
    return threads


def _options(
    config: list[str], **kwargs: object
) -> functools.partial[asyncssh.SSHClientConnectionOptions]:
    """What asyncssh.connect submits (SSHClientConnectionOptions.construct)."""
    return functools.partial(
        asyncssh.SSHClientConnectionOptions, None, host="node-0", config=config, **kwargs
    )


def test_options_without_a_config_file_are_built_at_once_in_the_caller_s_thread(built_in):
    with InlineOptions() as executor:
        done = executor.submit(_options([], port=2222, username="someone"))
        assert done.done()
        options = done.result()
    assert built_in == [threading.get_ident()]
    assert (options.port, options.username) == (2222, "someone")


def test_a_bad_option_built_at_once_is_raised_to_whoever_waits_for_it(built_in):
    with InlineOptions() as executor:
        done = executor.submit(_options([], encryption_algs=["no-such-cipher"]))
    assert isinstance(done.exception(), ValueError)
    assert "no-such-cipher" in str(done.exception())


def test_options_read_from_a_config_file_and_other_work_go_to_a_thread(built_in, tmp_path: Path):
    config = tmp_path / "config"
    config.write_text("Host node-0\n  Port 2200\n")
    with InlineOptions() as executor:
        options = executor.submit(_options([str(config)])).result()
        other = executor.submit(threading.get_ident).result()
    assert options.port == 2200
    assert threading.get_ident() not in (*built_in, other)
