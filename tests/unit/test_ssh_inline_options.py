"""Without a config file, asyncssh's options are built in dtrun's own thread: the SSH session
loop's executor (runner/engines/ssh/endpoint.py, InlineOptions) builds a connection's at once,
and the hosts file's hosts are resolved one after another (engine.py, _through_ssh_config).
With a config file (whose `Match exec` runs commands), and for any other work, in threads."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import asyncssh
import pytest

from dtrun.engines.ssh import endpoint
from dtrun.engines.ssh.endpoint import InlineOptions
from dtrun.engines.ssh.engine import _hosts_inventory, _through_ssh_config


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


def test_the_hosts_are_resolved_in_dtrun_s_thread_without_a_config_and_in_threads_with_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HOME", str(tmp_path))
    threads: list[int] = []
    resolve = endpoint.endpoint

    def recorded(*args: object) -> endpoint.Endpoint:
        threads.append(threading.get_ident())
        return resolve(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(endpoint, "endpoint", recorded)
    inventory = _hosts_inventory("gpu-a:4,gpu-b:4")
    assert [n.address for n in _through_ssh_config(inventory).nodes] == ["gpu-a", "gpu-b"]
    assert threads == [threading.get_ident()] * 2
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host gpu-b\n  HostName 10.0.0.9\n")
    threads.clear()
    assert [n.address for n in _through_ssh_config(inventory).nodes] == ["gpu-a", "10.0.0.9"]
    assert len(threads) == 2 and threading.get_ident() not in threads
