"""Where a node is reached over SSH: host, port, user, key, jump host or ProxyCommand, resolved
through the user's own ~/.ssh/config (asyncssh's parser) as OpenSSH would."""

from __future__ import annotations

import functools
import getpass
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dtrun.cluster.names import host_problem, is_port
from dtrun.engines.common.threads import DaemonThreads
from dtrun.errors import UsageError
from dtrun.spec.cluster import Inventory, Node

T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """Where one SSH login goes, as OpenSSH's `ssh HOST` would resolve it."""

    host: str  # as given: a name, an address, or a Host alias of the user's ~/.ssh/config
    port: int
    user: str
    key_path: str | None
    hostname: str = ""  # the config's HostName for ``host``; empty: ``host`` itself
    proxy_jump: str = ""  # the config's ProxyJump for ``host`` ("a,b": through a, then b)
    # the config's ProxyCommand for ``host``: as asyncssh runs it (split, %h %p %r expanded),
    # and as written (expanded), for messages; at most one of it and proxy_jump is set
    proxy_command: tuple[str, ...] = ()
    proxy_written: str = ""
    # the ciphers offered, in order; empty: as the config's Ciphers say (see _ciphers)
    ciphers: tuple[str, ...] = ()
    # the config's IdentityFile, CertificateFile and IdentitiesOnly for ``host``: the keys
    # asyncssh would load for each connection, loaded once instead (session.py, _client_keys)
    identity_files: tuple[str, ...] = ()
    certificate_files: tuple[str, ...] = ()
    identities_only: bool = False
    # the config's ServerAliveInterval and ServerAliveCountMax: a node that stops answering
    # (hung, or gone without closing its connection) is lost after their product; 0: never
    alive_interval: float = 15.0
    alive_count_max: int = 3

    @property
    def address(self) -> str:
        return self.hostname or self.host

    @property
    def known_hosts_name(self) -> str:
        """How known_hosts names this host: plain on port 22, [host]:port otherwise."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"

    def __str__(self) -> str:
        alias = f" ({self.host})" if self.address != self.host else ""
        return f"{self.user}@{self.address}:{self.port}{alias}"


class InlineOptions(DaemonThreads):
    """The session loop's default executor: asyncssh builds each connection's options in it
    (SSHClientConnectionOptions.construct), a thread's round trip a node. Without a config
    file that is arithmetic, no I/O: it runs at once, in the loop's thread, 0.2 to 0.4 ms of
    dtrun's CPU a node less (issue 41). Options read from a config (its `Match exec` runs
    commands), name lookups and the rest go to the threads, as before: daemon threads, so one
    stuck there (a `Match exec` that never ends) does not hold dtrun past a stop."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        import asyncssh

        if not (
            isinstance(fn, functools.partial)
            and fn.func is asyncssh.SSHClientConnectionOptions
            and fn.keywords.get("config") == []
        ):
            return super().submit(fn, *args, **kwargs)
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # asyncssh's to raise, in the connecting task
            done.set_exception(exc)
        return done


def user_ssh_config() -> list[str]:
    """The user's OpenSSH client config, read for every host as `ssh` reads it."""
    path = Path("~/.ssh/config").expanduser()
    return [str(path)] if path.is_file() else []


def resolve(host: str, port: int | None, user: str | None, key_path: str | None) -> Endpoint:
    """``host`` as `ssh` would reach it: what is given explicitly wins (as `ssh -p -l` does),
    the rest comes from ~/.ssh/config (HostName, Port, User), then 22 and the local user.
    Once per host and config file as it is now: the engine and the session both ask."""
    config = user_ssh_config()
    stamp = tuple((path, Path(path).stat().st_mtime_ns) for path in config)
    return _resolve(host, port, user, key_path, stamp)


