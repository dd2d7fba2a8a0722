"""What every dtrun command prints with: the console, user errors, node output lines."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import typer

from dtrun.cli.echoing import Echo
from dtrun.errors import DtrunError, interrupted_exit_code, interruption
from dtrun.redact import (
    pem_line,
    process_redactor,
    redact_data,
    redact_text,
    secrets_in_environment,
)

if TYPE_CHECKING:
    from rich.console import Console

    from dtrun.spec.request import LaunchRequest


_HUMAN_TO_STDERR = False  # --json: stdout carries the JSON alone


def stdout_lost(why: str) -> DtrunError:
    """stdout takes no more output (`> /dev/full`, `>&-`): one message on stderr, not a bug's
    traceback; what was printed before stays."""
    return DtrunError(
        "cannot write the output to stdout",
        why=why,
        fix="free space where stdout goes, or send it elsewhere (> FILE)",
    )


@contextlib.contextmanager
def writing_stdout() -> Iterator[None]:
    """Writes to stdout: one that fails is stdout_lost."""
    if sys.stdout is None:  # `dtrun report runs/x >&-`
        raise stdout_lost("it is closed")
    try:
        yield
    except BrokenPipeError:  # `| head`: click ends quietly, as other tools do
        raise
    except OSError as exc:
        raise stdout_lost(exc.strerror or str(exc)) from None


class RedactedStream:
    """stdout or stderr as a console writes to it, every write redacted on the way out
    (runner/redact/): what dtrun prints holds no secret it was given, whichever message,
    table or plan repeats it. The stream is looked up at each write, as print() does."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr

    def _stream(self) -> IO[str]:
        stream = sys.stderr if self._stderr else sys.stdout
        # A live progress display swaps in a proxy that prints through the console again.
        return getattr(stream, "rich_proxied_file", stream)

    def write(self, text: str) -> int:
        with contextlib.nullcontext() if self._stderr else writing_stdout():
            return self._stream().write(redact_text(text))

    def flush(self) -> None:
        with contextlib.nullcontext() if self._stderr else writing_stdout():
            self._stream().flush()

    def isatty(self) -> bool:
        stream = self._stream()
        return stream is not None and stream.isatty()  # None: stdout closed (`>&-`)

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream(), "encoding", None) or "utf-8"


def command_secrets(spec: LaunchRequest) -> list[str]:
    """Every value a launch command must not print, record or upload: the spec's secrets, and
    this machine's, whatever way a program or a record comes to show them."""
    return [*spec.secrets(), *machine_secrets()]


def machine_secrets() -> tuple[str, ...]:
    """This machine's secrets (runner/redact/ ``secrets_in_environment``: a secret-named
    variable's value, URL credentials and tokens): every command hides them, from a node's
    output (`dtrun exec`) to Pulumi's (`dtrun up`)."""
    return secrets_in_environment(os.environ, _names_a_file)


def _names_a_file(value: str) -> bool:
    """A value that is the path of a file or directory here (not a secret: the file may be)."""
    try:
        return value.startswith("/") and os.path.lexists(value)
    except (OSError, ValueError):  # too long a name, a NUL in it
        return False


def typed_command() -> tuple[str, ...]:
    """dtrun's arguments as the user typed them (after the program name): manifest.json
    records them, secrets hidden (runner/record/manifest.py command_line)."""
    return tuple(sys.argv[1:])


def console(stderr: bool = False) -> Console:
    """A console that prints what it is given as text: no markup read, no control character
    passed to the terminal (runner/cli/inert.py), every secret redacted on the way out."""
    from dtrun.cli.inert import inert_console_class

    stream = RedactedStream(stderr or _HUMAN_TO_STDERR)
    return inert_console_class()(file=stream, highlight=False)  # type: ignore[arg-type]  # IO's write side


@contextlib.contextmanager
def human_output_to_stderr(enabled: bool) -> Iterator[None]:
    """With --json, every console (progress, node lines, tables) writes to stderr."""
    global _HUMAN_TO_STDERR
    previous, _HUMAN_TO_STDERR = _HUMAN_TO_STDERR, enabled or _HUMAN_TO_STDERR
    try:
        yield
    finally:
        _HUMAN_TO_STDERR = previous


def echo(text: str) -> None:
    """A plain line for people: stdout, or stderr under --json; its control characters but
    the line breaks and tabs written as escapes (runner/cli/inert.py)."""
    from dtrun.cli.inert import printable

    with contextlib.nullcontext() if _HUMAN_TO_STDERR else writing_stdout():
        typer.echo(printable(redact_text(text)), err=_HUMAN_TO_STDERR)


