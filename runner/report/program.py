"""`dtrun bench -- PROGRAM`: what a program run's report and `dtrun compare` say about it, from
its manifest (the program line, redacted as recorded; the units) and its first result (how
steps were timed, how its parameters were sharded). docs/your-training.md."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtrun.redact import redact_args
from dtrun.report.results import ProgramFacts
from dtrun.spec.request import ScalingMode

# What a program's throughput counts, when dtrun stands in for the user's units
_UNIT_WHY = {
    "process-steps": "no --samples-per-step or --tokens-per-step: one unit per process per "
    "step, so efficiency comes from step times alone",
    "steps": "no --samples-per-step or --tokens-per-step: one unit per step, so efficiency "
    "comes from step times alone",
}
STAND_INS = frozenset(_UNIT_WHY)  # the units dtrun counts where the user gave none
STRATEGY_TEXT = "n/a: your program trains its own way"


@dataclass(frozen=True)
class ProgramTexts:
    line: str  # the program's command line as the manifest records it (secrets redacted)
    unit: str  # "samples", "tokens", "process-steps" or "steps"
    unit_why: str  # "16 samples per step per process", or why dtrun stands in for them


def program_texts(
    bench: Mapping[str, Any], mode: ScalingMode, facts: ProgramFacts | None
) -> ProgramTexts:
    program = bench.get("program") or {}
    # masked again as the manifest's writer masks them: one written elsewhere may not have
    words = list(redact_args((str(program.get("target", "")), *map(str, program.get("args", [])))))
    if program.get("kind") == "module":
        words = ["python", "-m", *words]
    elif program.get("kind") == "script":
        words = ["python", *words]
    units = bench.get("units")
    if units:
        unit = str(units["kind"])
        why = f"{units['count']:,} {unit} per step" + (
            " per process" if units.get("per_process") else " for all processes"
        )
    else:
        unit = "process-steps" if mode is ScalingMode.WEAK else "steps"
        why = _UNIT_WHY[unit]
    if facts is not None and facts.unit != unit:  # pragma: no cover - one writer of both
        unit = facts.unit
    return ProgramTexts(shlex.join(words), unit, why)


def timing_text(bench: Mapping[str, Any], facts: ProgramFacts | None) -> str:
    """How its steps were timed: optimizer steps, --step-pattern's matches, the whole program."""
    timing = facts.timing if facts is not None else "not known (no launch finished)"
    if timing == "step pattern" and bench.get("step_pattern"):
        return f"step pattern {bench['step_pattern']!r}"
    return timing


def sharding_text(facts: ProgramFacts | None) -> str:
    if facts is None:
        return "not known (no launch finished)"
    return f"sharded: {facts.sharded}" if facts.sharded else "whole on every rank"
