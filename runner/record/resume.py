"""`dtrun bench --resume RUN_DIR`: the sweep a run directory records, and what it still lacks.

manifest.json holds the whole BenchSpec (docs/bench.md, "The run directory"), so the sweep is
rebuilt from it, not from the options of the resuming command; runs.json says which launches
(node count, repeat) finished with a result. Resuming runs only the others, into the same run
directory, and rebuilds one report from all of them. --env values that the manifest holds
redacted (secret-looking names) must be given again.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, Union

from runner.errors import UsageError
from runner.record.readback import damaged, kind, list_of, obj, read_record
from runner.record.rundir import RunDir, segment_walls
from runner.redact import REDACTED
from runner.spec.outcome import RunResult, RunStatus
from runner.spec.request import BenchSpec

T = TypeVar("T")

MANIFEST_SHAPE = obj({"run_id": kind("a string", str), "bench": kind("an object", dict)})
RUNS_SHAPE = obj({"runs": list_of(kind("an object", dict))})


@dataclass(frozen=True)
class Resumed:
    """A run directory being resumed: its sweep, and the launches already done."""

    run_dir: RunDir
    spec: BenchSpec
    done: tuple[RunResult, ...]  # finished with a result: kept, not run again
    # the launches that ended without a result (run again now), and those an earlier resume
    # replaced: runs.json keeps them as "replaced", since their time was paid for
    replaced: tuple[RunResult, ...] = ()
    # each earlier run of dtrun on this sweep, its wall time (None: not recorded)
    walls: tuple[float | None, ...] = ()

    def is_done(self, nodes: int, repeat: int) -> bool:
        return any(run.nodes == nodes and run.repeat == repeat for run in self.done)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """A frozen spec dataclass from its ``dataclasses.asdict`` form (nested specs, enums,
    tuples); fields the data lacks keep their defaults (records written by older versions)."""
    hints = typing.get_type_hints(cls)
    given = {
        f.name: _value(hints[f.name], data[f.name])
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name in data and f.init
    }
    return cls(**given)


def _value(hint: Any, value: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        return _value(next(a for a in args if a is not type(None)), value)
    if is_dataclass(hint) and isinstance(hint, type):
        return from_dict(hint, value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], item) for item in value)
        return tuple(_value(a, item) for a, item in zip(args, value, strict=True))
    if hint is Path:
        return Path(value)
    if hint is float:
        return float(value)
    return value


def read_resume(path: Path, env: tuple[tuple[str, str], ...]) -> Resumed:
    """The recorded sweep of run directory ``path``; ``env``: --env given again with --resume,
    for values the manifest holds redacted."""
    run_dir = RunDir(path)
    if not path.is_dir():
        raise UsageError(
            f"--resume {path}: no such run directory",
            fix="pass the run directory of an earlier `dtrun bench` (runs/<run-id>)",
        )
    manifest = read_record(run_dir.manifest, MANIFEST_SHAPE, missing="it is no run directory")
    runs = read_record(run_dir.runs, RUNS_SHAPE, missing="no launch of it was recorded")
    try:
        spec = from_dict(BenchSpec, manifest["bench"])
        done = tuple(
            from_dict(RunResult, run)
            for run in runs["runs"]
            if run.get("status") == RunStatus.OK.value
        )
        replaced = tuple(from_dict(RunResult, run) for run in runs.get("replaced", [])) + tuple(
            from_dict(RunResult, run)
            for run in runs["runs"]
            if run.get("status") != RunStatus.OK.value
        )
        walls = segment_walls(runs, 1 + len(manifest.get("resumed", [])))
    except (TypeError, ValueError, KeyError, StopIteration) as exc:
        raise damaged(run_dir.manifest, f"its sweep cannot be read back: {exc}") from None
    given = dict(env)
    # a whole value (secret-looking name) or a part of one (URL credentials, tokens) hidden
    hidden = [name for name, value in spec.env if REDACTED in value and name not in given]
    if hidden:
        raise UsageError(
            f"the run recorded {', '.join(hidden)} redacted, and resuming needs the values",
            fix=f"pass them again: --resume {path} "
            + " ".join(f"--env {name}=VALUE" for name in hidden),
        )
    merged = tuple((name, given.get(name, value)) for name, value in spec.env)
    extra = tuple((name, value) for name, value in env if name not in dict(spec.env))
    spec = dataclasses.replace(spec, env=merged + extra)
    return Resumed(run_dir, spec, done, replaced, walls)
