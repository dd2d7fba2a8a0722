"""A stack's Slurm, driven from the user's machine: Slurm's commands run on the head over ssh
(OpenSSH's client, with the stack's key and host keys), and each launch's directory is copied
to the cluster's shared storage before its srun step and back after it (docs/slurm.md,
"A stack's own Slurm"). The nodes mount that storage; the user's machine does not."""

from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from dtrun.engines.slurm.shell import SlurmShell
from dtrun.errors import RunError
from dtrun.spec.launchplan import staged_path


def head_shell(
    address: str,
    user: str,
    port: int,
    known_hosts: tuple[str, ...],
    private_key: str | None,
    root: Path,
) -> SlurmShell:
    """ssh to the head, checking its host key against the stack's own lines only; the stack's
    generated key when it has one, else the user's own keys (agent, ~/.ssh). ``root``: a
    private directory for the key and known_hosts files, removed by the caller."""
    hosts = root / "known_hosts"
    hosts.write_text("".join(f"{line}\n" for line in known_hosts))
    options = [
        "-o", "BatchMode=yes",  # a key or nothing: never a password prompt
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={hosts}",
        "-o", "ConnectTimeout=20",
        "-p", str(port),
        "-l", user,
    ]  # fmt: skip
    if private_key:
        key = root / "key"
        key.touch(mode=0o600)
        key.write_text(private_key if private_key.endswith("\n") else private_key + "\n")
        options += ["-i", str(key), "-o", "IdentitiesOnly=yes"]
    return SlurmShell(("ssh", *options, address, "--"))


@dataclass
class HeadStaging:
    """Launch directories on the shared storage, reached through the head's shell."""

    shell: SlurmShell
    shared_dir: str  # where the head and every node mount the shared storage
    code_dir: str  # where the nodes import runner/workloads from
    _code_staged: bool = field(default=False)

    def remote_dir(self, workdir: Path) -> str:
        """runs/<id>/n<N>/r<k> here -> <shared>/.dtrun/runs/<id>/n<N>/r<k> there; a probe's
        in its run's folder too (staged_path)."""
        return f"{self.shared_dir}/.dtrun/runs/{staged_path(workdir)}"

    def push(self, workdir: Path) -> str:
        """Copy the launch directory (and, once, dtrun's workload code) to the shared storage."""
        if not self._code_staged:
            from dtrun.engines.common.code import code_files

            self._unpack(self.code_dir, _tar({rel: data for rel, data in code_files().items()}))
            self._code_staged = True
        remote = self.remote_dir(workdir)
        files = {
            path.name: path.read_bytes() for path in sorted(workdir.iterdir()) if path.is_file()
        }
        modes = {path.name: path.stat().st_mode & 0o777 for path in workdir.iterdir()}
        self._unpack(remote, _tar(files, modes))
        return remote

    def pull(self, remote: str, workdir: Path) -> None:
        """What the launch wrote there (result.json, the program's files) back into workdir;
        files already here (the node logs dtrun wrote) are kept."""
        done = self.shell.popen(
            ["tar", "-C", remote, "-cf", "-", "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        data, err = done.communicate(timeout=600)
        if done.returncode != 0:
            raise RunError(
                f"could not copy {remote} back from the cluster",
                why=err.decode(errors="replace").strip() or f"tar exited {done.returncode}",
                fix=f"copy it by hand with scp from the head; the run directory is {workdir}",
            )
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                target = workdir / member.name
                if member.isfile() and not target.exists():
                    archive.extract(member, workdir, filter="data")

    def _unpack(self, remote: str, data: bytes) -> None:
        line = f"mkdir -p -- {shlex.quote(remote)} && tar -xf - -C {shlex.quote(remote)}"
        done = self.shell.popen(["bash", "-c", line], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = done.communicate(data, timeout=600)
        if done.returncode != 0:
            raise RunError(
                f"could not copy the launch files to {remote} on the cluster",
                why=err.decode(errors="replace").strip() or f"exit {done.returncode}",
                fix="check the head's shared storage (`df` on the head) and run again",
            )


def _tar(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = (modes or {}).get(name, 0o644)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
