"""The check of one number against its option's range (runner/spec/bounds.py). Pure."""

from __future__ import annotations

from dtrun.errors import PlanError
from dtrun.spec.bounds import BOUNDS


def check_bound(flag: str, value: float) -> None:
    """A number inside its option's range; nan and inf never are (they reach int(), sleep()
    and the nodes' tools)."""
    bound = BOUNDS[flag]
    if not bound.holds(value):
        raise PlanError(
            f"{flag} must be {bound.rule}",
            why=f"got {value:g}",
            fix="the range of every option is in docs/bench.md, Bounds",
        )
