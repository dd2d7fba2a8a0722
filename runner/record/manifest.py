"""What a run needs to be reproduced: software versions, the source revision, the environment.

Gathered on the machine dtrun runs on, without importing the packages it names (importing torch
alone costs a second): versions come from the installed distributions' metadata. The nodes'
own versions (their torch, NCCL, Python) come back in the workloads' results.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.redact import redact_var

# Distributions whose versions change what a run measures or how it was launched.
PACKAGES = (
    "dtrun",
    "torch",
    "deepspeed",
    "numpy",
    "pulumi",
    "pulumi-azure-native",
    "asyncssh",
    "boto3",
    "typer",
    "jinja2",
    "matplotlib",
)


def versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Each package's installed version; None where it is not installed."""
    found: dict[str, str | None] = {}
    for name in packages:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def redact_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment, sorted, with secret-looking names' values, URL credentials and
    token-shaped values hidden."""
    return {key: redact_var(key, value) for key, value in sorted(env.items())}


def source_root() -> Path:
    """The directory dtrun's own source lives in (a git checkout in development)."""
    return Path(__file__).resolve().parents[2]


def git_revision(root: Path | None = None) -> dict[str, Any] | None:
    """The checkout's commit and whether tracked files differ from it; None outside git."""
    root = root or source_root()
    try:
        revision = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"revision": revision, "dirty": bool(status.strip())}
