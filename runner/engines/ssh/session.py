"""SSH connections to an inventory's nodes (asyncssh), opened once and reused.

One event loop per session (asyncio.Runner), so connections survive between launches of a
sweep. Nodes are reached directly, through the inventory's jump host, or through the ProxyJump
hosts of the user's ~/.ssh/config (each jump host logged into once and shared); host keys are
checked against the stack's known_hosts lines or the user's known_hosts file, and a new key is
only recorded when asked (--accept-new-host-keys), never silently."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from dtrun.engines.ssh.endpoint import Endpoint, endpoint, jump_endpoint, user_ssh_config
from dtrun.engines.ssh.keys import TOO_MANY_KEYS, ClientKeys, login_refused
from dtrun.engines.ssh.proxy import ProxyLoop, ProxyRun
from dtrun.errors import RunError, UsageError
from dtrun.spec.cluster import Inventory, Node

if TYPE_CHECKING:
    import asyncssh

T = TypeVar("T")
Notice = Callable[[str], None]
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class SshError(RunError):
    """A node could not be reached or lost its connection."""


class SshAlgorithmsError(UsageError):
    """The node's sshd and the algorithms offered (the user's ~/.ssh/config) have none in
    common: a setting to change, not a node to wait for."""


class HostKeyError(UsageError):
    """A node's host key is unknown or has changed."""


