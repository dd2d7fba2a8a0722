"""`dtrun up`, `down`, `outputs`, `extend` and `sizes`: the Azure cluster of a Pulumi stack."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dtrun.cli import options as opts
from dtrun.cli.common import console, echo, user_errors
from dtrun.cli.tables import Column, Grid, print_grid
from dtrun.spec.text import one_line

if TYPE_CHECKING:
    from dtrun.spec.cluster import ClusterSpec

app = typer.Typer()

StackName = Annotated[
    str, typer.Option("--stack", "-s", help="Pulumi stack; Pulumi.<stack>.yaml holds its settings.")
]


def _echo_raw(line: str) -> None:
    echo(line.rstrip("\n"))


def expiry_line(stack: str | None, values: dict[str, object]) -> str:
    """When and how the stack removes itself, from its outputs (docs/azure.md "Expiry")."""
    import datetime

    from dtrun.azure.expiry import ExpiryError, describe, expiry_fields

    expires_at, idle, action = expiry_fields(values)
    try:
        return describe(stack, expires_at, idle, action, datetime.datetime.now(datetime.UTC))
    except ExpiryError as error:  # an output no program of dtrun's wrote: said, not raised
        return one_line(f"expiry unknown: the stack output {error.what}")


def _before_up(spec: ClusterSpec) -> None:
    from dtrun.cli.cost import stack_hourly

    echo(stack_hourly(spec))
    _warn_without_deadline(spec)


def _warn_without_deadline(spec: ClusterSpec) -> None:
    if not spec.expiry.ttl_hours:
        console(stderr=True).print(
            "dtrun: warning: dtrun:ttlHours is 0, so this cluster has no deadline"
            + (
                f"; it removes itself only after {spec.expiry.idle_minutes} idle minutes"
                if spec.expiry.idle_minutes
                else " and no idle rule: it bills until `dtrun down`"
            ),
            highlight=False,
        )


@app.command()
def up(stack: StackName) -> None:
    """Create or update a stack's Azure cluster (pulumi up) and print its outputs.

    Its deadline moves to dtrun:ttlHours from now."""
    from dtrun.azure.stack import check_stack_name
    from dtrun.azure.stack import up as stack_up
    from dtrun.cli.cost import after_expiry

    checked: list[ClusterSpec] = []

    def before_up(spec: ClusterSpec) -> None:
        checked.append(spec)
        _before_up(spec)

    with user_errors():
        name = check_stack_name(stack)
        # said before Pulumi creates anything: what the cluster will bill an hour, and a
        # warning when it has no deadline
        result = stack_up(name, _echo_raw, before_up)
    _print_outputs(result.shown())
    echo(expiry_line(name, result.values))
    left = after_expiry(checked[0], name) if checked else None
    if left:
        echo(left)
    echo(
        f"the cluster bills while it runs: `dtrun down --stack {name}` removes all of it; "
        f"`dtrun outputs --stack {name} --save cluster.json` keeps its outputs"
    )


@app.command()
def extend(
    stack: StackName,
    hours: Annotated[
        float, typer.Option(help="The new deadline, in hours from now (it can also come sooner).")
    ],
) -> None:
    """Move a stack's deadline to N hours from now.

    The deadline is a tag on the resource group, which the head's expiry timer reads every
    minute."""
    from dtrun.azure.stack import check_stack_name
    from dtrun.azure.stack import extend as stack_extend

    with user_errors():
        name = check_stack_name(stack)
        result = stack_extend(name, hours, _echo_raw)
    echo(expiry_line(name, result.values))


@app.command()
def down(stack: StackName) -> None:
    """Destroy every resource of a stack (pulumi destroy); safe to run again."""
    with user_errors():
        destroy_and_say(stack)


def destroy_and_say(stack: str) -> None:
    """Destroy the stack and say what went (or that nothing was there)."""
    from dtrun.azure.stack import check_stack_name
    from dtrun.azure.stack import down as stack_down

    name = check_stack_name(stack)
    destroyed = stack_down(name, _echo_raw)
    if not destroyed:
        echo(f"nothing to destroy: stack {name} holds no resources")
        return
    echo(f"destroyed {len(destroyed)} resources of stack {name}; nothing of it bills now:")
    for line in destroyed:
        echo(f"  {one_line(line)}")


@app.command()
def outputs(
    stack: StackName,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (secrets masked).")] = False,
    save: Annotated[
        Path | None,
        typer.Option(help="Write the outputs, secrets included, to this file (mode 0600)."),
    ] = None,
) -> None:
    """Print a stack's outputs (the versioned contract dtrun reads); secrets are masked."""
    import json

    from dtrun.azure.stack import check_stack_name
    from dtrun.azure.stack import outputs as stack_outputs

    with user_errors():
        result = stack_outputs(check_stack_name(stack))
        if save is not None:
            _save_private(save, json.dumps(result.values, indent=2) + "\n")
    if as_json:
        echo(json.dumps(result.shown(), indent=2))
    else:
        _print_outputs(result.shown())
        echo(expiry_line(stack, result.values))
    if save is not None:
        echo(f"saved to {save} (mode 0600: it holds the cluster's private key)")


def _save_private(path: Path, text: str) -> None:
    """``text`` at ``path``, mode 0600 from its first byte, whole or not at all: a write that
    fails (a full disk) leaves the file saved before, where it was removed first."""
    from dtrun.errors import OutputDirError
    from dtrun.workloads.files import write_atomic

    try:
        write_atomic(path, text.encode(), mode=0o600)
    except OSError as exc:
        raise OutputDirError(
            f"cannot write {path}",
            why=exc.strerror or str(exc),
            fix="pass --save with a writable path",
        ) from None


def _print_outputs(values: dict[str, object]) -> None:
    width = max((len(key) for key in values), default=0)
    for key, value in values.items():
        echo(one_line(f"{key:<{width}}  {value}"))


@app.command()
def sizes(wide: opts.Wide = False) -> None:
    """List the InfiniBand VM sizes dtrun knows: GPUs, InfiniBand, image, expected busbw."""
    from dtrun.azure.catalog import SIZES, known_sizes, retirement_warning

    # the size's name whole at any width; the image goes first, then the note, InfiniBand
    columns = (Column("size", 10, "left"), Column("GPUs", 8, "left", wrap=True),
               Column("InfiniBand", 6, "left"), Column("image", 3, "left"),
               Column("busbw 1 VM", 7), Column("note", 5, "left", wrap=True))  # fmt: skip
    usable = set(known_sizes())
    rows = []
    for size in SIZES.values():
        gpus = f"{size.gpu_count}x {size.gpu.model}" if size.gpu else "-"
        ib = f"{size.ib_ports}x {size.ib_name} {size.ib_gbps} Gb/s"
        busbw = f"{size.busbw_single_node_gbs:g} GB/s" if size.busbw_single_node_gbs else "-"
        note = (
            retirement_warning(size) or ""
            if size.name in usable
            else f"not usable: retired {size.retired_on}"
        )
        rows.append((size.name, gpus, ib, size.image.sku, busbw, note))
    title = "InfiniBand sizes (docs/facts.md)"
    print_grid(console(), Grid(columns, rows, title, hint="--wide shows every column"), wide=wide)
