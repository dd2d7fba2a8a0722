"""Finding a name in one of the plan's registries (launchers, workloads, strategies, presets),
with a "did you mean" when it is not there. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from dtrun.errors import PlanError

T = TypeVar("T")


def lookup(kind: str, name: str, registry: Mapping[str, T]) -> T:
    """Find ``name`` in a registry, or say which names exist and which one was probably meant."""
    if name in registry:
        return registry[name]
    import difflib  # only for a "did you mean"

    close = difflib.get_close_matches(name, list(registry), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise PlanError(
        f"unknown {kind} {name!r}",
        why=f"{hint}known {kind[:-1] + 'ies' if kind.endswith('y') else kind + 's'}: "
        f"{', '.join(sorted(registry))}",
        fix=f"pass --{kind} with one of those names",
    )
