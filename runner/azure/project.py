"""The Pulumi project `dtrun up` works in: the checkout's root, or one made for an installed dtrun.

A checkout's root holds Pulumi.yaml (``main: infra/``, ``virtualenv: .venv``) and the stacks'
Pulumi.<stack>.yaml. An installed dtrun (``pipx install 'dtrun[azure]'``) carries the same
Pulumi.yaml and program inside its package, where no stack's settings belong, and its Python is
not a .venv beside them. So it works in $XDG_CONFIG_HOME/dtrun/pulumi/ (default ~/.config), with a
Pulumi.yaml written from the installed one: ``main`` names the installed program, and Pulumi runs
it with this very interpreter (PULUMI_PYTHON_CMD, read where no virtualenv is set).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dtrun.locations import PACKAGE, checkout

PROJECT_FILE = "Pulumi.yaml"


def user_project_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/dtrun/pulumi, or ~/.config/dtrun/pulumi when it is unset or relative."""
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "dtrun" / "pulumi"


def installed_project(folder: Path, package: Path = PACKAGE) -> dict[str, Any]:
    """The installed Pulumi.yaml as it reads from ``folder``: its program by a path from there,
    and no virtualenv (Pulumi then runs PULUMI_PYTHON_CMD)."""
    project: dict[str, Any] = yaml.safe_load((package / PROJECT_FILE).read_text())
    project["main"] = os.path.relpath(package / "infra", folder) + "/"
    project["runtime"] = {"name": "python", "options": {"toolchain": "pip"}}
    return project


def project_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder Pulumi works in (workspace), found without writing anything."""
    root = checkout()
    return root if root is not None else user_project_dir(environ)


def stack_settings(stack: str, folder: Path) -> dict[str, object] | None:
    """The dtrun: settings of ``folder``/Pulumi.<stack>.yaml, each as written there (the text
    Pulumi hands the program; a list, its items' texts), for `dtrun up` to check before it looks
    for the Pulumi CLI. None where Pulumi alone can read them: no such file, text that is no
    YAML, a secret value (secure:) or an ESC environment."""
    try:
        text = (folder / f"Pulumi.{stack}.yaml").read_text()
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None
    fields = dict(_pairs(root))
    config = fields.get("config")
    if "environment" in fields or not isinstance(config, yaml.MappingNode):
        return None
    values: dict[str, object] = {}
    for key, node in _pairs(config):
        if not key.startswith("dtrun:"):
            continue
        if isinstance(node, yaml.ScalarNode):
            values[key] = node.value
        elif isinstance(node, yaml.SequenceNode) and all(
            isinstance(item, yaml.ScalarNode) for item in node.value
        ):
            values[key] = [item.value for item in node.value]
        else:
            return None
    return values


def _pairs(node: yaml.Node | None) -> list[tuple[str, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        return []
    return [(str(key.value), value) for key, value in node.value]


def workspace(environ: Mapping[str, str] = os.environ) -> tuple[Path, dict[str, str]]:
    """The folder Pulumi works in, and the environment variables it needs there."""
    return prepare(checkout(), environ)


def prepare(
    root: Path | None, environ: Mapping[str, str], package: Path = PACKAGE
) -> tuple[Path, dict[str, str]]:
    """A checkout's ``root`` as it is; installed (``root`` None), the user's project folder, its
    Pulumi.yaml written (atomically) when it differs from what this install needs."""
    if root is not None:
        return root, {}
    folder = user_project_dir(environ)
    folder.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(installed_project(folder, package), sort_keys=False)
    target = folder / PROJECT_FILE
    if not target.is_file() or target.read_text() != text:
        partial = folder / f".{PROJECT_FILE}.{os.getpid()}"
        partial.write_text(text)
        partial.replace(target)
    return folder, {"PULUMI_PYTHON_CMD": sys.executable}
