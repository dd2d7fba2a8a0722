"""The range of every number an option of dtrun takes, in one table: the checks
(runner/plan/checks.py, runner/azure/prices.py), the options' help (runner/cli/options.py) and
docs/bench.md ("Bounds", compared with this table by a test) all read it. Pure.

Every number has a ceiling, so that no value makes dtrun plan without end (``--repeat
1000000000`` planned a billion launches before saying anything) or hand a node a number its
tools cannot hold (``--timeout 1e308`` reached torchrun as an OverflowError). Each ceiling is
far above any real use, and says why it is there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DAY_S = 24 * 3600
MAX_SECONDS = 30 * DAY_S  # a launch or a wait longer than a month is a mistake, not a plan


@dataclass(frozen=True)
class Bound:
    """What one option accepts: ``low`` to ``high``; ``above``: more than ``low``, not equal."""

    low: float
    high: float
    what: str = ""  # "a number of seconds": what the value is, in messages
    unit: str = ""  # "s (30 days)", "USD": after the ceiling in help
    above: bool = False

    def holds(self, value: float) -> bool:
        """Inside the range; nan and the infinities never are."""
        if not math.isfinite(value):
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
    def rule(self) -> str:
        """The range as a refusal says it: 'a number of seconds above 0 and at most ...'."""
        what = f"{self.what} " if self.what else ""
        low = f"above {_number(self.low)}" if self.above else f"at least {_number(self.low)}"
        return f"{what}{low} and at most {_number(self.high)}"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _seconds() -> Bound:
    return Bound(0, MAX_SECONDS, "a number of seconds", "s (30 days)", above=True)


# Flag -> its range. The ceilings: node counts past the largest clusters built (about 10,000
# nodes); ports as TCP has them (MASTER_PORT is port + 1); model shapes and batches past any
# model trained; a sweep's repeats past any statistic's need (5 reach a verdict).
BOUNDS: dict[str, Bound] = {
    "--nodes": Bound(1, 10_000),
    "--local-nodes": Bound(1, 10_000),
    "--procs-per-node": Bound(1, 1024),
    "--port": Bound(1, 65534),
    "--tf-ps": Bound(1, 1024),
    "--steps": Bound(1, 1_000_000),
    "--warmup": Bound(0, 999_999),
    "--repeat": Bound(1, 1000),
    "--batch": Bound(1, 1_048_576),
    "--global-batch": Bound(1, 16_777_216),
    "--layers": Bound(1, 1024),
    "--d-model": Bound(1, 1_048_576),
    "--heads": Bound(1, 65536),
    "--seq-len": Bound(1, 16_777_216),
    "--vocab": Bound(1, 16_777_216),
    "--micro-batches": Bound(1, 65536),
    "--pp-size": Bound(1, 1_048_576),
    "--stages-per-rank": Bound(1, 1024),
    "--ar-iters": Bound(1, 1_000_000),
    "--ar-warmup": Bound(0, 1_000_000),
    "--project-tokens": Bound(1, 10**15),
    "--samples-per-step": Bound(1, 10**12),
    "--tokens-per-step": Bound(1, 10**15),
    "--target-efficiency": Bound(0, 1, "a fraction", above=True),
    "--timeout": _seconds(),
    "--ready-timeout": _seconds(),
    "--connect-timeout": _seconds(),
    "--queue-timeout": _seconds(),
    "--health-threshold": Bound(0, 1_000_000, "", "GB/s", above=True),
    "--price-per-node-hour": Bound(0, 100_000, "", "USD", above=True),
    "--max-cost": Bound(0, 1_000_000_000, "", "USD", above=True),
}


def bound(flag: str) -> Bound:
    return BOUNDS[flag]


def within(flag: str) -> str:
    """The range, for an option's help: ' (1 to 1,000)'."""
    return f" ({BOUNDS[flag].words})"
