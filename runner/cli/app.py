"""The `dtrun` command: one root Typer that merges each command group's own Typer."""

from __future__ import annotations

import contextlib
import copy
import gc
import re
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from dtrun import __version__
from dtrun.cli import bench, check, predict, results, run, stack


class _Group(TyperGroup):
    """The root command: a usage error's message (click quotes the value it refused, a URL with
    its password included) redacted as all dtrun prints is; typer prints it past dtrun's
    consoles, in a panel that would cut a value across lines."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        for command in self.commands.values():
            _plain_numbers(command)
        with _redacted_usage_error():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _redacted_usage_error():
            return super().invoke(ctx)


@contextlib.contextmanager
def _redacted_usage_error() -> Iterator[None]:
    try:
        yield
    except typer.TyperException as exc:  # click's ClickException, as typer carries it
        message = getattr(exc, "message", None)
        if isinstance(message, str):
            from dtrun.redact import redact_text

            exc.message = _LONG.sub(_cut, redact_text(message))
        raise


# click's int and float options convert with int() and float(), which also take 1_0, ' 5' and
# other scripts' digits: every number option takes plain ASCII digits, as prices do
# (parse_amount); nan and inf pass, for each option's own range check to name its range
_PLAIN = {
    "int": (re.compile(r"[+-]?[0-9]+"), "a whole number"),
    "float": (
        re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?i:inf|nan)"),
        "a number",
    ),
}


def _plain_numbers(command: Any) -> None:
    """Every int and float option of ``command`` (a click command) refuses other digits."""
    for param in command.params:
        kind = param.type
        if kind.name not in _PLAIN or getattr(kind, "plain", False):
            continue
        pattern, shape = _PLAIN[kind.name]
        plain = copy.copy(kind)  # typer's click types are shared between options

        def convert(
            value: Any,
            param: Any,
            ctx: Any,
            *,
            plain: Any = plain,
            inner: Any = kind.convert,
            pattern: re.Pattern[str] = pattern,
            shape: str = shape,
        ) -> Any:
            if isinstance(value, str) and pattern.fullmatch(value) is None:
                shown = value if len(value) <= 40 else f"{value[:40]}..."
                plain.fail(
                    f"{shown!r} is not {shape}: write it in ASCII digits, e.g. 10", param, ctx
                )
            return inner(value, param, ctx)

        plain.convert, plain.plain = convert, True
        param.type = plain


# click quotes a refused value whole: a 5,000-digit --steps (past int()'s 4,300-digit limit,
# so click itself refuses it) filled 70 lines of the error panel
_LONG = re.compile(r"[^\s']{201,}")  # a path or a URL under 200 characters stays whole


def _cut(long: re.Match[str]) -> str:
    return f"{long[0][:60]}... ({len(long[0]):,} characters)"


app = typer.Typer(
    cls=_Group,
    name="dtrun",
    help="Measure whether distributed training really scales: plan, launch, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold secrets
)
app.add_typer(bench.app)  # bench
app.add_typer(run.app)  # run, exec
app.add_typer(check.app)  # check
app.add_typer(results.app)  # report, compare
app.add_typer(predict.app)  # predict
app.add_typer(stack.app)  # up, down, outputs, sizes


def _paragraphs(doc: str) -> str:
    """A docstring as --help should show it: each prose paragraph one line, which rich then
    wraps at the terminal's width (typer keeps the docstring's own line breaks, and breaks a
    sentence mid-way on a narrower terminal); a paragraph of commands (``dtrun ...``) keeps
    its lines."""
    import inspect

    out = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines = paragraph.splitlines()
        if any(line.startswith(("dtrun ", " ")) for line in lines):
            out.append("\n".join(lines))
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


for _group in app.registered_groups:
    assert _group.typer_instance is not None
    for _command in _group.typer_instance.registered_commands:
        if _command.callback is not None and _command.callback.__doc__:
            _command.help = _paragraphs(_command.callback.__doc__)


def _version(value: bool) -> None:
    if value:
        from dtrun.cli.common import user_errors, writing_stdout

        with user_errors(), writing_stdout():  # `dtrun --version > /dev/full`: one message
            typer.echo(f"dtrun {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Measure whether distributed training really scales: plan, launch, report."""
    from dtrun.cli.common import machine_secrets, typed_command
    from dtrun.redact import remember_secrets, secrets_in

    # whatever the command prints; and the URL credentials and tokens of its own arguments as
    # values: a path made of one (--hosts ssh://u:pw@h, read as ssh:/u:pw@h) has no URL's shape
    typed = [secret for word in typed_command() for secret in secrets_in(word)]
    remember_secrets([*machine_secrets(), *typed])


