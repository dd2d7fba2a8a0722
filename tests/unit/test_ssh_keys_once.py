"""A session loads each private key once, not once per node (runner/engines/ssh/session.py,
_client_keys): given a path, asyncssh reads and checks the key for every connection, and the
check of an RSA key costs about 127 ms of CPU here (docs/clusters.md, "Connections").

asyncssh.connect is replaced by what it does first, building the connection's options (where
the keys are loaded); nothing is connected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest

from dtrun.engines.ssh.endpoint import endpoint
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.session import SshSession
from dtrun.errors import UsageError


def _key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The key files asyncssh reads, and asyncssh.connect as far as its options."""
    seen: list[str] = []
    read_file = asyncssh.public_key.read_file  # type: ignore[attr-defined]

    def counting(filename: str) -> bytes:
        seen.append(str(filename))
        return bytes(read_file(filename))

    async def options_only(host: str, port: object = (), **kwargs: object) -> object:
        await asyncssh.SSHClientConnectionOptions.construct(None, host=host, port=port, **kwargs)
        return object()

    monkeypatch.setattr(asyncssh.public_key, "read_file", counting)
    monkeypatch.setattr(asyncssh, "connect", options_only)
    return seen


def _connect_all(session: SshSession, nodes: slice = slice(None)) -> None:
    async def every() -> None:
        for node in session.inventory.nodes[nodes]:
            await session._connect(node.name, endpoint(session.inventory, node), None)

    session.call(every())


def test_a_key_file_is_read_once_for_every_node(tmp_path, reads, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config of this machine's
    key = _key(tmp_path / "cluster_key")
    text = f"user: u\nkey: {key}\nhosts: [10.0.0.4, 10.0.0.5, 10.0.0.6, 10.0.0.7]\n"
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))
    with SshSession(inventory) as session:
        _connect_all(session, slice(0, 1))
        assert str(key) in reads
        first = len(reads)
        _connect_all(session, slice(1, None))
    assert len(reads) == first  # no key file read again for the other three nodes


def test_the_default_keys_and_a_configs_identity_file_are_read_once_too(
    tmp_path, reads, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    default = _key(tmp_path / ".ssh" / "id_ed25519")
    chosen = _key(tmp_path / "chosen_key")
    (tmp_path / ".ssh" / "config").write_text(f"Host 10.0.1.*\n  IdentityFile {chosen}\n")
    text = "user: u\nhosts: [10.0.0.4, 10.0.0.5, 10.0.1.4, 10.0.1.5]\n"
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))
    with SshSession(inventory) as session:
        _connect_all(session, slice(0, 1))  # 10.0.0.4: the default keys
        _connect_all(session, slice(2, 3))  # 10.0.1.4: its config's IdentityFile
        assert str(default) in reads and str(chosen) in reads
        first = len(reads)
        _connect_all(session)
        keys = {
            node.address: session._client_keys(endpoint(inventory, node))
            for node in inventory.nodes
        }
    assert len(reads) == first
    # each host offers the key its config names, as `ssh` would
    assert keys["10.0.0.4"][0].public_data == asyncssh.read_private_key(default).public_data
    assert keys["10.0.1.5"][0].public_data == asyncssh.read_private_key(chosen).public_data


def _given(tmp_path: Path, key: Path) -> SshSession:
    text = f"user: u\nkey: {key}\nhosts: [10.0.0.4]\n"
    return SshSession(parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin")))


def test_a_missing_key_file_is_a_usage_error_not_an_unreachable_node(tmp_path, reads, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with _given(tmp_path, tmp_path / "gone") as session, pytest.raises(UsageError) as caught:
        _connect_all(session)
    assert caught.value.exit_code == 2
    assert f"cannot read the SSH key {tmp_path / 'gone'}" in caught.value.message
    assert "No such file" in caught.value.message and "leave `key:` out" in caught.value.message


def test_a_key_with_a_passphrase_is_a_usage_error_that_says_to_use_the_agent(
    tmp_path, reads, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path))
    key = tmp_path / "locked"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret", "-f", str(key)], check=True
    )
    with _given(tmp_path, key) as session, pytest.raises(UsageError) as caught:
        _connect_all(session)
    assert caught.value.exit_code == 2
    assert "is encrypted with a passphrase" in caught.value.message
    assert f"ssh-add {key}" in caught.value.message and "s3cret" not in caught.value.message


