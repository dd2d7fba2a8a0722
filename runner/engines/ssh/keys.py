"""The client keys a node's login offers, loaded once per command (docs/clusters.md,
"Connections").

asyncssh loads the keys again for every connection it opens (connection.py,
SSHClientConnectionOptions.prepare), and loading an RSA private key runs OpenSSL's key check:
127 ms of CPU each time on the development VM, about 33 s at 256 nodes. The keys are chosen as
asyncssh (and `ssh`) would choose them: the hosts file's `key:`, else a stack's key, else the
IdentityFile of ~/.ssh/config, else the default ~/.ssh/id_* files. The agent is still asked.

A `key:` that cannot be read or is encrypted is a usage error (exit 2): dtrun logs into every
node at once and asks for no passphrase. An IdentityFile of the config that is missing or is
no private key is skipped, as `ssh` skips it; an encrypted one is left to the agent.

A login the node refuses is a usage error too (``login_refused``): the key or user is wrong,
or too many keys were offered.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from dtrun.engines.ssh.endpoint import Endpoint
from dtrun.errors import UsageError
from dtrun.spec.cluster import Inventory


class SshLoginError(UsageError):
    """The node refused the user or key: the hosts file or stack settings are wrong."""


_FALLBACK = "leave `key:` out to use ~/.ssh/config, your default keys and your ssh agent"


class ClientKeys:
    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self._loaded: dict[object, list[Any]] = {}

    def of(self, target: Endpoint) -> list[Any]:
        """The key pairs ``target``'s login offers (the same list for every node alike)."""
        ssh = self.inventory.ssh
        certs, only = target.certificate_files, target.identities_only
        how: tuple[object, ...]
        if target.key_path:
            how = ("given", target.key_path, certs, only)
        elif ssh is not None and ssh.private_key:
            how = ("stack", ssh.private_key)
        else:
            how = ("config", target.identity_files, certs, only)
        if how not in self._loaded:
            self._loaded[how] = self._load(how)
        return self._loaded[how]

    @staticmethod
    def _load(how: tuple[Any, ...]) -> list[Any]:
        import asyncssh
        from asyncssh.public_key import load_default_keypairs

        if how[0] == "stack":
            try:
                return [asyncssh.import_private_key(how[1])]
            except ValueError as exc:  # asyncssh.KeyImportError; its words hold no key text
                raise UsageError(
                    "the stack's outputs hold an ssh_private_key dtrun cannot use",
                    why=f"{exc} (a stack made by `dtrun up` exports an unencrypted OpenSSH key)",
                    fix="save the outputs again with `dtrun outputs --stack NAME --save FILE`, "
                    "or correct the stack's key",
                ) from None
        if how[0] == "given":
            _, path, certs, only = how
            try:
                return list(asyncssh.load_keypairs([path], None, list(certs), only, False))
            except (OSError, ValueError) as exc:  # asyncssh.KeyImportError is a ValueError
                raise _unusable(path, exc) from None
        _, files, certs, only = how
        if not files:
            return list(load_default_keypairs(None, list(certs)))
        keys: list[Any] = []
        for path in files:
            if not _plain_file(path):  # a FIFO hung the read for good, /dev/zero filled memory
                continue
            try:  # one at a time: a missing one is skipped, as `ssh` skips it, and so is one
                # that is no private key (a .pub named by mistake: `ssh` says "invalid format")
                keys += asyncssh.load_keypairs([path], None, list(certs), only, True)
            except (OSError, ValueError):  # asyncssh.KeyImportError is a ValueError
                continue
        return keys


# The most a private key file holds (an RSA 16384 key: 12 kB), for what asyncssh reads whole:
# a config's IdentityFile here, the hosts file's `key:` in hosts.py.
KEY_MOST_BYTES = 1024 * 1024


def _plain_file(path: str) -> bool:
    """A regular file of a key's size (KEY_MOST_BYTES): what asyncssh may read whole. Any
    other is skipped, as a missing one is."""
    try:
        found = Path(path).expanduser().stat()  # ~/.ssh/id_x as the config has it
    except OSError:
        return False
    return stat.S_ISREG(found.st_mode) and found.st_size <= KEY_MOST_BYTES


def _unusable(path: str, exc: Exception) -> UsageError:
    if isinstance(exc, OSError):
        return UsageError(
            f"cannot read the SSH key {path} (the hosts file's `key:`)",
            why=exc.strerror or str(exc),
            fix=f"give the path of a private key that is there, or {_FALLBACK}",
        )
    if "assphrase" in str(exc):
        return UsageError(
            f"the SSH key {path} (the hosts file's `key:`) is encrypted with a passphrase",
            why="dtrun logs into every node at once and asks for no passphrase",
            fix=f"add it to your ssh agent (`ssh-add {path}`) and {_FALLBACK}; or give a key "
            "without a passphrase",
        )
    return UsageError(
        f"cannot use the SSH key {path} (the hosts file's `key:`)",
        why=str(exc),
        fix=f"give the path of an OpenSSH or PEM private key, or {_FALLBACK}",
    )


TOO_MANY_KEYS = "Too many authentication failures"  # OpenSSH's sshd, past its MaxAuthTries


def login_refused(name: str, target: Endpoint, *, too_many_keys: bool) -> SshLoginError:
    if too_many_keys:
        why = (
            "it cut the login off after too many keys (its MaxAuthTries): the ssh agent's keys "
            "are offered before the host's own"
        )
        fix = (
            "add `IdentitiesOnly yes` beside the host's IdentityFile in ~/.ssh/config, or "
            "remove keys from the agent (`ssh-add -D`)"
        )
    else:
        key = target.key_path or "the IdentityFile of ~/.ssh/config, your default keys, the agent"
        why = f"the server refused the key ({key})"
        fix = (
            "check user and key for this host in the hosts file (or the stack's outputs), and "
            "that the key is in the node's authorized_keys"
        )
    return SshLoginError(f"cannot log in to {name} as {target.user!r} ({target})", why=why, fix=fix)
