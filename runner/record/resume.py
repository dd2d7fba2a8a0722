"""`dtrun bench --resume RUN_DIR`: the sweep a run directory records, and what it still lacks.

manifest.json holds the whole BenchSpec (docs/bench.md, "The run directory"), so the sweep is
rebuilt from it, not from the options of the resuming command; runs.json says which launches
(node count, repeat) finished with a result. Resuming runs only the others, into the same run
directory, and rebuilds one report from all of them. --env values that the manifest holds
redacted (secret-looking names) must be given again.
"""

from __future__ import annotations

import dataclasses
import stat
import types
import typing
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, Union

from dtrun.errors import UsageError
from dtrun.plan.sweep import HEALTH_DIR
from dtrun.record.readback import (
    FLAG,
    NUMBER,
    RUN_ID,
    TEXT,
    WHOLE,
    Shape,
    check_record,
    damaged,
    describe,
    kind,
    list_of,
    nullable,
    obj,
    read_record,
)
from dtrun.record.rundir import HEALTH_FILE, MANIFEST_SCHEMA, RunDir
from dtrun.record.runsfile import RUNS_SCHEMA, cleanups, segment_walls, sweep_launches
from dtrun.record.writer import no_launch_recorded
from dtrun.redact import REDACTED
from dtrun.spec.launchplan import STEP_DIR
from dtrun.spec.outcome import RunResult, RunStatus, SweepStatus
from dtrun.spec.request import BenchSpec, leaves_out
from dtrun.workloads.files import name_too_long, refuse_link

T = TypeVar("T")

MANIFEST_SHAPE = obj(
    {"run_id": RUN_ID, "bench": kind("an object", dict)},
    optional={"resumed": list_of(kind("an object", dict))},
)
RUNS_SHAPE = obj(
    {"runs": list_of(kind("an object", dict))},
    optional={
        "replaced": list_of(kind("an object", dict)),
        "segment_wall_s": list_of(nullable(NUMBER)),
        "wall_s": nullable(NUMBER),
        "cleanup": TEXT,
        "earlier_cleanup": list_of(TEXT),
    },
)


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
    # it leaves launches timed in noise out (spec/request.py NOISY_LEFT_OUT); older sweeps: no
    leave_out: bool = True
    complete: bool = False  # runs.json says the sweep ended with every launch run: none left
    # what earlier runs of dtrun on this sweep could not tidy up (runs.json's `cleanup`)
    cleanups: tuple[str, ...] = ()

    def is_done(self, nodes: int, repeat: int) -> bool:
        return any(run.nodes == nodes and run.repeat == repeat for run in self.done)


class Mistyped(ValueError):
    """A recorded value that is not of its field's type: where it is, and what is wrong."""


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """A frozen spec dataclass from its ``dataclasses.asdict`` form (nested specs, enums,
    tuples), every value checked against its field's type (Mistyped names the first that is
    not); fields the data lacks keep their defaults (records written by older versions)."""
    if not isinstance(data, dict):
        raise Mistyped(_wrong(data, where, "a JSON object"))
    needed = (f.name for f in fields(cls) if f.init and f.name not in data)  # type: ignore[arg-type]
    absent = next((name for name in needed if _required(cls, name)), None)
    if absent is not None:  # cls() would raise a TypeError: a traceback
        raise Mistyped(f"'{where}' has no '{absent}'" if where else f"it has no '{absent}'")
    hints = typing.get_type_hints(cls)
    given = {
        f.name: _value(hints[f.name], data[f.name], f"{where}.{f.name}" if where else f.name)
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name in data and f.init
    }
    return cls(**given)


def _required(cls: type, name: str) -> bool:
    """Field ``name`` of ``cls`` has no default: every record must give it."""
    field = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    return field.default is MISSING and field.default_factory is MISSING


def _wrong(value: Any, where: str, expected: str) -> str:
    return f"'{where}' is {describe(value)}, not {expected}"


_SCALARS: dict[Any, tuple[str, Shape]] = {
    int: ("a whole number", WHOLE),
    float: ("a number", NUMBER),
    str: ("text", TEXT),
    bool: ("true or false", FLAG),
}


