"""`dtrun bench --resume RUN_DIR`: the options it takes, and the recorded sweep it runs.

The sweep is the one the run directory records (runner/record/resume.py): options that would
change it (node counts, steps, launcher, model, ...) are refused rather than ignored. What may
differ is where it runs (--hosts, --stack, --slurm, --spark, --local-nodes: the same or a new
cluster), --env values given again for redacted secrets, and how it is shown or kept.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from runner.errors import UsageError
from runner.record.resume import Resumed, read_resume

# Launching options that do not change the sweep: allowed beside --resume.
AS_YOU_LIKE = {"env", "results", "check", "teardown", "dry_run", "quiet"}


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def changed(group: Any, allowed: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The options of an option group that differ from their defaults, as flags."""
    return [
        "--" + field.name.replace("_", "-")
        for field in dataclasses.fields(group)
        if field.name not in allowed and getattr(group, field.name) != _default(field)
    ]


def resume_request(path: Path, groups: tuple[Any, ...], launching: Any) -> Resumed:
    given = [flag for group in groups for flag in changed(group, {"resume"})]
    given += changed(launching, AS_YOU_LIKE)
    if given:
        raise UsageError(
            f"--resume runs the sweep {path} records, and {', '.join(given)} would change it",
            fix=f"leave them out (`dtrun bench --resume {path}`, with --hosts, --stack, --slurm "
            "or --spark for another cluster), or start a new sweep without --resume",
        )
    from runner.cli.parse import parse_env

    env = parse_env(launching.env) if launching.env else ()
    return read_resume(path, env)
