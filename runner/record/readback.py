"""Reading a run directory's JSON records back, with one message for whatever is wrong.

    runs = read_record(path, obj({"status": TEXT, "runs": list_of(obj({"nodes": COUNT}))}))

A shape says what a value must be. The first value that does not fit is named by where it is
in the file (``'runs[1].status'``), what it is and what it should have been; a file that cannot
be read at all (missing, a directory, not UTF-8, empty, cut short, not JSON) is named with how.
Either way the error is a DamagedRunError (exit 2): nothing has been written yet. Fields a shape
does not name are not looked at, so records a later dtrun extends still read.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dtrun.errors import DamagedRunError
from dtrun.spec.bounds import bound_of
from dtrun.spec.request import BenchSpec, RunSpec
from dtrun.spec.runid import run_id_problem

# (value, where it is in the file) -> what is wrong with it, or None when it fits
Shape = Callable[[Any, str], str | None]

RESTORE = (
    "restore it from a copy of the run (the --results bucket it was uploaded to, a backup) or "
    "run the sweep again; nothing was written"
)


def damaged(path: Path, why: str, fix: str = RESTORE) -> DamagedRunError:
    return DamagedRunError(f"{path} is damaged", why=why, fix=fix)


def read_record(
    path: Path, shape: Shape, *, missing: str = "", root: Path | None = None, schema: str = ""
) -> Any:
    """The JSON in ``path``, checked against ``shape``; ``missing`` says why it must exist;
    ``root``: the run directory ``path`` must not leave (through a link); ``schema``: the
    record's schema, where it has one."""
    data = load_json(path, missing, root)
    if schema:
        check_schema(path, data, schema)
    check_record(path, data, shape)
    return data


def check_schema(path: Path, data: Any, schema: str) -> None:
    """A record of another schema (a later dtrun's) is refused, not read as this dtrun's: its
    fields may mean something else, and the messages would name the wrong fault."""
    if not isinstance(data, dict) or data.get("schema") == schema:
        return  # a record that is no object: the shape says so
    found = f"schema {describe(data['schema'])}" if "schema" in data else "no schema"
    raise DamagedRunError(
        f"{path} has {found}",
        why=f"this dtrun reads {schema!r} (dtrun writes it in every one)",
        fix="read it with the dtrun that wrote it (manifest.json's dtrun_version), or run the "
        "sweep again with this one; nothing was written",
    )


def check_record(path: Path, data: Any, shape: Shape) -> None:
    problem = shape(data, "")
    if problem is not None:
        raise damaged(path, problem)


# The largest record a sweep writes is a program's result.json: every rank's step times, about
# 11 bytes each (1,024 ranks of 10,000 steps: 110 MB). A larger file is no record, and read
# whole a sparse 1 GiB one took over 2 GB of memory before json refused its first byte.
MAX_BYTES = 256 * 1024 * 1024

# No figure dtrun records has more digits than this (byte counts, nanoseconds and seeds have
# under 20): a longer one is damage, and Python would refuse or overflow on it later.
MAX_DIGITS = 30


class _TooLong(ValueError):
    pass