class SshSession:
    def __init__(
        self,
        inventory: Inventory,
        *,
        accept_new_host_keys: bool = False,
        known_hosts_file: str = DEFAULT_KNOWN_HOSTS,
        concurrency: int = 64,
        connect_timeout: float = 15.0,
        retries: int = 3,
        notice: Notice = lambda message: None,
    ) -> None:
        self.inventory = inventory
        self.accept_new = accept_new_host_keys
        ssh = inventory.ssh
        chosen = ssh.known_hosts_file if ssh and ssh.known_hosts_file else known_hosts_file
        self.known_hosts_file = Path(chosen).expanduser()
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.notice = notice
        self.concurrency = concurrency
        self._runner = asyncio.Runner(loop_factory=ProxyLoop)  # ProxyCommands' stderr apart
        from dtrun.engines.ssh.endpoint import InlineOptions  # asyncssh options, no thread

        self._runner.get_loop().set_default_executor(InlineOptions())
        self._connections: dict[str, asyncssh.SSHClientConnection] = {}
        self._pending: dict[str, asyncio.Task[asyncssh.SSHClientConnection]] = {}
        self._jump: asyncio.Task[asyncssh.SSHClientConnection] | None = None
        self._hops: dict[str, asyncio.Task[asyncssh.SSHClientConnection]] = {}
        self._limit: asyncio.Semaphore | None = None
        self._parsed: tuple[tuple[object, ...], Any] | None = None  # _known_hosts's
        self._keys = ClientKeys(inventory)

    # -- the event loop -------------------------------------------------------------------
    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the session's loop; Ctrl-C cancels it, then KeyboardInterrupt."""
        return self._runner.run(coroutine)

    def close(self) -> None:
        async def close(connections: list[asyncssh.SSHClientConnection]) -> None:
            for connection in connections:
                connection.close()
            await asyncio.gather(*(c.wait_closed() for c in connections), return_exceptions=True)

        async def close_all() -> None:
            await close(list(self._connections.values()))
            jumps = [*self._hops.values(), *([self._jump] if self._jump else [])]
            await close([task.result() for task in jumps if _opened(task)])  # nodes' tunnels
            # openings under way, stopped, their ends read: else asyncio's traceback at close
            loop = cast(ProxyLoop, asyncio.get_running_loop())
            others = loop.stoppable(asyncio.all_tasks() - {asyncio.current_task()})
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            await loop.proxies_ended()

        with contextlib.suppress(Exception):
            self._runner.run(close_all())
        self._runner.close()

    def __enter__(self) -> SshSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def limit(self) -> asyncio.Semaphore:
        """At most ``concurrency`` SSH operations at once (made on the loop that uses it)."""
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.concurrency)
        return self._limit

    # -- connections ----------------------------------------------------------------------
    async def connection(self, node: Node) -> asyncssh.SSHClientConnection:
        """The node's connection, opened on first use; concurrent callers share one attempt."""
        if node.name in self._connections:
            return self._connections[node.name]
        if node.name not in self._pending:
            self._pending[node.name] = asyncio.ensure_future(self._open(node))
        try:
            connection = await self._pending[node.name]
        finally:
            self._pending.pop(node.name, None)
        self._connections[node.name] = connection
        return connection

    async def head(self) -> asyncssh.SSHClientConnection:
        """The connection to the jump host (a stack's head VM)."""
        connection = await self._jump_connection()
        if connection is None:
            raise UsageError(f"{self.inventory.source} has no head node to go through")
        return connection

    def forget(self, node: Node) -> None:
        """Drop a node's connection (after it was lost), so the next use reconnects."""
        connection = self._connections.pop(node.name, None)
        if connection is not None:
            connection.abort()

    async def _open(self, node: Node) -> asyncssh.SSHClientConnection:
        target = endpoint(self.inventory, node)
        # The inventory's jump host wins over the config's ProxyJump, as `ssh -J` does.
        tunnel = await self._jump_connection()
        if tunnel is None and target.proxy_jump:
            tunnel = await self._hop(target.proxy_jump, ())
        return await self._connect(node.name, target, tunnel)

    async def _jump_connection(self) -> asyncssh.SSHClientConnection | None:
        ssh = self.inventory.ssh
        if ssh is None or not ssh.jump_host:
            return None
        if self._jump is None or _spent(self._jump):
            target = jump_endpoint(ssh.jump_host, ssh.port, ssh.user, ssh.key_path)
            self._jump = asyncio.ensure_future(
                self._through(f"the jump host {ssh.jump_host}", target, target.proxy_jump, ())
            )
        return await self._jump

    async def _hop(self, spec: str, chain: tuple[str, ...]) -> asyncssh.SSHClientConnection:
        """The last jump host of a ProxyJump ("a,b": b, reached through a), logged into once
        and shared by every node behind it (`ssh` logs into it once per node)."""
        if spec in chain:
            circle = " -> ".join((*chain, spec))
            raise UsageError(
                f"the ProxyJump of ~/.ssh/config goes round in a circle: {circle}",
                fix="exclude the jump hosts from the `Host` that sets ProxyJump (Host * !jump)",
            )
        if spec not in self._hops or _spent(self._hops[spec]):
            earlier, _, last = spec.rpartition(",")
            target = jump_endpoint(last, None, None, None)  # the rest from ~/.ssh/config
            # The hops before it, or else its own ProxyJump, as OpenSSH takes them.
            through = earlier or target.proxy_jump
            self._hops[spec] = asyncio.ensure_future(
                self._through(f"the jump host {last}", target, through, (*chain, spec))
            )
        return await self._hops[spec]

    async def _through(
        self, name: str, target: Endpoint, proxy_jump: str, chain: tuple[str, ...]
    ) -> asyncssh.SSHClientConnection:
        tunnel = await self._hop(proxy_jump, chain) if proxy_jump else None
        return await self._connect(name, target, tunnel)

    def _known_hosts(self) -> Any:
        """The host keys, parsed once for every connection: once a connection was N x N lines
        at N nodes, 3.7 s of 13 s for `dtrun exec` on 256 (issue 41). The file is read again
        when it changed (a key recorded with --accept-new-host-keys)."""
        import asyncssh

        ssh = self.inventory.ssh
        path = self.known_hosts_file
        version: tuple[object, ...] = ("none",)
        if ssh is not None and ssh.known_hosts:
            version = ("stack",)
        elif path.exists():
            found = path.stat()
            version = (found.st_ino, found.st_mtime_ns, found.st_size)
        if self._parsed is None or self._parsed[0] != version:
            if version[0] == "stack" and ssh is not None:
                parsed = asyncssh.import_known_hosts("\n".join(ssh.known_hosts) + "\n")
            elif version[0] == "none":
                parsed = asyncssh.import_known_hosts("")
            else:
                parsed = asyncssh.read_known_hosts(str(path))
            self._parsed = (version, parsed)
        return self._parsed[1]

    def _client_keys(self, target: Endpoint) -> list[Any]:
        """The keys ``target``'s login offers, loaded once per session (keys.py says why)."""
        return self._keys.of(target)

    async def _connect(
        self, name: str, target: Endpoint, tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        import asyncssh

        delay = 1.0
        # A connection the node closed during the handshake gets one more try even where
        # retries is 1: OpenSSH's sshd, finding no algorithm in common, exits without a word,
        # and about 1 in 100 times before its own offer is sent, so the client reads only
        # the close (docs/clusters.md, "Connections"); the next try names the algorithms.
        attempts = self.retries
        attempt = 0
        while attempt < attempts:
            attempt += 1
            proxy = ProxyRun.of(target, tunneled=tunnel is not None)  # ~/.ssh/config's
            try:
                async with self.limit:
                    return await asyncssh.connect(
                        target.host,
                        port=target.port,
                        username=target.user,
                        config=user_ssh_config(),  # HostName, User, IdentityFile, ...
                        client_keys=self._client_keys(target),
                        known_hosts=self._known_hosts(),
                        tunnel=tunnel,  # None: direct (ProxyJump hosts were opened above)
                        proxy_command=proxy.argv,  # None: no command (or through the tunnel)
                        encryption_algs=target.ciphers or (),  # (): the config's Ciphers
                        connect_timeout=self.connect_timeout,
                        keepalive_interval=target.alive_interval,  # as ~/.ssh/config says,
                        keepalive_count_max=target.alive_count_max,  # else 15 s x 3
                    )
            except asyncssh.HostKeyNotVerifiable:
                return await self._unknown_host_key(name, target, tunnel, proxy)
            except asyncssh.PermissionDenied:
                raise login_refused(name, target, too_many_keys=False) from None
            except asyncssh.KeyExchangeFailed as exc:  # the same on every try: not retried
                raise SshAlgorithmsError(
                    f"cannot agree on algorithms with {name} ({target})",
                    why=f"{exc.reason} (dtrun offers what ~/.ssh/config allows this host)",
                    fix="check the Ciphers, KexAlgorithms, MACs and HostKeyAlgorithms lines "
                    "of ~/.ssh/config for this host (`ssh -G HOST` shows them; `ssh -vv HOST` "
                    "shows what the server offers) and remove or widen them",
                ) from None
            except (OSError, asyncssh.Error) as exc:
                if isinstance(exc, asyncssh.DisconnectError) and TOO_MANY_KEYS in exc.reason:
                    raise login_refused(name, target, too_many_keys=True) from None
                if isinstance(exc, asyncssh.ConnectionLost) and attempts == 1:
                    attempts = 2
                    continue
                if attempt >= attempts:
                    raise SshError(
                        f"cannot reach {name} ({target})",
                        why=(str(exc) or f"no SSH answer in {self.connect_timeout:.0f} s")
                        + (f" (after {attempt} attempts)" if attempt > 1 else "")
                        + proxy.said(),
                        fix=proxy.fix(target)
                        or "check that the node is up and its sshd listens there; "
                        "`dtrun exec ... -- true` tries every node",
                    ) from None
            finally:
                proxy.remove()
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _unknown_host_key(
        self,
        name: str,
        target: Endpoint,
        tunnel: asyncssh.SSHClientConnection | None,
        proxy: ProxyRun,
    ) -> asyncssh.SSHClientConnection:
        import asyncssh

        known = self._known_hosts()
        # Under the name the connection checked: the alias's HostName, [host]:port off port 22
        # (hashed entries included), as `ssh` looks it up.
        trusted = known.match(target.address, "", None if target.port == 22 else target.port)[0]
        stack_keys = bool(self.inventory.ssh and self.inventory.ssh.known_hosts)
        if trusted:
            raise HostKeyError(
                f"the host key of {name} ({target.known_hosts_name}) has CHANGED",
                why="it differs from the one on record: the node was rebuilt, or someone is in "
                "the middle",
                fix=f"verify it; if the change is expected, remove the old line from "
                f"{'the stack outputs (dtrun up again)' if stack_keys else self.known_hosts_file}",
            )
        if not self.accept_new or stack_keys:
            # a line to paste into a shell: the path may hold a space or `;`
            file = shlex.quote(str(self.known_hosts_file))
            scan = f"ssh-keyscan -p {target.port} {shlex.quote(target.address)} >> {file}"
            raise HostKeyError(
                f"the host key of {name} ({target.known_hosts_name}) is not known",
                why=f"it is not in {self.known_hosts_file}, and dtrun never accepts keys silently",
                fix=f"check its fingerprint, then pass --accept-new-host-keys to record it, or "
                f"run `{scan}`",
            )
        connection = await asyncssh.connect(
            target.host,
            port=target.port,
            username=target.user,
            config=user_ssh_config(),
            client_keys=self._client_keys(target),
            known_hosts=None,  # accepting this once, on request; recorded below
            tunnel=tunnel,
            proxy_command=proxy.argv,
            encryption_algs=target.ciphers or (),
            connect_timeout=self.connect_timeout,
        )
        key = connection.get_server_host_key()
        assert key is not None  # a connected server has presented its key
        line = f"{target.known_hosts_name} {key.export_public_key().decode().strip()}\n"
        self.known_hosts_file.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts_file.open("a") as known_hosts:
            known_hosts.write(line)
        self.notice(
            f"recorded the new host key of {name} ({target.known_hosts_name}, "
            f"{key.get_fingerprint()}) in {self.known_hosts_file}"
        )
        return connection


def _opened(task: asyncio.Task[asyncssh.SSHClientConnection]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


def _spent(opening: asyncio.Future[asyncssh.SSHClientConnection]) -> bool:
    """A jump host's connection that cannot carry another node: its opening failed (the next
    look tries again, as for a node), or it has closed since (the bastion restarted)."""
    if not opening.done():
        return False
    if opening.cancelled() or opening.exception() is not None:
        return True
    return opening.result().is_closed()


@contextlib.contextmanager
def lost_connection(node: Node, doing: str = "running the launch") -> Iterator[None]:
    """Any SSH failure while ``doing`` something on ``node`` becomes an SshError saying which
    node, what failed and what to do: a dropped connection, a session the node's sshd refused,
    an SFTP or other protocol error (none reaches the user as a traceback)."""
    import asyncssh

    where = f"{node.name} ({node.address})"
    try:
        yield
    except (asyncssh.ConnectionLost, asyncssh.DisconnectError, BrokenPipeError) as exc:
        lost = SshError(
            f"lost the SSH connection to {where}",
            why=f"{exc}: its sshd stopped, or the node went down",
            fix="check the node; dtrun stopped the launch on the other nodes",
        )
        lost.lost_node = node.name
        raise lost from None
    except asyncssh.ChannelOpenError as exc:
        raise SshError(
            f"the sshd of {where} refused a session for {doing}",
            why=f"{exc.reason or exc}: it allows no more sessions at once (MaxSessions), or "
            "refuses this kind of session",
            fix="read the node's sshd log (journalctl -u ssh) and sshd_config; "
            "`dtrun exec ... -- true` tries every node",
        ) from None
    except asyncssh.Error as exc:
        raise SshError(
            f"{doing} on {where} failed over SSH",
            why=f"{type(exc).__name__}: {exc.reason or exc}"
            if hasattr(exc, "reason")
            else str(exc),
            fix="read the node's sshd log (journalctl -u ssh); `dtrun exec ... -- true` tries "
            "every node",
        ) from None