def test_a_file_that_is_no_key_is_a_usage_error(tmp_path, reads, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.txt").write_text("not a key\n")
    with _given(tmp_path, tmp_path / "notes.txt") as session, pytest.raises(UsageError) as caught:
        _connect_all(session)
    assert f"cannot use the SSH key {tmp_path / 'notes.txt'}" in caught.value.message


def test_a_missing_identity_file_of_the_config_is_skipped_as_ssh_skips_it(
    tmp_path, reads, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    there = _key(tmp_path / "there_key")
    (tmp_path / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {tmp_path / 'gone_key'}\n  IdentityFile {there}\n"
    )
    text = "user: u\nhosts: [10.0.0.4]\n"
    inventory = parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin"))
    with SshSession(inventory) as session:
        _connect_all(session)
        keys = session._client_keys(endpoint(inventory, inventory.nodes[0]))
    assert [key.public_data for key in keys] == [asyncssh.read_private_key(there).public_data]


@pytest.mark.parametrize(
    ("hostname", "said"),
    [
        ("'$(touch pwned)x'", "is not a host name or address"),
        ("-oProxyCommand=id", "starts with '-', which ssh would read as an option"),
        ("h" * 254, "is 254 characters long"),
    ],
)
def test_a_hostname_of_the_user_ssh_config_is_held_to_a_hosts_file_s_rules(
    tmp_path, monkeypatch, hostname, said
):
    """It became the node's address (MASTER_ADDR, the ssh-keyscan dtrun suggests) unchecked."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(f"Host alias\n  HostName {hostname}\n")
    inventory = parse_hosts_file("hosts: [alias]\n", "hosts.yaml", Defaults("u", "/usr/bin"))
    with pytest.raises(UsageError) as caught:
        endpoint(inventory, inventory.nodes[0])
    assert caught.value.exit_code == 2
    assert "~/.ssh/config gives alias the HostName" in caught.value.message
    assert said in caught.value.why


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"config": "Include ~/.ssh/config\n"}, "Include lines go round in a circle"),
        ({"config": "Include ~/.ssh/a\n", "a": "Include ~/.ssh/config\n"}, "in a circle"),
        ({"config": "Host *\n  Port notanumber\n"}, "Invalid Port integer value: notanumber"),
        ({"config": "Host *\n  User \xff\n"}, "codec can't decode byte 0xff"),
    ],
)
def test_a_broken_user_ssh_config_is_a_usage_error_not_a_traceback(
    tmp_path, monkeypatch, files, said
):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    for name, text in files.items():
        (tmp_path / ".ssh" / name).write_bytes(text.encode("latin-1"))
    inventory = parse_hosts_file("hosts: [10.0.0.4]\n", "hosts.yaml", Defaults("u", "/usr/bin"))
    with pytest.raises(UsageError) as caught:
        endpoint(inventory, inventory.nodes[0])
    assert caught.value.exit_code == 2
    assert said in f"{caught.value.message} {caught.value.why}"
    assert "cannot read the ssh config for 10.0.0.4" in caught.value.message


@pytest.mark.parametrize(
    ("config", "interval", "count"),
    [
        ("", 15, 3),  # dtrun's own: a node silent for 45 s is lost
        ("Host 10.0.0.*\n  ServerAliveInterval 3\n  ServerAliveCountMax 2\n", 3, 2),
        ("Host *\n  ServerAliveInterval 0\n", 0, 3),  # never, as the user's ssh would
    ],
)
def test_a_node_that_stops_answering_is_lost_after_the_user_s_server_alive_settings(
    tmp_path, monkeypatch, config, interval, count
):
    """A hung node keeps its connection open; the keepalives name it lost. ~/.ssh/config's
    ServerAliveInterval and ServerAliveCountMax set when, as for `ssh` (before: always 15 s)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(config)
    built: list[asyncssh.SSHClientConnectionOptions] = []

    async def options_only(host: str, port: object = (), **kwargs: object) -> object:
        built.append(
            await asyncssh.SSHClientConnectionOptions.construct(
                None, host=host, port=port, **kwargs
            )
        )
        return object()

    monkeypatch.setattr(asyncssh, "connect", options_only)
    inventory = parse_hosts_file("hosts: [10.0.0.4]\n", "hosts.yaml", Defaults("u", "/usr/bin"))
    with SshSession(inventory) as session:
        _connect_all(session)
    assert [(o.keepalive_interval, o.keepalive_count_max) for o in built] == [(interval, count)]


def test_an_identity_file_of_the_ssh_config_that_is_a_fifo_is_skipped_not_read(tmp_path):
    """~/.ssh/config's IdentityFile naming a FIFO hung every command for good (SIGTERM too);
    /dev/zero filled the memory (not tried here: the old code would fill this machine's). Such
    a file is skipped, as a missing one is."""
    import os
    import threading

    from dtrun.engines.ssh.endpoint import Endpoint
    from dtrun.engines.ssh.keys import ClientKeys
    from dtrun.spec.cluster import Inventory

    path = tmp_path / "id_ed25519"
    os.mkfifo(path)
    target = Endpoint("a", 22, "me", None, identity_files=(str(path),))
    keys = ClientKeys(Inventory(source="hosts:h", nodes=(), python_bin="/p", code_dir="/c"))
    loaded: list[object] = []
    reader = threading.Thread(target=lambda: loaded.append(keys.of(target)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():  # the old reader: let it go, so the run can end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert loaded == [[]]


def test_an_identity_file_of_the_ssh_config_under_home_is_read(tmp_path, monkeypatch):
    """~/.ssh/config's `IdentityFile ~/.ssh/id_x` comes with its ~: the check for a plain
    file took it as it was, found no such file, and skipped the key (the IdentitiesOnly e2e
    login then failed)."""
    from dtrun.engines.ssh.endpoint import Endpoint
    from dtrun.engines.ssh.keys import ClientKeys
    from dtrun.spec.cluster import Inventory

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    _key(tmp_path / ".ssh" / "id_x")
    target = Endpoint("a", 22, "me", None, identity_files=("~/.ssh/id_x",))
    keys = ClientKeys(Inventory(source="hosts:h", nodes=(), python_bin="/p", code_dir="/c"))
    assert len(keys.of(target)) == 1
