"""What every engine's executor shares: the launch files and node scripts written beside each
other, a node's output read line by line into its log, and short scripts run on every node at
once (``Executor.command``). Engines import it; it imports no engine."""

from __future__ import annotations

import collections
import contextlib
import io
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from dtrun.execute import LineSink, joined
from dtrun.execute.guard import TAG, TAGGED, drop_guard, start_guard, stop_script
from dtrun.spec.launchplan import LaunchPlan
from dtrun.workloads.files import NodeLog, write_atomic


def run_scripts(
    scripts: dict[str, str],
    start: Callable[[str], subprocess.Popen[bytes]],
    on_line: LineSink | None = None,
    tag: str = "",
) -> dict[str, tuple[list[str], int]]:
    """Each node's short script, all at once: ``start(node)`` starts a process that reads the
    script on its stdin (bash -s here, srun ... bash -s under Slurm). Every node's output lines,
    streamed to ``on_line`` as they come (the last ANSWER_MOST characters kept), and its exit
    code. ``tag``: the environment entry (NAME=VALUE) ``start`` gives the scripts; a stop
    stops what carries it too, a daemon the script left in a session of its own (`setsid
    sleep &`) included."""
    lines = {name: AnswerLines() for name in scripts}
    lock = threading.Lock()

    def collect(name: str, line: str) -> None:
        with lock:
            lines[name].add(line)
            if on_line is not None:
                on_line(name, line)

    processes = {name: start(name) for name in scripts}
    # Each script is a process group of its own (``start`` starts a new session): if dtrun is
    # SIGKILLed before they end, the guard stops every group (runner/execute/guard.py).
    groups = map(str, _groups(processes))
    guard = start_guard(["sh", "-c", _STOP_GROUPS, tag or _NO_TAG, *groups])
    readers = []
    stopped = True  # until every reader is done: an interrupt stops the scripts
    try:
        for name, process in processes.items():
            assert process.stdin is not None and process.stdout is not None
            with contextlib.suppress(BrokenPipeError):  # it may end without reading
                process.stdin.write(scripts[name].encode())
                process.stdin.close()
            reader = threading.Thread(
                target=pump, args=(process.stdout, io.BytesIO(), name, collect), daemon=True
            )
            reader.start()
            readers.append(reader)
        for reader in readers:
            joined(reader)  # a stop a reader thread takes is handled meanwhile
        stopped = False
    finally:
        drop_guard(guard)
        if stopped:  # Ctrl-C, SIGTERM or SIGHUP: every process a script started, not its bash
            _stop_groups(processes, tag)
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
    return {name: (list(lines[name].lines), process.wait()) for name, process in processes.items()}


# SIGTERM to every group and every process carrying the tag ($0), SIGKILL to what is left
# after the grace (arguments: the groups); as templates/remote/stop.sh.j2 finds the tagged
_GRACE_S = 5
_NO_TAG = "dtrun-stop"
_STOP_GROUPS = (
    f't=$0; tagged() {{ [ "$t" = {_NO_TAG} ] || {TAGGED}; }}; '
    'for g; do kill -s TERM -- "-$g" 2>/dev/null; done; kill -s TERM $(tagged) 2>/dev/null; '
    f"sleep {_GRACE_S}; "
    'for g; do kill -s KILL -- "-$g" 2>/dev/null; done; kill -s KILL $(tagged) 2>/dev/null'
)  # kill -s: POSIX; dash refuses `kill -TERM -- -G`


def _groups(processes: dict[str, subprocess.Popen[bytes]]) -> list[int]:
    """The process groups the scripts lead (those started in a session of their own)."""
    groups = []
    for process in processes.values():
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(process.pid) == process.pid:
                groups.append(process.pid)
    return groups


def _stop_groups(processes: dict[str, subprocess.Popen[bytes]], tag: str = "") -> None:
    """SIGTERM to each script's process group and what carries ``tag`` (TAG=VALUE; the
    launches' stop script, runner/execute/guard.py stop_script, beside it), SIGKILL after the
    grace to what is left."""
    sweep = None
    if tag:
        name, _, value = tag.partition("=")
        assert name == TAG, tag
        script = stop_script(value, _GRACE_S)
        sweep = subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL)
    groups = _groups(processes)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
    leaders = {process.pid: process for process in processes.values()}
    deadline = time.monotonic() + _GRACE_S
    for group in groups:
        # the leader reaped as it ends (a zombie would keep its group alive)
        while time.monotonic() < deadline and (leaders[group].poll(), _group_alive(group))[1]:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    if sweep is not None:
        sweep.wait()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_scripts(plan: LaunchPlan, workdir: Path) -> None:
    """Every node's script beside the launch files (mode 0700: they may hold --env values), for
    executors that start them from elsewhere (srun, a Spark task)."""
    for launch in plan.launches:
        write_atomic(workdir / launch.script_name, launch.script.encode(), 0o700)