class _Twice(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose key is given twice is damage: json keeps the last, another reader the
    first (RFC 8259: names "SHOULD be unique"), so two readers would see two records."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Twice(f"the key {describe(key)} is given twice in one object")
        seen.add(key)
    return dict(pairs)


def _whole(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _TooLong(f"a whole number of {len(text.lstrip('-')):,} digits")
    return int(text)


def _decimal(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400, or 400 digits: beyond any float
        raise _TooLong(f"a number too large for any figure ({text[:20]}..., {len(text):,} chars)")
    return value


def load_json(path: Path, missing: str = "", root: Path | None = None) -> Any:
    """The JSON in ``path``: a regular file (a FIFO or device is never opened for a read that
    could wait forever), inside ``root`` when given, UTF-8, every number of a sane size."""
    raw = _read_regular(path, missing, root)
    if not raw.strip():
        raise damaged(path, "it is empty" if not raw else "it holds only white space")
    try:
        text = raw.decode("utf-8-sig")  # dtrun writes UTF-8; an editor may have added a BOM
    except UnicodeDecodeError as exc:
        raise damaged(
            path, f"byte {exc.start} (0x{raw[exc.start]:02x}) is not UTF-8, so it is not JSON"
        ) from None
    try:
        return parse_json(text)
    except NotReadable as exc:
        raise damaged(path, str(exc)) from None


class NotReadable(ValueError):
    """Why a text is no JSON parse_json reads: one clause for a message."""


def parse_json(text: str) -> Any:
    """``text`` as JSON, every number of a sane size and every key once (any file dtrun reads
    back: a record, saved stack outputs); else NotReadable, saying what is wrong."""
    try:
        return json.loads(
            text, parse_int=_whole, parse_float=_decimal, object_pairs_hook=_unique_keys
        )
    except _Twice as exc:
        raise NotReadable(f"{exc}: dtrun writes each key once") from None
    except json.JSONDecodeError as exc:
        ends_early = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        cut = " (the file ends early: cut short?)" if ends_early else ""
        raise NotReadable(f"line {exc.lineno} column {exc.colno}: {exc.msg}{cut}") from None
    except _TooLong as exc:
        raise NotReadable(
            f"it holds {exc}, more than any figure dtrun records ({MAX_DIGITS} digits)"
        ) from None
    except RecursionError:
        raise NotReadable("it nests deeper than any record dtrun writes") from None


def _read_regular(path: Path, missing: str, root: Path | None) -> bytes:
    if root is not None and (linked := _link_problem(path, root)) is not None:
        raise damaged(path, linked)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once (and is refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DamagedRunError(
            f"{path} is missing", why=missing or "the run directory is incomplete", fix=RESTORE
        ) from None
    except OSError as exc:
        raise damaged(path, f"it cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise damaged(path, "it is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise damaged(path, f"it is {_kind(info.st_mode)}, not a file")
        if info.st_size > MAX_BYTES:
            raise damaged(path, _too_large(info.st_size))
        with os.fdopen(fd, "rb", closefd=False) as file:
            raw = file.read(MAX_BYTES + 1)  # no more, should it have grown since
            if len(raw) > MAX_BYTES:
                raise damaged(path, _too_large(len(raw)))
            return raw
    except OSError as exc:
        raise damaged(path, f"it cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _link_problem(path: Path, root: Path) -> str | None:
    """Where a link on the way from ``root`` leads ``path``, out of the run directory or in it;
    None where no link does (realpath: a link loop is left for the open to report)."""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    if real == top / path.relative_to(root):
        return None
    if not real.is_relative_to(top):
        return (
            f"a symbolic link leads it out of the run directory {root}, and dtrun reads no "
            "record from elsewhere"
        )
    return (
        f"a symbolic link leads it to {real.relative_to(top)} in the run directory, and dtrun "
        "reads each record where the sweep wrote it (one launch's result read as another's "
        "counts twice)"
    )


def _too_large(size: int) -> str:
    return f"it is {size:,} bytes, more than any record dtrun writes ({MAX_BYTES:,} at most)"


def inside(path: Path, root: Path) -> bool:
    """``path`` is in ``root`` once every link on the way is followed (realpath: a link loop
    is left for the open to report)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def describe(value: Any) -> str:
    """A value as a message names it: null, true, 'text', 3, a list, an object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


def _name(where: str) -> str:
    return f"'{where}'" if where else "it"


def _wrong(value: Any, where: str, expected: str) -> str:
    verb = "is" if where else "holds"
    return f"{_name(where)} {verb} {describe(value)}, not {expected}"


def kind(expected: str, *types: type, positive: bool = False) -> Shape:
    """A JSON scalar of one of ``types`` (true and false are no numbers), above 0 if asked."""

    def check(value: Any, where: str) -> str | None:
        fits = isinstance(value, types) and (bool in types or not isinstance(value, bool))
        if fits and isinstance(value, float):
            fits = math.isfinite(value)  # json reads NaN and Infinity; no figure dtrun writes is
        if fits and positive:
            fits = value > 0
        return None if fits else _wrong(value, where, expected)

    return check


def ranged(expected: str, low: float, high: float, why: str, *types: type) -> Shape:
    """A number of ``types`` from ``low`` to ``high``: the figures the report divides by or
    prints, where a value outside is no measurement (a step of 1e-300 s printed a 300-digit
    throughput; runs.json claimed 10^20 nodes)."""
    number = kind(expected, *types)

    def check(value: Any, where: str) -> str | None:
        problem = number(value, where)
        if problem is None and not low <= value <= high:
            return f"{_name(where)} is {describe(value)}, outside {low:,g} to {high:,g} ({why})"
        return problem

    return check


TEXT = kind("text", str)
NUMBER = kind("a number", int, float)
POSITIVE = kind("a number above 0", int, float, positive=True)
WHOLE = ranged("a whole number", -(2**63), 2**63 - 1, "a 64-bit whole number", int)
COUNT = ranged("a whole number above 0", 1, 2**63 - 1, "a 64-bit count", int)  # not 30 digits
# a model's parameters or a process's bytes, as a program's step hook counts them: 0 or more
AMOUNT = ranged("a whole number", 0, 2**63 - 1, "a count or a size: 0 or more", int)
FLAG = kind("true or false", bool)
# a step's seconds: a microsecond (no step that synchronises ranks is faster) to about 11 days
STEP_SECONDS = ranged(
    "a number above 0", 1e-6, 1e6, "a step: a microsecond to about 11 days", int, float
)
# a wall time: a launch's, the sweep's, a run of dtrun's, the nodes' before the sweep; -1e300
# s printed 300-digit node-hours and costs, and no cluster stays up 3 years for one sweep
WALL_SECONDS = ranged("a number of seconds", 0, 1e8, "a wall time: up to about 3 years", int, float)
# a machine's noise figures (runner/workloads/noise.py): 1e308 other cores printed 300 digits
SHARE = ranged("a number", 0, 1, "a share of the CPU time", int, float)
CORES = ranged("a number", 0, 1e6, "cores or a load: none to a million", int, float)
# a launch's MFU, scaled to the median step (report/metrics.py): 1e308 became infinite, which
# summary.json cannot hold; a share of the peak, over 1 only where the catalog's peak is low
MFU = ranged("a share", 0, 10, "MFU: the model's FLOP/s over the GPUs' peak", int, float)
# a bandwidth dtrun measures (busbw, a memory copy): 1e308 printed 300 digits in report.md
GBS = ranged("a number", 0, 1e6, "GB/s: none to a million", int, float)
_NODES = bound_of(RunSpec, "nodes")
NODE_COUNT = ranged("a whole number above 0", _NODES.low, _NODES.high, "--nodes' range", int)


def as_option(cls: type, name: str, *, whole: bool = False) -> Shape:
    """A number (``whole``: an int) as the option of field ``name`` of ``cls`` takes it: what
    `dtrun bench --resume` refuses, the report refuses too."""
    bound = bound_of(cls, name)

    def check(value: Any, where: str) -> str | None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (whole and isinstance(value, float))
        ):
            return _wrong(value, where, "a whole number" if whole else "a number")
        if not bound.holds(value):
            return f"{_name(where)} is {describe(value)}: {bound.flag} is {bound.rule}"
        return None

    return check


def options(cls: type, *names: str) -> dict[str, Shape]:
    """Each of ``names``, a whole number as its option of ``cls`` takes it (as_option)."""
    return {name: as_option(cls, name, whole=True) for name in names}


TARGET = as_option(BenchSpec, "target_efficiency")
PRICE = as_option(BenchSpec, "price_per_node_hour")  # a price of 1e300 printed 300 digits
PROJECT_TOKENS = as_option(BenchSpec, "project_tokens", whole=True)  # 10^29: 20-digit days


def _run_id(value: Any, where: str) -> str | None:
    """A run id as --run-id takes it (runner/spec/runid.py): it names directories and every
    report, console line and plot title shows it."""
    if not isinstance(value, str):
        return _wrong(value, where, "text")
    problem = run_id_problem(value)
    return None if problem is None else f"{_name(where)} is {describe(value)}: {problem}"


RUN_ID: Shape = _run_id


def _revision(value: Any, where: str) -> str | None:
    """A git commit id: 40 hex digits (SHA-1) or 64 (SHA-256), as `git rev-parse` prints it."""
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value):
        return None
    return _wrong(value, where, "a git commit id (40 or 64 hex digits)")


REVISION: Shape = _revision


def nullable(shape: Shape) -> Shape:
    return lambda value, where: None if value is None else shape(value, where)


def one_of(*choices: str) -> Shape:
    expected = "one of " + ", ".join(map(repr, choices))
    return lambda value, where: None if value in choices else _wrong(value, where, expected)


def obj(fields: Mapping[str, Shape], optional: Mapping[str, Shape] | None = None) -> Shape:
    """A JSON object with every key of ``fields``, and ``optional``'s keys where present."""

    def check(value: Any, where: str) -> str | None:
        if not isinstance(value, dict):
            return _wrong(value, where, "a JSON object")
        absent = next((key for key in fields if key not in value), None)
        if absent is not None:
            return f"{_name(where)} has no '{absent}'"
        for key, shape in {**fields, **(optional or {})}.items():
            if key in value:
                problem = shape(value[key], f"{where}.{key}" if where else key)
                if problem is not None:
                    return problem
        return None

    return check


def list_of(item: Shape, *, nonempty: bool = False) -> Shape:
    def check(value: Any, where: str) -> str | None:
        if not isinstance(value, list):
            return _wrong(value, where, "a list")
        if nonempty and not value:
            return f"{_name(where)} is an empty list"
        for index, each in enumerate(value):
            problem = item(each, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None

    return check


ANY_OBJECT = obj({})