@functools.lru_cache(maxsize=8192)
def _resolve(
    host: str,
    port: int | None,
    user: str | None,
    key_path: str | None,
    config: tuple[tuple[str, int], ...],
) -> Endpoint:
    import asyncssh

    explicit: dict[str, Any] = {}
    if port is not None:
        explicit["port"] = port
    if user is not None:
        explicit["username"] = user
    try:
        options = asyncssh.SSHClientConnectionOptions(
            host=host, config=[path for path, _ in config], client_keys=None, **explicit
        )
    except (OSError, ValueError, asyncssh.Error, RecursionError) as exc:
        why = str(exc)
        if isinstance(exc, RecursionError):  # asyncssh follows Include without a depth limit
            why = "its Include lines go round in a circle: a file includes itself, or one that "
            why += "includes it (OpenSSH stops at 16 levels: too many recursive includes)"
        raise UsageError(
            f"cannot read the ssh config for {host}",
            why=why,
            fix="fix ~/.ssh/config (`ssh -G HOST` shows what OpenSSH makes of it)",
        ) from None
    hostname = str(options.host)
    if hostname != host and (problem := host_problem(hostname)) is not None:
        # a hosts file's host is held to this: the HostName becomes the node's address, in
        # every script, MASTER_ADDR and the commands dtrun suggests (docs/security.md)
        raise UsageError(
            f"~/.ssh/config gives {host} the HostName {hostname!r}",
            why=f"it {problem}",
            fix="fix that HostName in ~/.ssh/config (`ssh -G HOST` shows what OpenSSH makes of it)",
        )
    config_of: Any = options.config  # the parsed config for this host
    jump, command = _jump_or_command(config_of, options.tunnel, options.proxy_command)
    return Endpoint(
        host,
        int(options.port),
        str(options.username or getpass.getuser()),
        key_path,
        hostname if hostname != host else "",
        jump,
        command,
        str(config_of.get("ProxyCommand") or "") if command else "",
        _ciphers(options.encryption_algs),
        tuple(str(path) for path in config_of.get("IdentityFile", ())),
        tuple(str(path) for path in config_of.get("CertificateFile", ())),
        bool(config_of.get("IdentitiesOnly")),
        float(config_of.get("ServerAliveInterval", Endpoint.alive_interval)),
        int(config_of.get("ServerAliveCountMax", Endpoint.alive_count_max)),
    )


def _jump_or_command(config: Any, jump: object, command: object) -> tuple[str, tuple[str, ...]]:
    """The ProxyJump or the ProxyCommand, whichever the config gives first, as OpenSSH takes
    them (readconf.c: each is ignored once the other is set; `none` is a setting too, and
    disables both). asyncssh keeps both and goes through the ProxyJump. Its parsed config
    holds each setting's first value in the order read (a dict)."""
    read = [name for name in getattr(config, "_options", ()) if name in _PROXIES]
    if (read[0] if read else "ProxyJump" if jump else "ProxyCommand") == "ProxyCommand":
        return "", tuple(str(word) for word in command) if isinstance(command, list) else ()
    return (jump if isinstance(jump, str) else ""), ()


_PROXIES = ("ProxyJump", "ProxyCommand")


# AES-GCM before asyncssh's first default, chacha20-poly1305: asyncssh builds several cipher
# objects a packet for chacha (asyncssh/crypto/chacha.py) and one for GCM (crypto/cipher.py),
# about a third of dtrun's CPU a node in a profiled launch (docs/clusters.md, "Connections")
FAST_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def _ciphers(chosen: Sequence[bytes]) -> tuple[str, ...]:
    """The ciphers to offer: asyncssh's defaults with AES-GCM first, or () where the user's
    config names its own Ciphers (asyncssh then offers those, as `ssh` would)."""
    from asyncssh.encryption import get_default_encryption_algs

    defaults = [alg.decode() for alg in get_default_encryption_algs()]
    if [alg.decode() for alg in chosen] != defaults:
        return ()
    return (
        *[alg for alg in FAST_FIRST if alg in defaults],
        *[alg for alg in defaults if alg not in FAST_FIRST],
    )


def jump_endpoint(spec: str, port: int | None, user: str | None, key: str | None) -> Endpoint:
    """One jump host as ProxyJump and the hosts file's `jump:` write it: [USER@]HOST[:PORT]."""
    given_user, _, host = spec.rpartition("@")
    host, _, given_port = host.partition(":")
    if ":" in given_user:  # USER:PASSWORD@HOST: the password is never shown
        raise UsageError(
            f"the jump host {host} is given with a password (USER:PASSWORD@HOST)",
            why="ssh takes no password in a jump host",
            fix="write USER@HOST[:PORT] in the hosts file's `jump:` or ProxyJump, and let the "
            "jump host accept your key",
        )
    if not host or (given_port and not is_port(given_port)):
        raise UsageError(
            f"cannot read the jump host {spec!r}",
            why="a jump host is written [USER@]HOST[:PORT]",
            fix="fix the hosts file's `jump:` or the ProxyJump of ~/.ssh/config",
        )
    return resolve(host, int(given_port) if given_port else port, given_user or user, key)


def endpoint(inventory: Inventory, node: Node) -> Endpoint:
    ssh = inventory.ssh
    if ssh is None:
        raise UsageError(f"{inventory.source} has no SSH access", fix="use --hosts or --stack")
    return resolve(
        node.ssh_host or node.address,
        node.ssh_port or ssh.port,
        node.ssh_user or ssh.user,
        node.ssh_key or ssh.key_path,
    )
