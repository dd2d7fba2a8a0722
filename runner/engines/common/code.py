"""dtrun's code as the nodes import it, and this machine's Python and checkout: what SSH and a
stack's Slurm ship to their nodes, and the defaults the embedded cluster, Slurm and a hosts file
take from here."""

from __future__ import annotations

import sys
from pathlib import Path

import dtrun


def code_files() -> dict[str, bytes]:
    """What the nodes import: the package's __init__.py, its workloads/ and the step hook, and
    the reaper a launch's script runs under (runner/execute/reaper.py), by their paths under
    its import name (dtrun/workloads/train.py; the folder is runner/ in a
    checkout), relative path -> bytes."""
    package = Path(dtrun.__file__).resolve().parent
    name = dtrun.__name__
    workloads = package / "workloads"
    files = [
        package / "__init__.py",
        package / "execute" / "reaper.py",
        *sorted(workloads.glob("*.py")),
        *sorted((workloads / "stephook").glob("*.py")),
    ]
    return {f"{name}/{f.relative_to(package).as_posix()}": f.read_bytes() for f in files}


def this_python() -> str:
    """The folder of this interpreter: the embedded nodes run it, and Slurm's and a hosts file's
    nodes by default (the same path there)."""
    return str(Path(sys.executable).parent)


def this_checkout() -> str:
    """The folder that holds the package here (the repository root in a checkout)."""
    return str(Path(dtrun.__file__).resolve().parent.parent)


def node_python(python_bin: str, code_dir: str) -> tuple[str, str]:
    """The nodes' python and dtrun's package there, as code_files ships it (an inventory's
    ``python_bin`` and ``code_dir``): what the reaper runs with (runner/execute/reaper.py)."""
    return f"{python_bin}/python", f"{code_dir}/{dtrun.__name__}"
