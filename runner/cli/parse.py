"""Parsing of the CLI's free-form option values into typed values. Pure."""

from __future__ import annotations

import re
import secrets
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dtrun.errors import UsageError
from dtrun.redact import redact_text
from dtrun.spec.bounds import bound_of
from dtrun.spec.cluster import Node
from dtrun.spec.request import BenchSpec, PlatformEnv, Program, ProgramKind
from dtrun.spec.runid import MAX_RUN_ID, RUN_ID_RULE, run_id_problem, run_id_size
from dtrun.spec.text import SURROGATES

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?\Z")
_COUNT = re.compile(r"[+-]?([0-9]+)")


def parse_node_counts(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): sorted, without repeats. Range checks happen in the plan."""
    counts: set[int] = set()
    for part in text.replace(" ", "").split(","):
        # ASCII digits with one sign at most: int() alone also takes 1_0 and other scripts' digits
        found = _COUNT.fullmatch(part)
        if found is None:
            raise UsageError(
                f"--nodes {text!r} is not a list of node counts",
                why=f"{part!r} is not a whole number" if part else "it has an empty entry",
                fix="pass whole numbers separated by commas, e.g. --nodes 1,2,4",
            )
        most = sys.get_int_max_str_digits()  # 0: no limit (PYTHONINTMAXSTRDIGITS=0)
        if 0 < most < len(found.group(1)):  # int() would refuse it
            raise UsageError(
                f"--nodes needs node counts of {bound_of(BenchSpec, 'node_counts').rule}",
                why=f"got a number of {len(found.group(1)):,} digits",
                fix="pass e.g. --nodes 1,2,4",
            )
        counts.add(int(part))
    return tuple(sorted(counts))


# A decimal amount as people write one, ASCII only: float() also takes 1_000, ' 5', Arabic-Indic
# digits and nan; an exponent stays (1e3), and the option's range refuses what is absurd.
_AMOUNT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_amount(flag: str, text: str) -> float:
    """``"98.32"`` -> 98.32 for a money option; the range is checked by the caller."""
    if _AMOUNT.fullmatch(text) is None:
        shown = text if len(text) <= 40 else f"{text[:40]}..."
        raise UsageError(
            f"{flag} {shown} is not a price",
            why="an amount is ASCII digits with one '.' at most, and an exponent (e3) if need "
            "be: no '_', space, sign or other script's digits",
            fix=f"pass e.g. {flag} 98.32, or leave it out",
        )
    return float(text)


def parse_env(items: list[str]) -> tuple[tuple[str, str], ...]:
    """``["A=1", "B=x=y"]`` -> (("A", "1"), ("B", "x=y")). Names are checked in the plan."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(
                f"--env {item!r} is not KEY=VALUE",
                fix="pass --env NAME=VALUE, once per variable",
            )
        pairs.append((key, utf8(f"--env {key}'s value", value)))
    return tuple(pairs)


def utf8(what: str, text: str, *, show: bool = False) -> str:
    """``text``, refused where a byte of it was not UTF-8 (Python keeps one as a lone
    surrogate, PEP 383): the scripts, records and logs dtrun writes are UTF-8 text, and cannot
    deliver it unchanged (docs/launchers.md#dtrun-run). Shown only where ``show``: an argument
    or a value may be a secret, and no redactor knows it yet."""
    bad = _NOT_UTF8.search(text)
    if bad is None:
        return text
    byte = f"0x{ord(bad.group(0)) & 0xFF:02x}"
    shown = _NOT_UTF8.sub(lambda m: f"\\x{ord(m.group(0)) & 0xFF:02x}", text)
    raise UsageError(
        f"{what} '{shown}' is not UTF-8" if show else f"{what} is not UTF-8",
        why=f"byte {byte} at index {bad.start()}: dtrun writes it into launch scripts and "
        "records, which are UTF-8 text",
        fix="pass it as UTF-8 (a file name: `convmv -f latin1 -t utf8`), or let your program "
        "read it from a file",
    )


_NOT_UTF8 = re.compile(f"[{SURROGATES}]")


def parse_platforms(items: Sequence[str]) -> tuple[PlatformEnv, ...]:
    """``["azureml,volcano", "sagemaker"]`` -> each named platform once, in order given."""
    names = [name.strip().lower() for item in items for name in item.split(",")]
    valid = ", ".join(platform.value for platform in PlatformEnv)
    platforms: list[PlatformEnv] = []
    for name in names:
        if name not in {platform.value for platform in PlatformEnv}:
            raise UsageError(
                f"--platform-env {name!r} is not a platform dtrun knows",
                why=f"the platforms whose environments dtrun provides: {valid}",
                fix=f"pass one or more of {valid}, separated by commas",
            )
        if PlatformEnv(name) not in platforms:
            platforms.append(PlatformEnv(name))
    return tuple(platforms)


