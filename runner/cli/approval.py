"""Before `dtrun bench --rerun RUN_DIR` or `--resume RUN_DIR` runs what the run directory
records: show the recorded program and environment and ask, once per record
(docs/security.md, "Run directories are data").

A run directory is data: it is downloaded from a results store, shared on a cluster's storage,
and anyone who could write there chose its manifest.json. Its program and its --env values run
on every node, so they are shown and run only when this user says yes, on a terminal, or passes
--yes. A yes is remembered as a digest of the absolute run directory and the record in
``$XDG_CONFIG_HOME/dtrun/approved`` (default ``~/.config``), as direnv remembers an allowed
`.envrc` by the SHA-256 of its path and content (direnv's internal/cmd/rc.go, fileHash), so the
same record in the same place is not asked about again and any change to it is.

A record of dtrun's own workload, with no program and no --env value, runs nothing but dtrun's
code with the options it records (each checked as if typed): it is not asked about.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path

from dtrun.errors import DtrunError, Lines, UsageError
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from dtrun.spec.text import one_line

APPROVED = "approved"  # the file under $XDG_CONFIG_HOME/dtrun/


class NotApproved(DtrunError):
    """The user said no: nothing ran, nothing was written."""


def needs_approval(recorded: BenchSpec) -> bool:
    """Whether running ``recorded`` runs anything dtrun did not write: a program or --env."""
    return recorded.program is not None or bool(recorded.env)


def approvals_file(environ: Mapping[str, str] = os.environ) -> Path:
    """Where approvals are kept: $XDG_CONFIG_HOME/dtrun/approved, or ~/.config/dtrun/approved
    when it is unset or relative (the XDG Base Directory spec ignores a relative one)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "dtrun" / APPROVED


def record_digest(run_dir: Path, recorded: BenchSpec) -> str:
    """SHA-256 of the run directory's absolute path and the program and --env it records,
    as recorded (redacted values and all)."""
    record = {
        "program": asdict(recorded.program) if recorded.program is not None else None,
        "env": [list(pair) for pair in recorded.env],
    }
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    where = os.fsencode(run_dir.resolve())
    return hashlib.sha256(where + b"\n" + text.encode("utf-8", "surrogateescape")).hexdigest()


# a line is 64 hex digits and a path: a million approvals fit
MAX_STORE = 64 * 1024 * 1024


def _read_store(store: Path) -> bytes:
    """The store's bytes: a regular file of a store's size, else OSError (a FIFO put at its
    name was waited on for ever: O_NONBLOCK opens it at once and it is refused)."""
    fd = os.open(store, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_STORE:
            raise OSError(errno.EINVAL, "not a regular file of an approval store's size")
        return file.read(MAX_STORE + 1)


def approved(store: Path, digest: str) -> bool:
    """Whether ``digest`` is one of the store's lines; a store that cannot be read holds none
    (dtrun asks again)."""
    try:
        text = _read_store(store).decode("utf-8", errors="replace")
    except OSError:
        return False
    return any(line.split(" ", 1)[0] == digest for line in text.splitlines())


def remember(store: Path, digest: str, run_dir: Path) -> None:
    """Add ``digest`` to the store, written whole (a temporary file, then a rename; no link
    followed). A store that cannot be written is said, and the run goes on: the user said yes."""
    from dtrun.workloads.files import write_atomic

    try:
        store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        old = b""
        with contextlib.suppress(FileNotFoundError):
            old = _read_store(store)
        line = f"{digest} {json.dumps(str(run_dir.resolve()))}\n".encode()
        write_atomic(store, old + (b"" if not old or old.endswith(b"\n") else b"\n") + line, 0o600)
    except OSError as exc:
        print(f"dtrun: could not remember the approval in {store}: {exc.strerror}", file=sys.stderr)


def program_words(program: Program) -> list[str]:
    """The program as a command line: what the nodes run."""
    head = {
        ProgramKind.MODULE: ["python", "-m", program.target],
        ProgramKind.SCRIPT: ["python", program.target],
        ProgramKind.EXECUTABLE: [program.target],
    }[program.kind]
    return [*head, *program.args]


def shown(recorded: BenchSpec) -> str:
    """The recorded program and environment, secrets redacted, one per line: each shell-quoted
    on its line (render.shell_line), a line break in a value too, so no value reads as a line."""
    from dtrun.render import shell_line

    safe = recorded.redacted()
    lines = []
    if safe.program is not None:
        lines.append(f"  program: {shell_line(program_words(safe.program))}")
    lines.extend(f"  --env {shell_line([f'{name}={value}'])}" for name, value in safe.env)
    return Lines("\n".join(lines))


def approve(
    run_dir: Path,
    recorded: BenchSpec,
    flag: str,
    *,
    yes: bool,
    ask: Callable[[str], bool] | None = None,
    store: Path | None = None,
) -> None:
    """Return when ``recorded`` (read from ``run_dir``'s manifest.json) may run: it runs only
    dtrun's workload, ``yes`` (--yes), this user approved it before, or says yes now. Without a
    terminal to ask on, a UsageError naming --yes; a no, NotApproved. ``ask``: the question,
    answered (default: a yes/no prompt on the terminal, when stdin is one)."""
    if not needs_approval(recorded) or yes:
        return
    store = store if store is not None else approvals_file()
    digest = record_digest(run_dir, recorded)
    if approved(store, digest):
        return
    manifest = run_dir / "manifest.json"
    what = one_line(f"{flag} {run_dir} runs the program and environment {manifest} records")
    if ask is None:
        if not sys.stdin.isatty():
            raise UsageError(
                f"{what}, and there is no terminal to ask whether to run them",
                why=Lines(
                    "a run directory is data: whoever could write it chose them\n" + shown(recorded)
                ),
                fix=f"read them, then pass --yes: dtrun bench {flag} {run_dir} --yes",
            )
        ask = _prompt
    question = f"{what}:\n{shown(recorded)}\nRun them on every node?"  # the prompt: last line
    if not ask(question):
        raise NotApproved(
            f"{flag} {run_dir}: not approved, nothing ran",
            fix="check the record, or start a new sweep with the program you mean",
        )
    remember(store, digest, run_dir)


def _prompt(question: str) -> bool:
    import typer

    from dtrun.cli.common import console

    shown_lines, _, prompt = question.rpartition("\n")
    console(stderr=True).print(shown_lines, soft_wrap=True)  # text: no markup read
    return typer.confirm(prompt, default=False, err=True)