def print_json(data: object) -> None:
    """One JSON document on stdout, for scripts: strict JSON (RFC 8259), so a NaN or an
    infinity is a bug's ValueError, never `NaN` or `Infinity` printed for a parser to choke on."""
    import json

    plain = json.loads(json.dumps(data, default=str, allow_nan=False))
    with writing_stdout():
        sys.stdout.write(json.dumps(redact_data(plain), indent=2, allow_nan=False) + "\n")
        sys.stdout.flush()


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Print dtrun's own errors as one message and exit with their code; bugs keep tracebacks."""
    try:
        yield
    except DtrunError as exc:
        print_error(exc.message)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM, SIGHUP) outside a launch (connecting, waiting for nodes): what was
        # started is stopped.
        print_error(interruption())
        raise typer.Exit(interrupted_exit_code()) from None


# The most of one line of an error shown: a value quoted in a message (a setting, a host, a
# path) can be a file's whole megabyte; the line keeps its start and its end (what is wrong).
ERROR_LINE_MOST = 2_000


def _clipped(line: str) -> str:
    if len(line) <= ERROR_LINE_MOST:
        return line
    head, tail = line[: ERROR_LINE_MOST * 3 // 4], line[-ERROR_LINE_MOST // 4 :]
    return f"{head} ... ({len(line) - len(head) - len(tail):,} characters not shown) ... {tail}"


def print_error(message: str) -> None:
    """``error: MESSAGE`` on stderr, the label in bold red; a line of it over ERROR_LINE_MOST
    characters shows its start and its end."""
    from dtrun.cli.inert import styled

    message = redact_text(message)  # before its control characters become escapes; and cut
    message = "\n".join(_clipped(line) for line in message.split("\n"))  # after: no fragment
    # its lines are the error's own layout: runner/errors.py made each value in them one line
    console(stderr=True).print(
        styled(("error:", "bold red"), f" {message}", layout=True), soft_wrap=True
    )


NODE_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


# Once dtrun stops the nodes (Ctrl-C, SIGTERM, SIGHUP, a failed node), what they print while
# they go (torchrun's SignalException tracebacks, from 3 to about 40 lines) is their logs' only:
# the console keeps dtrun's own message (issue 27, "quiet stops").
_node_lines_muted: list[bool] = []


def mute_node_lines() -> None:
    """From now on, nodes' lines go to their logs, not to the console."""
    release_node_lines()
    _node_lines_muted.append(True)


_WRITING = threading.Lock()  # node lines written without rich (print_node_line)
_ECHO = Echo()  # the lines of a run's nodes, shown apart from the threads reading them
# A progress bar's states (a line ending "\r", runner/engines/common/scripts.py segments): one
# shown per node this often, and the bar's last state, which ends its line, always.
PROGRESS_EVERY_S = 10.0
_progress_shown: dict[str, float] = {}
_pem_prefixes: dict[str, str | None] = {}  # a node printing a private key line by line
# The longest line the console echoes, in characters. Redaction costs about 1 us a character:
# a 200 KB line a step held the echo 0.2 s a step, and, while the echo ran in the thread that
# reads the node's pipe, the program's 21 ms steps were timed at 235 ms unless --quiet (the echo
# has a thread of its own now: runner/cli/echoing.py). Its node log keeps it whole.
ECHO_LONGEST = 8192


def new_progress_clocks() -> None:
    """A launch begins: its bars' first states show at once, whenever the last launch's did."""
    _ECHO.drain()  # the last launch's lines first, on the last launch's clocks
    _progress_shown.clear()


def _progress(node: str, line: str) -> str | None:
    """What of ``line`` the console shows: a progress state where one is due (None where not),
    and of a line that holds several states (an engine that reads whole lines: Slurm's srun
    --label), the last, as a terminal would leave it."""
    if line.endswith("\r"):
        now, state = time.monotonic(), line.rstrip("\r")
        if (
            not state.strip()
            or now - _progress_shown.get(node, -PROGRESS_EVERY_S) < PROGRESS_EVERY_S
        ):
            return None
        _progress_shown[node] = now
        return state
    if "\r" in line:
        states = [state for state in line.split("\r") if state.strip()]
        return states[-1] if states else ""
    return line


def print_node_line(console: Console, node: str, line: str) -> None:
    """One line of a node's output, prefixed [node-i] in that node's colour (none once the
    nodes are being stopped: their logs keep every line).

    Where the console has no colours and no terminal (output piped to a file, `tee`, a CI
    log: a large cluster's usual place), the line is written as rich would write it, without
    rich laying it out: 191 us of dtrun's CPU a line went to 60 (docs/benchmarks.md, "dtrun's
    own cost by node count"), for programs that print from every rank."""
    if _node_lines_muted:
        return
    state = _progress(node, line)
    if state is None:
        return
    if len(state) > ECHO_LONGEST:  # nothing of it shown: no cut secret shows its start
        state = f"(a line of {len(state):,} characters, not shown: the node's log keeps it)"
    # what the program printed, less the secrets it was given (the node log keeps it whole)
    state, _pem_prefixes[node] = pem_line(state, _pem_prefixes.get(node))
    hide = process_redactor()
    with _HOLDING:
        held = _held.pop(node, None)
        if held is not None:  # its end may be a secret's start, that this line's start ends
            carry = held.carry + state.strip()
            if held.carry and state.strip() and hide.started(carry) == len(carry):
                # the whole line goes on with that start (a value cut in three): held too, after
                # the lines already shown (one character, or shown when due)
                said = held.line.count("\n") + 1 if held.shown else held.said
                due = time.monotonic() + HOLD_S if held.shown else held.due
                _held[node] = _Held(held.console, f"{held.line}\n{state}", due, False, carry, said)
                _start_releasing()
                return
            before, state = hide.seam(held.line, state)
            if not held.shown:
                _show_lines(held.console, node, before, held.said)
        started = hide.started(state)
        if started >= HOLD_FROM:
            carry = state.rstrip()[-started:]
            _held[node] = _Held(console, state, time.monotonic() + HOLD_S, carry=carry)
            _start_releasing()
        else:
            _show(console, node, state)
            if started:  # its one character shown; the rest on the next lines still masked
                _held[node] = _Held(console, state, 0.0, True, state.rstrip()[-started:])


# A node's line whose end may be the start of a secret value (docs/security.md): held until the
# node's next line shows whether that starts with the rest, to mask both parts, for at most
# HOLD_S (a program writes a wrapped line's pieces at once), or until the command ends. From
# HOLD_FROM characters: a digit from 3 to 7 starts the hexadecimal of most values, so one
# character would hold 73% of a training log's lines (20 values), two 13%.
HOLD_S = 0.25
HOLD_FROM = 2


@dataclasses.dataclass(frozen=True)
class _Held:
    console: Console
    line: str
    due: float
    shown: bool = False  # shown when due: the next line's part is still masked
    carry: str = ""  # the start of a value its lines end with
    said: int = 0  # its first lines, shown already


_held: dict[str, _Held] = {}
_HOLDING = threading.Condition()
_releasing: list[threading.Thread] = []


def _release(until: float | None) -> None:
    for node, held in list(_held.items()):
        if not held.shown and (until is None or held.due <= until):
            _held[node] = dataclasses.replace(held, shown=True)  # once, whatever the writing
            _show_lines(held.console, node, held.line, held.said)


def _start_releasing() -> None:
    """Each held line shown when due, by one thread for the process."""

    def release() -> None:
        with _HOLDING:
            while True:
                with contextlib.suppress(DtrunError, OSError):  # stdout gone: said by the command
                    _release(time.monotonic())
                due = [held.due for held in _held.values() if not held.shown]
                _HOLDING.wait(max(0.0, min(due) - time.monotonic()) if due else None)

    if not _releasing:
        _releasing.append(threading.Thread(target=release, name="node lines", daemon=True))
        _releasing[0].start()
    _HOLDING.notify()


def queue_node_line(console: Console, node: str, line: str) -> None:
    """``print_node_line``, by the echo's own thread: the thread that reads the node's pipe
    never waits on the console (runner/cli/echoing.py)."""
    _ECHO.put(functools.partial(print_node_line, console), node, line)


def node_lines_shown() -> None:
    """Wait until the console has shown the node lines handed to it (a launch ends)."""
    _ECHO.drain()


def release_node_lines() -> None:
    """Show every node line waiting or held now: the command ends, or the nodes are being
    stopped."""
    _ECHO.drain()
    with _HOLDING:
        _release(None)
        _held.clear()


def _show_lines(console: Console, node: str, lines: str, said: int = 0) -> None:
    for line in lines.split("\n")[said:]:  # held lines, each read as the node's one line
        _show(console, node, line)


def _show(console: Console, node: str, state: str) -> None:
    from dtrun.cli.inert import printable, styled

    shown = redact_text(state)
    if console.color_system is None and not console.is_terminal and not console.record:
        # soft-wrapped, unstyled: rich writes "[node] LINE" and a line break, tabs expanded
        text = printable(f"[{node}] {shown}")
        with _WRITING:  # whole lines, whichever thread reads a node's output
            console.file.write((text.expandtabs(console.tab_size) if "\t" in text else text) + "\n")
        return
    # the node's number (node-3, gpu017 from Slurm), else the same colour for the same name
    number = re.search(r"(\d+)$", node)
    index = int(number.group(1)) if number else sum(node.encode())
    style = NODE_STYLES[index % len(NODE_STYLES)]
    # one line of output (read line by line; a \r is escaped), its tabs kept as a terminal shows
    console.print(styled((f"[{node}] ", style), shown, layout=True), soft_wrap=True)