def new_run_id() -> str:
    """Sortable by time, unique enough for concurrent runs: 20261123-101500-3fa2."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    """A run id names a directory and a rendezvous: letters, digits, '.', '_' and '-' only."""
    size = run_id_size(run_id)
    if size > MAX_RUN_ID:
        chars = f" ({len(run_id)} characters)" if size != len(run_id) else ""
        raise UsageError(
            f"--run-id is {size} bytes long{chars}",
            why=f"it names a directory and a rendezvous id: at most {MAX_RUN_ID} bytes as UTF-8 "
            "(file systems count a name's bytes; a letter outside ASCII takes 2 to 4)",
            fix="pass a shorter --run-id, or leave it out to get a fresh one",
        )
    if run_id_problem(run_id):
        raise UsageError(
            f"--run-id {run_id!r} cannot name a run directory",
            why=f"use {RUN_ID_RULE}",
            fix="pass e.g. --run-id baseline-1, or leave it out to get a fresh one",
        )
    if redact_text(run_id) != run_id:  # not shown: it is the secret
        raise UsageError(
            "--run-id holds a secret: a token's shape, or a value dtrun hides",
            why="every record would show <redacted> in its place, and the run could not be "
            'read back (docs/security.md, "Redaction")',
            fix="pass another --run-id, or leave it out to get a fresh one",
        )
    return run_id


def parse_command(argv: list[str], cwd: Path | None = None) -> Program:
    """The command after `dtrun run ... --`, as a Program every launcher can place.

    ``python SCRIPT ...`` and ``python -m MODULE ...`` (a bare python, python3, python3.11)
    run with the nodes' Python, the inventory's, which holds torch and the launchers; anything
    else, an interpreter given by its path included, runs as it is. A relative script or
    executable path is taken from ``cwd`` (where dtrun was started), since every process runs
    in its launch directory.
    """
    program = _program(argv, cwd)
    utf8("the program", program.target, show=True)
    for number, arg in enumerate(program.args, 1):
        utf8(f"the program's argument {number}", arg)
    return program


def _program(argv: list[str], cwd: Path | None) -> Program:
    if not argv:
        raise UsageError(
            "dtrun run needs a command to run",
            why="nothing came after the options",
            fix="pass the command after --, e.g. dtrun run --nodes 2 -- python train.py --lr 3e-4",
        )
    first, rest = argv[0], argv[1:]

    def anchored(path: str) -> str:
        return str(cwd / path) if cwd is not None and not Path(path).is_absolute() else path

    if first.startswith("-"):  # after `exec`, --no-python, --no_python: an option of theirs
        raise UsageError(
            f"the program {first!r} starts with '-'",
            why="every launcher would read it as an option of its own, not as a command",
            fix=f"name a file of that name by its path, e.g. ./{first}",
        )
    if not _PYTHON.match(first):
        target = anchored(first) if "/" in first else first  # a bare name is looked up in PATH
        return Program(ProgramKind.EXECUTABLE, target, tuple(rest))
    if len(rest) >= 2 and rest[0] == "-m":
        module = rest[1]
        if not all(part.isidentifier() for part in module.split(".")):
            raise UsageError(
                f"python -m {module!r}: {module!r} is not a module name",
                why="python -m takes an absolute module name, Python identifiers joined by "
                "dots (pkg.train): it would fail on every node after the launch started",
                fix="pass python -m PACKAGE.MODULE, or python SCRIPT for a file",
            )
        if module.endswith(".py") and cwd is not None and (cwd / module).is_file():
            raise UsageError(
                f"python -m {module} names a module by its file",
                why=f"-m takes a module name, and {module} is a file here: Python would look "
                f"for a module 'py' in a package {module[:-3]!r}",
                fix=f"pass python {module}, or python -m {module[:-3]}",
            )
        return Program(ProgramKind.MODULE, module, tuple(rest[2:]))
    if rest and not rest[0].startswith("-"):
        return Program(ProgramKind.SCRIPT, anchored(rest[0]), tuple(rest[1:]))
    raise UsageError(
        f"cannot tell what `{' '.join(argv[:3])}` runs",
        why="dtrun runs `python SCRIPT ARGS` or `python -m MODULE ARGS` with the nodes' Python, "
        "and other interpreter options have no place in every launcher's syntax",
        fix="pass python SCRIPT or python -m MODULE (PYTHON* settings go in --env), or run the "
        "interpreter by its full path",
    )


def parse_command_line(words: list[str]) -> str:
    """`dtrun exec -- CMD`: one argument is a shell line as it is; several are quoted words."""
    if not words or (len(words) == 1 and not words[0].strip()):  # `dtrun exec -- ''` ran nothing
        raise UsageError(
            "no command to run", fix="put it after --, e.g. dtrun exec -- nvidia-smi -L"
        )
    for number, word in enumerate(words, 1):
        utf8(f"the command's word {number}", word)
    return words[0] if len(words) == 1 else shlex.join(words)


def select_nodes(nodes: Sequence[Node], text: str | None) -> tuple[Node, ...]:
    """`--nodes 0,2` or `--nodes node-0,node-2`: those nodes, in inventory order."""
    if text is None:
        return tuple(nodes)
    by_name = {node.name: node for node in nodes}
    wanted = set()
    for part in text.replace(" ", "").split(","):
        name = f"node-{part}" if part.isdigit() else part
        if name not in by_name:
            raise UsageError(
                f"--nodes {text!r} names {part!r}, which is not a node of this cluster",
                fix=f"use indices or names among {', '.join(by_name)}",
            )
        wanted.add(name)
    return tuple(node for node in nodes if node.name in wanted)
