"""Real OpenSSH sshd instances on 127.0.0.2, 127.0.0.3, ...: the test cluster for SSH runs.

Each instance has its own host key, listens on its own loopback address, gives its sessions
its own TMPDIR (a machine's own /tmp), accepts only the generated client key (no passwords, no
PAM) and runs as the user running the tests.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from tests.paths import require_e2e

SSHD = "/usr/sbin/sshd"
PORT = 2222
ENABLE = "install OpenSSH's server (`apt-get install openssh-server`; `./dev test` does it)"


@dataclass(frozen=True)
class SshHost:
    address: str
    port: int
    host_key: str  # "ssh-ed25519 AAAA..."
    config: Path

    @property
    def known_hosts_line(self) -> str:
        return f"[{self.address}]:{self.port} {self.host_key}"


@dataclass
class SshCluster:
    root: Path
    user: str
    key: Path  # the client's private key
    known_hosts: Path  # every instance's host key
    hosts: list[SshHost]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # what sshd runs under: the user's own login shell and home directory (start_cluster, shell)
    wrapper: tuple[str, ...] = ()
    home: Path | None = None  # the user's home in the sessions, where shell gave it one

    def stop(self, address: str) -> None:
        """Stop one instance and every session it serves, as a node going away would."""
        import psutil

        process = self.processes.pop(address)
        sessions: list[psutil.Process] = []
        for _ in range(10):  # a session that ends while they are listed makes psutil give up
            with contextlib.suppress(psutil.NoSuchProcess):
                sessions = psutil.Process(process.pid).children(recursive=True)
                break
        process.terminate()
        process.wait(timeout=10)
        for session in sessions:
            with contextlib.suppress(psutil.Error):  # it may have ended by now
                if session.name().startswith("sshd"):
                    session.kill()

    def start(self, host: SshHost) -> None:
        self.processes[host.address] = subprocess.Popen(
            [*self.wrapper, SSHD, "-D", "-e", "-f", str(host.config)],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / f"sshd-{host.address}.log").open("ab"),
        )
        _wait_listening(host.address, host.port)

    def close(self) -> None:
        for address in list(self.processes):
            self.stop(address)


def available() -> bool:
    return Path(SSHD).exists() and shutil.which("ssh-keygen") is not None


def address(number: int) -> str:
    """The ``number``-th loopback address from 127.0.0.1 (1: 127.0.0.1, 2: 127.0.0.2, ...),
    past 127.0.0.254 on 127.0.1.1, 127.0.1.2, ...: 254 a /24, none ending .0 or .255, so a
    cluster may have hundreds of nodes (every 127.0.0.0/8 address is the loopback's)."""
    block, host = divmod(number - 1, 254)
    return f"127.0.{block}.{host + 1}"


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
    )
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _wait_listening(address: str, port: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {address}:{port} did not start") from None
            time.sleep(0.05)
        else:
            return


def start_cluster(
    root: Path,
    count: int,
    port: int = PORT,
    *,
    first: int = 2,
    settings: Mapping[str, str] = MappingProxyType({}),
    sftp: bool = True,
    shell: str = "",
    wrapper: tuple[str, ...] = (),
) -> SshCluster:
    """``count`` instances on 127.0.0.<first> and the next addresses (``address``); ``settings``:
    lines of sshd_config by address, read before the defaults (sshd takes the first value it reads),
    e.g. {"127.0.0.40": "LogLevel DEBUG1\n"}; ``sftp`` False: no SFTP subsystem, as sites that
    disable it have (sshd refuses a second Subsystem line, so it is left out, not overridden);
    ``shell``: the user's login shell in the sessions (``own_login``); ``wrapper``: what sshd
    runs under otherwise (a mount namespace of its own: a node's own disk, own_disk)."""
    require_e2e("sshd")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation dir
    root.mkdir(parents=True, exist_ok=True)
    _keygen(root / "client_key", "dtrun-tests")
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client_key.pub").read_text())
    authorized.chmod(0o600)
    # sessions carry the xdist worker's name, as its other processes do: its leftover check
    # (tests/conftest.py, launch_processes) finds its own launches' processes by it
    xdist = os.environ.get("PYTEST_XDIST_WORKER")
    session = os.environ.get("DTRUN_TEST_SESSION")
    names = [f"PYTEST_XDIST_WORKER={xdist}"] if xdist else []
    names += [f"DTRUN_TEST_SESSION={session}"] if session else []
    hosts = []
    for index in range(count):
        name = address(index + first)
        home = root / name
        home.mkdir()
        # each node's own temporary directory, as a machine has its own /tmp: the nodes share
        # this host's name, and OpenMPI names its session directory after it (TMPDIR/ompi.
        # HOST.UID/jf.JOB): every orted's start-up clears the job's tree there, another node's
        # daemon's included, which once failed its mkdir, "File exists" (orte/util/
        # session_dir.c, OpenMPI 4.1). One SetEnv line: sshd takes the first (a settings line
        # of SetEnv replaces this one).
        temp = home / "tmp"
        temp.mkdir()
        set_env = f"SetEnv {' '.join([*names, f'TMPDIR={temp}'])}\n"
        host_key = _keygen(home / "ssh_host_ed25519_key", f"host-{name}")
        config = home / "sshd_config"
        defaults = (
            f"ListenAddress {name}:{port}\n"
            f"HostKey {home / 'ssh_host_ed25519_key'}\n"
            f"PidFile {home / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "AcceptEnv DTRUN_*\n"
            "MaxStartups 200\n"
            "MaxSessions 200\n"
            "LogLevel ERROR\n" + ("Subsystem sftp internal-sftp\n" if sftp else "") + set_env
        )
        config.write_text(settings.get(name, "") + defaults)
        hosts.append(SshHost(name, port, host_key, config))
    known_hosts = root / "known_hosts"
    known_hosts.write_text("".join(host.known_hosts_line + "\n" for host in hosts))
    cluster = SshCluster(
        root, getpass.getuser(), root / "client_key", known_hosts, hosts, wrapper=wrapper
    )
    if shell:
        cluster.home = root / "home"
        cluster.wrapper = own_login(root, cluster.user, shell, cluster.home)
    try:
        for host in hosts:
            cluster.start(host)
    except BaseException:
        cluster.close()
        raise
    return cluster


def own_disk(folder: Path, size_k: int) -> tuple[str, ...]:
    """The command that runs sshd with a disk of its own at ``folder`` (which must exist): a
    new tmpfs of ``size_k`` KiB mounted there in a mount namespace of sshd's (unshare, root
    only), as a remote node has its own disk at a path this machine has too. The sessions'
    processes see it; this machine's ``folder`` is untouched."""
    mount = f'mount -t tmpfs -o size={size_k}k dtrun-node-disk "$0" && exec "$@"'
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(folder))


def own_login(root: Path, user: str, shell: str, home: Path) -> tuple[str, ...]:
    """The command that runs sshd with ``user``'s login shell ``shell`` and home ``home``, as
    a site's account has them, without touching this machine's /etc/passwd: sshd runs in a
    mount namespace of its own (unshare, root only), where a copy of /etc/passwd with the
    user's line changed is bind-mounted over it; sshd reads both with getpwnam."""
    home.mkdir(parents=True, exist_ok=True)
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")  # passwd(5): name:password:uid:gid:gecos:home:shell
        if fields[0] == user:
            fields[5:7] = [str(home), shell]
        lines.append(":".join(fields))
    passwd = root / "passwd"
    passwd.write_text("\n".join(lines) + "\n")
    passwd.chmod(0o644)
    mount = 'mount --bind "$0" /etc/passwd && exec "$@"'
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(passwd))