def write_launch_files(plan: LaunchPlan, workdir: Path) -> None:
    """The plan's hostfile, configs and wrappers, beside the scripts (the nodes share it here)."""
    for file in plan.files:
        path = workdir / file.name
        path.parent.mkdir(parents=True, exist_ok=True)  # --platform-env sagemaker's per node
        write_atomic(path, file.content.encode(), file.mode)


# A line ends at "\n" (or "\r\n"). A progress bar redrawn in place (tqdm's, which the HF
# Trainer and Lightning draw by default) writes each state after a "\r" and no "\n" until it
# closes: each state is a line of its own too, passed on with its "\r", so that the console
# shows one every few seconds (runner/cli/common.py print_node_line) and --step-pattern sees
# each as it comes, not one line of every state at the bar's end.
READ = 65536  # bytes a read takes at most: what is there, without waiting for more
# A line longer than this is passed on in pieces of about this size: a program that writes
# without a line end (a binary blob, `yes | tr -d '\n'`) was held whole in dtrun's memory.
LONGEST_LINE = 1 << 20


def segments(stream: IO[bytes]) -> Iterator[bytes]:
    r"""``stream``'s bytes cut after each line end (``\n``, ``\r\n`` or a lone ``\r``), as they
    come, and within a line past LONGEST_LINE; a ``\r`` that ends a read waits for the next to
    say whether ``\n`` follows. Together they are the stream, byte for byte."""
    read = getattr(stream, "read1", stream.read)
    line: list[bytes] = []  # the current line's pieces: a line longer than a read is joined once
    held = 0  # their bytes
    carry = b""
    while chunk := read(READ):
        chunk, carry = carry + chunk, b""
        if chunk.endswith(b"\r"):
            chunk, carry = chunk[:-1], b"\r"
        # bytes.splitlines cuts at exactly these ends (ASCII "\n", "\r\n", "\r"), in C
        parts = chunk.splitlines(keepends=True)
        tail = parts.pop() if parts and not parts[-1].endswith((b"\n", b"\r")) else None
        for part in parts:
            if line:
                line.append(part)
                part, line, held = b"".join(line), [], 0
            yield part
        if tail is not None:
            line.append(tail)
            held += len(tail)
            if held >= LONGEST_LINE:
                yield b"".join(line)
                line, held = [], 0
    if line or carry:
        yield b"".join(line) + carry


# What readers that cut lines themselves (asyncssh's readuntil) cut at (``segments``): a "\r"
# only once what follows it has come and is not "\n", or a "\r\n" split between two packets
# would be a progress state and an empty line. LINE_END_LONGEST: how far back a reader looks.
LINE_END = re.compile(r"\r\n|\n|\r(?=[^\n])")
LINE_END_LONGEST = 2


def answer_line(line: str) -> str | None:
    r"""A line as a command's answer keeps it: a progress state without its "\r", and none
    for an empty state (the lone "\r" a tqdm bar starts with); a real empty line stays."""
    if line.endswith("\r"):
        return line.rstrip("\r") if line.strip() else None
    return line


# Of a short script's output, what its answer keeps: its last lines, this many characters in
# all. Its readers look for their markers at its end (cluster/readiness.py, peers.py,
# program.py); a node printing a gigabyte grew dtrun's memory by as much. Every line is shown
# as it comes all the same (on_line), and kept whole: at most LONGEST_LINE.
ANSWER_MOST = 4 * LONGEST_LINE


class AnswerLines:
    """A short script's answer lines as they come (``answer_line``), its last ANSWER_MOST
    characters only (one line at least)."""

    def __init__(self, most: int = ANSWER_MOST) -> None:
        self.most = most
        self.lines: collections.deque[str] = collections.deque()
        self.held = 0  # characters, a newline a line

    def add(self, line: str) -> None:
        kept = answer_line(line)
        if kept is None:
            return
        self.lines.append(kept)
        self.held += len(kept) + 1
        while self.held > self.most and len(self.lines) > 1:
            self.held -= len(self.lines.popleft()) + 1

    def text(self) -> str:
        return "\n".join(self.lines)


def line_text(segment: str) -> str:
    r"""A segment as its line's sinks get it: without its line end, but a progress state with
    its "\r" (``segments``)."""
    return segment if segment.endswith("\r") else segment.rstrip("\r\n")


def pump(stream: IO[bytes], log: NodeLog | io.BytesIO, name: str, on_line: LineSink) -> None:
    with stream, log:
        for raw in segments(stream):
            log.write(raw)  # a NodeLog on a full disk stops writing, and the reading goes on
            on_line(name, line_text(raw.decode(errors="replace")))