def _stop_like_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM, SIGHUP and SIGQUIT (timeout, CI cancels, a closed terminal, systemd, Ctrl-\\)
    stop dtrun the way Ctrl-C does: one path stops every process dtrun started and records the
    run as stopped."""
    from dtrun.errors import stopped_by

    stopped_by(signum)
    signal.raise_signal(signal.SIGINT)


def _stop_on_signals() -> None:
    # A signal the parent chose to ignore stays ignored (`nohup` ignores SIGHUP). SIGINT ignored
    # by a non-interactive shell's `&` is restored, since SIGTERM and SIGHUP are delivered as it.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, _stop_like_ctrl_c)


def _exit_stands() -> None:
    """dtrun's exit is decided (its code, its last message): a stop signal from here on, or
    one still pending, changes nothing. Handled, it would raise KeyboardInterrupt in place of
    the exit (a traceback, then death by SIGINT); once the ending interpreter has dropped
    Python's handlers, the signal's default action would kill dtrun (-2, -15) after its error
    said 143. An ignored signal stays ignored to the process's end; Ctrl-\\ (SIGQUIT) still
    kills an exit that hangs."""
    for signum, action in (
        (signal.SIGINT, signal.SIG_IGN),
        (signal.SIGTERM, signal.SIG_IGN),
        (signal.SIGHUP, signal.SIG_IGN),
        (signal.SIGQUIT, signal.SIG_DFL),
    ):
        while True:
            try:
                signal.signal(signum, action)
                break
            except KeyboardInterrupt:  # a pending stop, run as signal.signal looks first
                continue


def _print_bug(exc: BaseException, heading: str = "") -> None:
    """A bug's traceback, as Python prints one, with every secret this process knows masked:
    its message or a line of its source may quote one (docs/security.md). Typer's own printer
    (and threading's) would show it whole."""
    import traceback

    from dtrun.redact import redact_text

    sys.stderr.write(redact_text(heading + "".join(traceback.format_exception(exc))))
    sys.stderr.flush()


def _print_thread_bug(args: threading.ExceptHookArgs) -> None:
    """threading.excepthook: a bug in one of dtrun's threads (an output pump), masked too."""
    if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
        name = args.thread.name if args.thread is not None else "?"
        _print_bug(args.exc_value, f"Exception in thread {name}:\n")


def main() -> None:
    _stop_on_signals()
    threading.excepthook = _print_thread_bug
    try:
        app()
    except KeyboardInterrupt:
        # a stop while click ended dtrun (dtrun's own stops end in user_errors, click's own
        # Ctrl-C in "Aborted!"): the exit was decided and said; the stop is its code, no
        # traceback, no death by SIGINT as Python ends a program a KeyboardInterrupt ended
        from dtrun.errors import interrupted_exit_code

        sys.exit(interrupted_exit_code())
    except Exception as exc:  # not dtrun's own errors (user_errors): a bug, traceback and exit 1
        _print_bug(exc)
        sys.exit(1)
    finally:
        _exit_stands()
        # Nothing is collected after this point: move every object out of the collector's
        # reach, so interpreter shutdown does not walk matplotlib's and torch's object graphs
        # (a tenth of a second, every run).
        gc.freeze()


if __name__ == "__main__":
    main()
