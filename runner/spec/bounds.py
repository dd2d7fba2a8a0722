"""The range of a number an option of dtrun takes, declared on the field that holds the
option's value: ``steps: Annotated[int, Bound("--steps", 1, 1_000_000)] = 60`` (the specs in
runner/spec/request.py, each engine's options.py). The checks (runner/plan/checks.py) walk the
fields; an option's help reads its field's range (``within``); docs/bench.md ("Bounds") lists
them, compared with the fields by a test. Pure.

Every number has a ceiling, so that no value makes dtrun plan without end (``--repeat
1000000000`` planned a billion launches before saying anything) or hand a node a number its
tools cannot hold (``--timeout 1e308`` reached torchrun as an OverflowError). Each ceiling is
far above any real use, and says why it is there. Those shared by many fields: node counts
past the largest clusters built (about 10,000 nodes); ports as TCP has them (MASTER_PORT is
port + 1); model shapes and batches past any model trained; a sweep's repeats past any
statistic's need (5 reach a verdict); seconds up to a month.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

DAY_S = 24 * 3600
MAX_SECONDS = 30 * DAY_S  # a launch or a wait longer than a month is a mistake, not a plan


@dataclass(frozen=True)
class Bound:
    """What one option accepts: ``low`` to ``high``; ``above``: more than ``low``, not equal."""

    flag: str  # "--steps": the option, in messages
    low: float
    high: float
    what: str = ""  # "a number of seconds": what the value is, in messages
    unit: str = ""  # "s (30 days)", "USD": after the ceiling in help
    above: bool = False

    def holds(self, value: float) -> bool:
        """Inside the range; nan and the infinities never are (an int of any size is finite:
        math.isfinite would take it to a float, and 400 digits overflow one)."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (value > self.low if self.above else value >= self.low) and value <= self.high

    @property
    def words(self) -> str:
        """The range as help says it: '1 to 1,000', 'above 0, at most 2,592,000 s (30 days)'."""
        low = f"above {_number(self.low)}" if self.above else _number(self.low)
        joint = ", at most " if self.above else " to "
        unit = f" {self.unit}" if self.unit else ""
        return f"{low}{joint}{_number(self.high)}{unit}"

    @property
    def within(self) -> str:
        """The range, for an option's help: ' (1 to 1,000)'."""
        return f" ({self.words})"

    @property
    def rule(self) -> str:
        """The range as a refusal says it: 'a number of seconds above 0 and at most ...'."""
        what = f"{self.what} " if self.what else ""
        low = f"above {_number(self.low)}" if self.above else f"at least {_number(self.low)}"
        return f"{what}{low} and at most {_number(self.high)}"


def shown(value: float) -> str:
    """A refused value as a message says it: 1e+308, 1025; an int of 400 digits cut short
    (':g' would take it to a float, which overflows)."""
    if isinstance(value, float):
        return f"{value:g}"
    digits = str(value)
    return digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits)} digits)"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def seconds(flag: str) -> Bound:
    return Bound(flag, 0, MAX_SECONDS, "a number of seconds", "s (30 days)", above=True)


def nodes_range(flag: str) -> Bound:
    return Bound(flag, 1, 10_000)


def bounds_on(cls: type) -> Mapping[str, Bound]:
    """Each field of dataclass ``cls`` whose type carries a range (``Annotated[int, Bound]``)
    -> its range. Once per class: the options' help asks about 50 times as dtrun starts, and
    each ``get_type_hints`` evaluates every annotation of the class again (35 ms in all)."""
    return _bounds_on(cls)


@functools.cache
def _bounds_on(cls: type) -> Mapping[str, Bound]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return MappingProxyType(
        {
            name: meta
            for name, hint in hints.items()
            for meta in getattr(hint, "__metadata__", ())
            if isinstance(meta, Bound)
        }
    )


def bound_of(cls: type, name: str) -> Bound:
    """The range of field ``name`` of ``cls`` (a KeyError, at import, for a field without)."""
    return bounds_on(cls)[name]


def within(cls: type, name: str) -> str:
    """Field ``name``'s range, for its option's help: ' (1 to 1,000)'."""
    return bound_of(cls, name).within
