"""Run a machine's rendered cloud-init on this machine, as far as it allows, and keep what it did.

The boot scripts run for real, as root, in a private mount namespace (`unshare -m`) where:

- /etc, /var, /home, /usr/local/sbin and /usr/sbin are overlays on this machine's own: the
  scripts read what is here and every file they write lands in an upper directory the test
  reads afterwards, so this machine is left as it was;
- the machine has a host name of its own (a UTS namespace), /run is an empty tmpfs, and
  /sys/class holds only a fake InfiniBand tree (eight ports, all ACTIVE);
- the tools that would change this machine or need Azure (apt-get, apt-cache, dpkg-query,
  systemctl, mount, curl, ibstat, nvidia-smi) are recorder stubs first on PATH: each appends its
  name and arguments to a log and answers as the HPC image would;
- pip installs from a local index the test names (PIP_INDEX_URL, passed in `env`): stand-in
  wheels built by `stand_in_wheel`, not PyPI's;
- the shared storage's mount path is a directory under the sandbox, shared by every machine run
  against the same sandbox, as the real mount is.

What cloud-init itself does before the bootstrap is done here in its place: its write_files
(content, mode, owner, append; deferred files too, the admin user being made beforehand) and the
admin user's ~/.ssh, which Azure's provisioning creates. Its `packages`, `ssh_keys` and user
modules are not run.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

OVERLAID = ("/etc", "/var", "/home", "/usr/local/sbin", "/usr/sbin")
SLURM_VERSION = "23.11.10-1"  # what the stub apt and dpkg report as Microsoft's slurm-smd

# Each stub logs "NAME ARGS..." (shell-quoted) and answers as on the image.
STUBS = {
    "apt-get": "",
    "apt-cache": f'[ "$1" = policy ] && printf "%s:\\n  Candidate: {SLURM_VERSION}\\n" "$2"',
    "dpkg-query": f"printf %s {SLURM_VERSION}",
    "systemctl": "",
    "mount": "",
    "curl": "",
    "ibstat": "",
    "nvidia-smi": 'for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3"; done',
}


@dataclass
class Machine:
    """What one machine's boot left: its overlays' upper directories and the stubs' log."""

    root: Path  # <sandbox>/<name>: upper/<path> for each overlaid path
    calls: list[list[str]]
    log: str  # the bootstrap's own log
    returncode: int

    def file(self, path: str) -> Path:
        """A file the boot wrote under an overlaid path (absent if it wrote none there)."""
        return self.root / "upper" / path.lstrip("/")

    def seen(self, path: str) -> Path:
        """A path as the machine saw it at the end: its upper copy if the boot changed it, else
        this machine's own (an overlay copies a path up only when it is changed)."""
        upper = self.file(path)
        return upper if upper.exists() else Path(path)

    def ran(self, name: str) -> list[list[str]]:
        return [call[1:] for call in self.calls if call[0] == name]


def _stubs(directory: Path, log: Path) -> None:
    directory.mkdir(parents=True)
    for name, answer in STUBS.items():
        stub = directory / name
        stub.write_text(
            "#!/bin/bash\n"
            f'{{ printf %q "${{0##*/}}"; printf " %q" "$@"; echo; }} >>{shlex.quote(str(log))}\n'
            f"{answer}\n"
        )
        stub.chmod(0o755)


def _write_files(document: dict[str, Any], staging: Path) -> str:
    """cloud-init's write_files as shell, one file's content staged in a file of its own."""
    lines = []
    for n, item in enumerate(document.get("write_files", [])):
        content = staging / f"file{n}"
        content.write_text(item["content"])
        path = shlex.quote(item["path"])
        owner = item.get("owner", "root:root")
        lines += [
            f"mkdir -p $(dirname {path})",
            f"cat {content} {'>>' if item.get('append') else '>'} {path}",
            f"chmod {item['permissions']} {path}",
            f"chown {shlex.quote(owner)} {path}",
        ]
    return "\n".join(lines)


def boot(
    sandbox: Path, name: str, cloud_init: str, admin_user: str, env: dict[str, str] | None = None
) -> Machine:
    """Run one machine's cloud-init (its write_files, then its runcmd) in the sandbox."""
    document = yaml.safe_load(cloud_init)
    root = sandbox / name
    staging, stubs, calls = root / "staging", root / "stubs", root / "calls.log"
    staging.mkdir(parents=True)
    _stubs(stubs, calls)
    calls.touch()
    mounts = []
    for path in OVERLAID:
        upper, work = root / "upper" / path.lstrip("/"), root / "work" / path.lstrip("/")
        upper.mkdir(parents=True)
        work.mkdir(parents=True)
        mounts.append(
            f"/usr/bin/mount -t overlay overlay"
            f" -o lowerdir={path},upperdir={upper},workdir={work} {path}"
        )
    runcmd = "\n".join(shlex.join(step) for step in document["runcmd"])
    script = f"""set -e
hostname {shlex.quote(name)}
{chr(10).join(mounts)}
/usr/bin/mount -t tmpfs tmpfs /run
/usr/bin/mount -t tmpfs tmpfs /sys/class
for n in 0 1 2 3 4 5 6 7; do
  mkdir -p /sys/class/infiniband/mlx5_ib$n/ports/1
  echo InfiniBand >/sys/class/infiniband/mlx5_ib$n/ports/1/link_layer
  echo '4: ACTIVE' >/sys/class/infiniband/mlx5_ib$n/ports/1/state
done
install -d -m 0700 -o {admin_user} -g $(id -gn {admin_user}) /home/{admin_user} \\
  /home/{admin_user}/.ssh
{_write_files(document, staging)}
set +e
{runcmd}
echo "runcmd: $?"
"""
    environment = {**os.environ, **(env or {}), "PATH": f"{stubs}:{os.environ['PATH']}"}
    ran = subprocess.run(
        ["unshare", "--mount", "--uts", "--propagation", "private", "bash", "-c", script],
        env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = root / "upper/var/log/dtrun-bootstrap.log"
    return Machine(
        root,
        [shlex.split(line) for line in calls.read_text().splitlines()],
        (log.read_text() if log.exists() else "") + ran.stdout + ran.stderr,
        ran.returncode,
    )


def stand_in_wheel(tmp: Path, index: Path, name: str, version: str, *requires: str) -> None:
    """A stand-in distribution in a local PEP 503 index, built by setuptools."""
    src = tmp / f"src-{name}-{version}"
    src.mkdir()
    deps = ", ".join(f'"{r}"' for r in requires)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{deps}]\n'
        "[tool.setuptools]\npy-modules = []\n"
    )
    project = index / name
    project.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps",
         "--no-index", "-w", str(project), str(src)],
        check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )  # fmt: skip
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(project.glob("*.whl")))
    (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
