"""The files a cluster choice names, read for the engines that need them: a hosts file (SSH)
and a stack's outputs (SSH and a stack's own Slurm), from a saved file or from Pulumi."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.cluster.outputs import StackOutputs, parse_outputs
from dtrun.errors import InventoryError

if TYPE_CHECKING:
    pass


# A hosts file of 10,000 nodes (--nodes' most) at 100 bytes a line is 1 MB; a stack's outputs
# are smaller. /dev/zero, or a 1 GB file given by mistake, was read whole: a MemoryError.
MAX_TEXT_BYTES = 16 * 1024 * 1024


def read_text(path: Path, what: str, fix: str = "") -> str:
    """A text file as editors write it: UTF-8, with or without a byte-order mark; a pipe too
    (--hosts <(...)), read no further than any such file goes. A named pipe is opened without
    waiting for a writer: with none, open() waited for good, and dtrun said nothing."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(descriptor, True)  # a writer there: wait for its lines and its end
        with os.fdopen(descriptor, "rb") as file:
            data = file.read(MAX_TEXT_BYTES + 1)
            unwritten = not data and stat.S_ISFIFO(os.fstat(file.fileno()).st_mode)
    except OSError as exc:
        raise InventoryError(
            f"cannot read the {what} {path}",
            why=exc.strerror or str(exc),
            fix=fix or f"pass an existing, readable file to --{what.split()[0]}",
        ) from None
    if unwritten:
        raise InventoryError(
            f"cannot read the {what} {path}",
            why="it is a pipe (FIFO) that nothing wrote to",
            fix=fix or f"pass the {what} itself to --{what.split()[0]}",
        )
    if len(data) > MAX_TEXT_BYTES:
        raise InventoryError(
            f"the {what} {path} is too large",
            why=f"it holds more than any {what} ({MAX_TEXT_BYTES:,} bytes)",
            fix=fix or f"pass the {what} itself to --{what.split()[0]}",
        )
    try:
        text = data.decode("utf-8-sig")  # a BOM (Windows editors) is not part of a host name
    except UnicodeDecodeError as exc:
        utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
        raise InventoryError(
            f"the {what} {path} is not UTF-8 text",
            why=f"byte {exc.start} is {data[exc.start : exc.start + 1]!r}"
            + (" (the file is UTF-16)" if utf16 else ""),
            fix="save it as UTF-8 text (`iconv -f UTF-16 -t UTF-8`)"
            + (", one host per line" if what == "hosts file" else ""),
        ) from None
    control = next((c for c in text if ord(c) < 32 and c not in "\t\n\r"), None)
    if control is not None:
        line = text.count("\n", 0, text.index(control)) + 1
        raise InventoryError(
            f"the {what} {path} is not a text file",
            why=f"line {line} holds the control character {control!r}",
            fix=f"pass the {what} itself (text: UTF-8, one host per line or YAML)",
        )
    return text


def stack_outputs(stack: str | None, outputs: Path | None) -> StackOutputs:
    """The outputs of --stack's stack, or those --outputs holds."""
    if outputs is not None:
        from dtrun.record.readback import NotReadable, parse_json

        text = read_text(outputs, "outputs file")
        try:  # strictly: a 5,000-digit number was a ValueError json.loads never names
            data = parse_json(text)
        except NotReadable as exc:
            raise InventoryError(
                f"{outputs} is not JSON dtrun reads",
                why=str(exc) if text.strip() else "the file is empty",
                fix="save the outputs again with `dtrun outputs --stack NAME --save FILE`",
            ) from None
        return parse_outputs(data, str(outputs))
    from dtrun.azure.stack import check_stack_name
    from dtrun.azure.stack import outputs as read_outputs

    assert stack is not None  # only called for --stack or --outputs
    return parse_outputs(read_outputs(check_stack_name(stack)).values, stack)
