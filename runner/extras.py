"""dtrun's optional parts, pyproject's extras: `pip install dtrun` holds what the embedded cluster,
SSH hosts, Slurm and the reports need, and an extra adds the rest (docs/install.md).

A command that needs an extra that is not installed says which one and exits 2.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from dtrun.errors import UsageError

# extra -> what it holds, and what needs it
EXTRAS = {
    "azure": (
        "Pulumi and its Azure providers",
        "stacks (dtrun up, down, outputs, extend, --stack)",
    ),
    "s3": ("boto3", "--results s3://"),
    "spark": ("PySpark", "--spark"),
    "workloads": ("torch and DeepSpeed", "the processes on the nodes"),
}


class MissingExtraError(UsageError):
    """An optional part of dtrun that a command needs is not installed."""

    def __init__(self, extra: str, module: str, reason: str) -> None:
        holds, needed_by = EXTRAS[extra]
        super().__init__(
            f"{needed_by} need {module}, which this Python cannot import",
            why=f"{holds} come with dtrun's {extra} extra ({reason})",
            fix=f"pip install 'dtrun[{extra}]' (pipx: pipx install --force 'dtrun[{extra}]'; "
            "a checkout: ./dev setup), then run the command again",
        )
        self.extra = extra


def need(module: str, extra: str) -> ModuleType:
    """Import ``module``, which comes with ``extra``; a MissingExtraError (exit 2) if it cannot."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(extra, module, str(exc) or type(exc).__name__) from None


# Packages the embedded cluster looks for by name (runner/cli/bench.py), and their extra.
PACKAGE_EXTRAS = {"torch": "workloads", "deepspeed": "workloads"}


def install_fix(package: str) -> str:
    """What to do when this Python has no ``package`` that the embedded cluster's nodes need."""
    extra = PACKAGE_EXTRAS.get(package)
    how = f"pip install 'dtrun[{extra}]'" if extra else f"{sys.executable} -m pip install {package}"
    other = "" if package == "torch" else ", or pass another --strategy"
    return f"install it ({how}, or ./dev setup in a checkout){other}"
