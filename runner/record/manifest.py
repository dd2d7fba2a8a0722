"""What a run needs to be reproduced: software versions, the source revision, the variables of
the environment that shape a run.

Gathered on the machine dtrun runs on, without importing the packages it names (importing torch
alone costs a second): versions come from the installed distributions' metadata. The nodes'
own versions (their torch, NCCL, Python) come back in the workloads' results.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dtrun.locations import checkout
from dtrun.plan.machineenv import run_environment
from dtrun.redact import REDACTED, Redactor, is_secret_name, redact_args, redact_var

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
    """The variables of ``env`` that shape a run (runner/plan/machineenv.py), sorted, with
    secret-looking names' values, URL credentials and token-shaped values hidden; nothing
    else of this machine's environment."""
    return {key: redact_var(key, value) for key, value in run_environment(env).items()}


# dtrun's option whose values are KEY=VALUE exported on every node (runner/cli/options.py Env).
_ENV_OPTIONS = ("--env", "-e")


def command_line(args: Sequence[str], hide: Redactor | None = None) -> str:
    """dtrun's command line as typed (``args``: sys.argv after the program name), shell-quoted
    (shlex.join), with every secret hidden as the manifest hides it: an --env value under a
    secret-looking name (as its ``bench.env``), a program argument after ``--`` as its
    ``bench.program.args`` (runner/redact/ ``redact_args``), URL credentials and token
    shapes in any argument, and the fragments of the values ``hide`` knows, in any quoting."""
    hide = hide or Redactor()
    words = list(args)
    cut = words.index("--") if "--" in words else len(words)
    own = redact_args(tuple(_env_redacted(words[:cut], hide)), hide)
    program = redact_args(tuple(words[cut + 1 :]), hide) if cut < len(words) else None
    line = shlex.join(["dtrun", *own, *(["--", *program] if program is not None else [])])
    return hide.text(line)  # a value that shlex.join quoted, masked in that quoting too


def _env_redacted(args: Sequence[str], hide: Redactor) -> list[str]:
    """``args`` with each --env KEY=VALUE's value hidden where KEY looks secret (``-e K=V``,
    ``--env=K=V`` and ``-eK=V`` too)."""
    found: list[str] = []
    pending = False
    for arg in args:
        if pending:
            found.append(_env_pair(arg, hide))
        elif arg.startswith("--env="):
            found.append("--env=" + _env_pair(arg.removeprefix("--env="), hide))
        elif arg.startswith("-e") and arg not in _ENV_OPTIONS and not arg.startswith("--"):
            found.append("-e" + _env_pair(arg.removeprefix("-e"), hide))
        else:
            found.append(arg)
        pending = not pending and arg in _ENV_OPTIONS
    return found


def _env_pair(pair: str, hide: Redactor) -> str:
    key, equals, value = pair.partition("=")
    if not equals:
        return hide.text(pair)
    return f"{key}={REDACTED if is_secret_name(key) else hide.text(value)}"


def git_revision(root: Path | None = None) -> dict[str, Any] | None:
    """The checkout's commit and whether tracked files differ from it; None outside git."""
    return git_revision_later(root)()


def git_revision_later(root: Path | None = None) -> Callable[[], dict[str, Any] | None]:
    """git_revision, its git process started now and read when the result is called for, so
    that it runs while the rest of the manifest is gathered.

    One git process: porcelain v2's header names the commit (``# branch.oid``), and every
    other line is a changed tracked file (git-status(1), "Porcelain Format Version 2")."""
    root = root or checkout()
    if root is None:  # an installed wheel: its version says what it is (a folder above may be
        return lambda: None  # a checkout of the user's own, not dtrun's)
    command = ["git", "-C", str(root), "status", "--porcelain=v2", "--branch",
               "--untracked-files=no"]  # fmt: skip
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    except OSError:  # no git here
        return lambda: None

    def result() -> dict[str, Any] | None:
        try:
            status, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return None
        if process.returncode != 0:  # not a checkout
            return None
        lines = status.splitlines()
        oid = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), "")
        if len(oid) < 40:  # "(initial)": no commit yet
            return None
        return {"revision": oid, "dirty": any(not line.startswith("#") for line in lines)}

    return result
