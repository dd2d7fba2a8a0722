"""What every dtrun command prints with: the console, user errors, node output lines."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer

from runner.errors import DtrunError

if TYPE_CHECKING:
    from rich.console import Console


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Print dtrun's own errors as one message and exit with their code; bugs keep tracebacks."""
    try:
        yield
    except DtrunError as exc:
        from rich.markup import escape

        console(stderr=True).print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        # Ctrl-C outside a launch (connecting, waiting for nodes): what was started is stopped.
        console(stderr=True).print("[bold red]error:[/] interrupted", soft_wrap=True)
        raise typer.Exit(130) from None


NODE_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


def print_node_line(console: Console, node: str, line: str) -> None:
    """One line of a node's output, prefixed [node-i] in that node's colour."""
    from rich.text import Text

    index = int(node.rsplit("-", 1)[-1]) if node[-1:].isdigit() else 0
    style = NODE_STYLES[index % len(NODE_STYLES)]
    console.print(Text.assemble((f"[{node}] ", style), line), soft_wrap=True)
