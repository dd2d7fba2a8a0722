"""What a node runs over SSH: dtrun's code shipped to it, its launch directory, the launch
command line with its guard, and how its output is followed."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.engines.common.scripts import LINE_END, LINE_END_LONGEST
from dtrun.execute.guard import TAG, TAGGED, WAIT_FOR_END, reaper_on_node, stop_script
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import staged_path

if TYPE_CHECKING:
    import asyncssh


def remote_launch_dir(inventory: Inventory, workdir: Path) -> str:
    """runs/<id>/n<N>/r<k> here -> <shared>/.dtrun/runs/<id>/n<N>/r<k> (or <workdir>/runs/...);
    a probe's in its run's folder too (staged_path)."""
    ssh = inventory.ssh
    base = (
        f"{inventory.shared_dir}/.dtrun" if inventory.shared_dir else (ssh.workdir if ssh else "")
    )
    return f"{base}/runs/{staged_path(workdir)}"


DRAIN_S = 2.0  # how long output may trail a script's exit (a background child may hold it open)


def swept_marker(tag: str) -> str:
    """The line's start by which a node's wrapper says it stopped what its script left, and
    what is left (normally nothing): the launch's tag in it, so no program's output is taken
    for it."""
    return f"dtrun-swept-{tag}:"


def launch_command(
    remote_dir: str, script: str, tag: str, grace_s: float, python: str = "", package: str = ""
) -> str:
    """What the node's login shell runs for one launch: the script, with the guard that stops
    the launch there if dtrun's connection closes first, and the stop of what the script left
    once it ends, whose last line starts with ``swept_marker(tag)``
    (templates/remote/launch.sh.j2). ``tag``: this node's own, so that its stop leaves
    another node's processes on the same machine alone. ``python`` and ``package`` (dtrun's
    code as shipped to the node): the script runs under the reaper (runner/execute/reaper.py)
    where the node has both, which stops what the script left without the tag.

    The wrapper is a POSIX sh script; the login shell is whatever the node's account has (bash,
    dash, zsh, ksh, tcsh, fish: tests/e2e/test_login_shells.py). It gets one line they all read
    alike, with no character any of them treats specially: sh runs the wrapper, carried in
    base64."""
    from dtrun.render import render  # jinja2: only for launches, not for `dtrun exec`

    wrapper = render(
        "remote/launch.sh.j2",
        {"dir": remote_dir, "script": script, "tag_name": TAG, "tag": tag,
         "stop": stop_script(tag, grace_s), "wait_for_end": WAIT_FOR_END,
         "marker": swept_marker(tag), **reaper_on_node(python, package, grace_s)},
    )  # fmt: skip
    carried = base64.b64encode(wrapper.encode()).decode()
    return f"exec sh -c 'eval \"$(printf %s {carried} | base64 -d)\"'"


# What `dtrun exec` and dtrun's own short commands run on a node (SshExecutor.command): the
# script comes on standard input up to its end line (end_of_script), and the input then stays
# open and is never written; the script runs with bash in a process group of its own, and a
# guard reads the rest of the input. Its end of file means sshd closed the session with the
# script still running (dtrun stopped by a signal, or SIGKILLed): the guard then stops the
# group, SIGTERM and SIGKILL after 5 s, as the embedded engine does (runner/engines/common/
# scripts.py). A script whose end never came (dtrun gone while sending it) does not run; the
# end line carries a random token (the wrapper's $1), so no line of a script ends it.
# The script carries TAG=exec-TOKEN, and the guard stops what carries it too: a daemon the
# command left in a session of its own (`setsid sleep &`) is out of its group (as in
# templates/remote/stop.sh.j2). `kill -s`: POSIX (dash refuses `kill -TERM -- -G`).
_COMMAND = f"""s= ended=
while IFS= read -r l; do
  if [ "$l" = "DTRUN_END_OF_SCRIPT_$1" ]; then ended=1; break; fi
  s="$s$l
