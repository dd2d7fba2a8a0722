"""dtrun's optional parts, pyproject's extras: `pip install dtrun` holds what the embedded cluster,
SSH hosts, Slurm and the reports need, and an extra adds the rest (docs/install.md).

A command that needs an extra that is not installed says which one and exits 2.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from runner.errors import UsageError

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