def _value(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _value(next(a for a in args if a is not type(None)), value, where)
    if is_dataclass(hint) and isinstance(hint, type):
        return from_dict(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _member(hint, value, where)
    if origin is tuple:
        return _tuple(args, value, where)
    if hint is Path:
        return Path(_value(str, value, where))
    if hint in _SCALARS:
        expected, shape = _SCALARS[hint]
        if shape(value, where) is not None:
            raise Mistyped(_wrong(value, where, expected))
        return float(value) if hint is float else value
    return value


def _member(enum: type[Enum], value: Any, where: str) -> Enum:
    choices = [member.value for member in enum]
    if value not in choices:
        raise Mistyped(_wrong(value, where, "one of " + ", ".join(map(repr, choices))))
    return enum(value)


def _tuple(args: tuple[Any, ...], value: Any, where: str) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):  # JSON's lists; asdict's tuples
        raise Mistyped(_wrong(value, where, "a list"))
    if len(args) == 2 and args[1] is Ellipsis:
        args = (args[0],) * len(value)
    elif len(value) != len(args):  # e.g. an --env pair of one
        raise Mistyped(_wrong(value, where, f"a list of {len(args)}"))
    return tuple(
        _value(arg, item, f"{where}[{index}]")
        for index, (arg, item) in enumerate(zip(args, value, strict=True))
    )


def recorded_spec(path: Path, flag: str = "--resume") -> BenchSpec:
    """The sweep run directory ``path`` records, as its manifest holds it (secrets redacted);
    ``flag`` names the option in the messages."""
    run_dir = RunDir(path)
    if name_too_long(path) or not path.is_dir():  # pathlib raises on a name too long
        raise UsageError(
            f"{flag} {path}: no such run directory",
            fix="pass the run directory of an earlier `dtrun bench` (runs/<run-id>)",
        )
    manifest = read_record(
        run_dir.manifest,
        MANIFEST_SHAPE,
        missing="it is no run directory",
        root=path,
        schema=MANIFEST_SCHEMA,
    )
    bench = manifest["bench"]
    if bench.get("until_decided") is True and "max_launches" not in bench:
        # written before --max-launches had a field of its own: "repeat" held it
        bench = {**bench, "max_launches": bench.get("repeat")}
    try:
        return from_dict(BenchSpec, bench, "bench")
    except Mistyped as exc:
        raise damaged(run_dir.manifest, str(exc)) from None


def read_spec(
    path: Path,
    env: tuple[tuple[str, str], ...],
    flag: str = "--resume",
    recorded: BenchSpec | None = None,
) -> BenchSpec:
    """The sweep run directory ``path`` records (``recorded``, when already read), with ``env``
    (--env given again) in place of the values its manifest holds redacted; ``flag`` names the
    option in the messages."""
    spec = recorded if recorded is not None else recorded_spec(path, flag)
    given = dict(env)
    # a whole value (secret-looking name) or a part of one (URL credentials, tokens) hidden
    hidden = [name for name, value in spec.env if REDACTED in value and name not in given]
    if hidden:
        raise UsageError(
            f"the run recorded {', '.join(hidden)} redacted, and {flag} needs the values",
            fix=f"pass them again: {flag} {path} "
            + " ".join(f"--env {name}=VALUE" for name in hidden),
        )
    if spec.program is not None and any(REDACTED in arg for arg in spec.program.args):
        raise UsageError(
            f"the run recorded your program's secret-looking arguments redacted, and {flag} "
            "needs them",
            why="dtrun keeps no secret in a run directory",
            fix=f"run the sweep again without {flag}, giving its command line whole (pass "
            "secrets to the program with --env)",
        )
    merged = tuple((name, given.get(name, value)) for name, value in spec.env)
    extra = tuple((name, value) for name, value in env if name not in dict(spec.env))
    return dataclasses.replace(spec, env=merged + extra)


def read_resume(
    path: Path, env: tuple[tuple[str, str], ...], recorded: BenchSpec | None = None
) -> Resumed:
    """The recorded sweep of run directory ``path`` (``recorded``: its spec, when already
    read); ``env``: --env given again with --resume, for values the manifest holds redacted."""
    spec = read_spec(path, env, recorded=recorded)
    run_dir = RunDir(path)
    manifest = read_record(
        run_dir.manifest,
        MANIFEST_SHAPE,
        missing="it is no run directory",
        root=path,
        schema=MANIFEST_SCHEMA,
    )
    no_launch_recorded(path, run_dir.runs)  # still in its first launch, or ended in it
    runs = read_record(
        run_dir.runs,
        RUNS_SHAPE,
        missing="no launch of it was recorded",
        root=path,
        schema=RUNS_SCHEMA,
    )
    try:
        every = [from_dict(RunResult, run, f"runs[{i}]") for i, run in enumerate(runs["runs"])]
        earlier = [
            from_dict(RunResult, run, f"replaced[{i}]")
            for i, run in enumerate(runs.get("replaced", []))
        ]
    except Mistyped as exc:
        raise damaged(run_dir.runs, str(exc)) from None
    check_record(run_dir.runs, runs, sweep_launches(manifest["bench"]))  # or it launches over one
    done = tuple(run for run in every if run.status is RunStatus.OK)
    replaced = (*earlier, *(run for run in every if run.status is not RunStatus.OK))
    walls = segment_walls(runs, 1 + len(manifest.get("resumed", [])))
    complete = runs.get("status") == SweepStatus.COMPLETE.value
    return Resumed(
        run_dir,
        spec,
        done,
        replaced,
        walls,
        leaves_out(manifest["bench"]),
        complete,
        cleanups(runs),
    )


def written_paths(resumed: Resumed, derived: Iterable[str] = ()) -> list[Path]:
    """What resuming ``resumed`` writes, in the order it does, as far as it is there now: each
    launch it (re)runs, its node count's folder, what is at the top of it and in its
    dtrun-steps/ (where dtrun's files go; a failed launch's are replaced); plan/n<N>/ of node
    counts with no launch kept; health/ and its node folders where the gate runs; the records
    and the report. Deeper, a failed launch's folder holds what its program made, which the
    program makes again (W&B's wandb/latest-run is a link): not dtrun's to refuse. A kept
    launch's folder is not among them: what its program left there, links included, is only
    read (runner/record/readback.py). ``derived``: the report's other files (its plots),
    named by runner/report/build.py's OUTPUTS."""
    run_dir, spec = resumed.run_dir, resumed.spec
    folders = [
        run_dir.point(nodes, repeat)
        for nodes in spec.node_counts
        for repeat in range(spec.launches)
        if not resumed.is_done(nodes, repeat)
    ]
    kept = {run.nodes for run in resumed.done}
    plans = [run_dir.plan_dir(nodes) for nodes in spec.node_counts if nodes not in kept]
    paths: list[Path] = []
    gate = [run_dir.path / HEALTH_DIR] if spec.health.enabled else []  # health/<node>/
    for folder in [*folders, *plans]:
        paths += [folder.parent, folder]
        for where in (folder, folder / STEP_DIR):
            if _real_dir(where):
                paths += sorted(where.iterdir())  # names only: a link is not followed
    for folder in gate:
        paths += [folder, *(sorted(folder.iterdir()) if _real_dir(folder) else [])]
    records = (run_dir.manifest, run_dir.runs, run_dir.summary, run_dir.report, run_dir.html)
    others = (run_dir.path / name for name in derived)
    return [*dict.fromkeys([*paths, *records, *others]), run_dir.path / HEALTH_FILE]


def _real_dir(path: Path) -> bool:
    return not path.is_symlink() and path.is_dir()


def refuse_links(resumed: Resumed, derived: Iterable[str] = ()) -> None:
    """Exit 2 naming the first symbolic link (or FIFO, socket, device) among the paths resuming
    writes, before anything runs: a write would refuse it anyway (write_atomic), but only once
    launches had begun."""
    root = resumed.run_dir.path
    for path in written_paths(resumed, derived):
        try:
            refuse_link(path)
        except OSError:
            raise UsageError(
                f"{path.relative_to(root)} in {root} is a symbolic link, and --resume writes there",
                why="dtrun writes no file or folder through a link (it could point anywhere); "
                "nothing was run or written",
                fix=f"remove the link (or put what it points to in its place) and run "
                f"`dtrun bench --resume {root}` again",
            ) from None
        if _special(path):  # a FIFO: opening it to write a node's log waited forever
            raise UsageError(
                f"{path.relative_to(root)} in {root} is {_special(path)}, and --resume writes "
                "there",
                why="dtrun writes plain files and folders; nothing was run or written",
                fix=f"remove it and run `dtrun bench --resume {root}` again",
            )


def _special(path: Path) -> str:
    """'a FIFO', 'a socket' or 'a device' where ``path`` is one; "" otherwise."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return ""
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