"
done
[ -n "$ended" ] || exit 255
exec 3<&0
printf '%s' "$s" | {TAG}="exec-$1" setsid --wait bash -s 3<&- &
run=$!
stop='t="{TAG}=exec-$1"; {WAIT_FOR_END}; kill -s TERM -- "-$0" $({TAGGED}); sleep 5
kill -s KILL -- "-$0" $({TAGGED})'
sh -c "$stop" "$run" "$1" <&3 >/dev/null 2>&1 3<&- &
guard=$!
exec 3<&-
wait "$run"
status=$?
kill "$guard" 2>/dev/null
"""
# A held command (SshExecutor.command with hold): once the script has ended and its guard is
# gone (so nothing else reads the input), the node says so and the script's exit code on one
# line, and waits for dtrun's next line. STAGE makes the session the launch's staging `sh -s`
# (transfer.py, exec_put): the program check and the staging share one session a node, one
# channel fewer to open (issue 41). The end of the input, or any other line, ends it.
_HELD = (
    _COMMAND
    + 'wait "$guard" 2>/dev/null\n'
    + 'printf \'%s %s\\n\' "DTRUN_HELD_$1" "$status"\n'
    + 'IFS= read -r next || exit "$status"\n'
    + '[ "$next" = stage ] && exec sh -s\n'
    + 'exit "$status"\n'
)
STAGE = "stage\n"
_CARRIED = base64.b64encode((_COMMAND + 'exit "$status"\n').encode()).decode()
_CARRIED_HELD = base64.b64encode(_HELD.encode()).decode()


def command_line(token: str, *, hold: bool = False) -> str:
    """The login shell's line for one short command (any shell reads it alike, as
    launch_command's); ``token``: hex, the end line's (``end_of_script``); ``hold``: the
    session waits for STAGE once the script has ended (held_marker says when)."""
    carried = _CARRIED_HELD if hold else _CARRIED
    return f"exec sh -c 'eval \"$(printf %s {carried} | base64 -d)\"' dtrun-command {token}"


def end_of_script(token: str) -> str:
    return f"DTRUN_END_OF_SCRIPT_{token}"


def held_marker(token: str) -> str:
    """What a held command prints, before its exit code, once its script has ended."""
    return f"DTRUN_HELD_{token} "


async def run_command(
    connection: asyncssh.SSHClientConnection,
    script: str,
    sink: Callable[[str], None],
    *,
    hold: bool = False,
) -> tuple[asyncssh.SSHClientProcess[str], int | None]:
    """Run a short bash script on the node (the protocol above), its output to ``sink``; the
    session and the script's exit code. Held: the session stays open for STAGE where the
    node said the script ended; else it has closed.

    Its stderr comes with its output, held or not: asyncssh stops reading the whole channel
    while it holds a receive window's worth (2 MiB) unread, so a login script's 3 MB on a
    stderr read by no one kept the held marker from coming, and dtrun waited for ever."""
    import asyncssh

    token = secrets.token_hex(8)
    # the script, then its end; the input stays open: its end of file (dtrun gone) stops the
    # script there
    process = await connection.create_process(
        command_line(token, hold=hold), stderr=asyncssh.STDOUT
    )
    process.stdin.write(f"{script.rstrip(chr(10))}\n{end_of_script(token)}\n")
    if not hold:
        await stream(process, sink)
        return process, process.exit_status
    marker = held_marker(token)
    while True:
        try:
            segment = await process.stdout.readuntil(LINE_END, LINE_END_LONGEST)
        except asyncio.IncompleteReadError as end:
            # a piece as long as the receive window with no line end yet (passed on, and the
            # reading goes on, as stream's), or the output's end: the session ended without
            # the marker
            if end.partial:
                sink(str(end.partial))
                continue
            await process.wait_closed()
            return process, process.exit_status
        said = segment.find(marker)
        if said < 0:
            sink(segment)
            continue
        if said:
            sink(segment[:said])
        words = segment[said + len(marker) :].split()
        return process, int(words[0]) if words and words[0].isdigit() else None


def _exited(process: asyncssh.SSHClientProcess[str]) -> asyncio.Event:
    """Set once the node's command has exited: asyncssh calls its session's
    exit_status_received or exit_signal_received (SSHClientSession's callbacks; the process is
    the session) as the status arrives. Hooked on the process, so nothing looks for it."""
    exited = asyncio.Event()
    for name in ("exit_status_received", "exit_signal_received"):
        received = getattr(process, name)

        def hook(*args: object, received: Callable[..., None] = received) -> None:
            exited.set()
            received(*args)

        setattr(process, name, hook)
    if process.exit_status is not None or process.exit_signal is not None:
        exited.set()  # arrived before the hook
    return exited


async def stream(process: asyncssh.SSHClientProcess[str], sink: Callable[[str], None]) -> None:
    """Pass every line to ``sink``, with its line end, until the output ends, or shortly after
    the script exited. A progress bar's state (after a lone "\r") is a line too
    (runner/engines/common/scripts.py segments).

    OpenSSH reports the exit status when the script exits, even while a process it left in
    the background keeps the output open; such a process is stopped with the launch. Nothing
    polls: a node costs no wakeup between its lines, however long it runs (a look every
    second was 256 x 3,600 wakeups in an hour's launch on 256 nodes; issue 41).
    """

    async def read() -> None:
        while True:
            try:
                sink(await process.stdout.readuntil(LINE_END, LINE_END_LONGEST))
            except asyncio.IncompleteReadError as end:
                # the output's end (its last piece), or a piece as long as the receive window
                # (2 MiB) with no line end yet: passed on, and the reading goes on
                if not end.partial:
                    return
                sink(str(end.partial))

    exited = _exited(process)
    reader = asyncio.ensure_future(read())
    exit_seen = asyncio.ensure_future(exited.wait())
    try:
        await asyncio.wait({reader, exit_seen}, return_when=asyncio.FIRST_COMPLETED)
        if not reader.done():  # exited: what output trails the exit, for a while
            await asyncio.wait({reader}, timeout=DRAIN_S)
        if reader.done():
            reader.result()  # raise what reading raised (e.g. the connection was lost)
        if process.exit_status is None and process.exit_signal is None:
            # The output ended first; the exit status follows with the channel's close.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait_closed(), timeout=DRAIN_S)
    finally:
        reader.cancel()
        exit_seen.cancel()
