"""What runs on each Ray node: one actor per node of a launch, in that node's bundle of the
launch's placement group, runs the node's rendered script and hands its output to dtrun.

The actor writes the launch's files in the launch directory (the same path as on dtrun's
machine; nothing is written where dtrun's own copy already stands), runs the script with bash
under the reaper (runner/execute/reaper.py: what the script leaves, tagged or not, is stopped
with it) in a process group of its own, and keeps its output until dtrun's next ``poll``.
``stop`` ends the group (SIGTERM, then SIGKILL after a grace). A guard (runner/execute/guard.py)
ends the group when the actor's process ends without doing so: Ray kills a job's actors when
its driver (dtrun) dies, or when a stop times out. The guard is no child of the Ray worker: a
worker that ends, or sees its raylet die, SIGKILLs its direct children (Ray's
``RAY_kill_child_processes_on_worker_exit``, on by default: docs/ray.md), the guard with them,
which left the script's own children running. That SIGKILL reaches the reaper too: what it
adopted then goes to init, and only the group's stop finds what kept the group.

Standard library, dtrun.execute.guard and the engines' line cutting (runner/engines/common/
scripts.py ``segments``) only: imported in the Ray workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dtrun.execute.guard import TAG, TAGGED, WAIT_FOR_END, reaper_command

GRACE_S = 5.0
# Run by the guard as `sh -c END_LAUNCH dtrun-node-stop PGID TAG=VALUE` once the actor's
# process ends: the script's group and every process carrying the launch's tag get SIGTERM,
# then SIGKILL after GRACE_S. The tag finds what the group does not: torchrun's workers (sessions
# of their own), which outlived a torchrun SIGKILLed before it had stopped them (CI: a rank
# left running, parent init, after its raylet was killed). One grep over every environment, as
# templates/remote/stop.sh.j2 does. The guard has a session of its own and no tag (the worker's
# environment). How a guard is started as no child of the Ray worker: this shell starts it in
# the background with the shell's stdin (the pipe only the worker writes) and exits, saying its
# pid.
DETACH = 'exec 3<&0; "$@" <&3 3<&- >/dev/null 2>&1 & echo "$!"'
END_LAUNCH = (
    f"g=$1 t=$2; tagged() {{ {TAGGED}; }}; "
    'hit() { kill "-$1" "-$g" 2>/dev/null; for p in $(tagged); do kill "-$1" "$p" 2>/dev/null; '
    "done; }; hit TERM; i=0; "
    f'while [ "$i" -lt {int(GRACE_S * 10)} ]; do '
    'if ! kill -0 "-$g" 2>/dev/null && [ -z "$(tagged)" ]; then exit 0; fi; '
    "sleep 0.1; i=$((i + 1)); done; hit KILL; exit 0"
)


def _reaper() -> list[str]:
    """What the script runs under: the reaper (runner/execute/reaper.py), which stops what it
    left, tagged or not, when it ends or a stop reaches the group. None where the worker holds
    dtrun in no folder (no file to run): the script runs bare, its group stopped as before."""
    package = Path(__file__).resolve().parents[2]
    if not (package / "execute" / "reaper.py").is_file():
        return []
    return reaper_command(sys.executable, str(package), GRACE_S)


class NodeProcess:
    """One node's script, run in the actor's process (module docstring)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.proc: subprocess.Popen[bytes] | None = None
        self.guard: Guard | None = None
        self.output: list[bytes] = []
        self.lock = threading.Lock()
        self.drained = threading.Condition(self.lock)  # the script's output reached its end
        self.eof = False
        self.pump: threading.Thread | None = None
        self.stopped = False

    def start(
        self, workdir: str, files: list[tuple[str, bytes, int]], script: str
    ) -> tuple[str, str]:
        """Write the launch's files where they are missing and start ``script`` (one of them)
        in ``workdir``; this node's address and host name."""
        where = Path(workdir)
        where.mkdir(parents=True, exist_ok=True)
        for name, content, mode in files:
            path = where / name
            if not path.is_file() or path.read_bytes() != content:  # another machine's copy
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
                partial.write_bytes(content)
                partial.chmod(mode)
                partial.replace(path)
        self.spawn([*_reaper(), "bash", script], where)
        import ray  # the worker's own: the node's address as Ray knows it

        address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return address, socket.gethostname()

    def spawn(self, argv: list[str], cwd: Path | None = None) -> None:
        """Start ``argv`` in a process group of its own, guarded, its output pumped."""
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            env={**os.environ, TAG: self.tag},
        )
        self.guard = Guard(["sh", "-c", END_LAUNCH, "dtrun-node-stop", str(self.proc.pid),
                            f"{TAG}={self.tag}"])  # fmt: skip
        self.pump = threading.Thread(target=self._pump, name="dtrun-ray-output", daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        r"""The script's output, cut as the other engines cut it (``segments``): a progress
        bar's states, each after a "\r", come as they are drawn, not as one line at its end."""
        from dtrun.engines.common.scripts import segments

        assert self.proc is not None and self.proc.stdout is not None
        for raw in segments(self.proc.stdout):
            with self.lock:
                self.output.append(raw)
        with self.lock:
            self.eof = True
            self.drained.notify_all()

    def poll(self, wait_s: float = 0.0) -> tuple[list[bytes], int | None]:
        """The output since the last poll, and the script's exit code once it has exited and
        every line of it was handed over (None while it runs). Waits up to ``wait_s`` first,
        less when the script ends: its end is told at once, not at the next poll."""
        assert self.proc is not None and self.pump is not None
        deadline = time.monotonic() + wait_s
        with self.lock:
            self.drained.wait_for(lambda: self.eof, timeout=wait_s)
        code = self._exit_code()
        while code is None and self.eof and time.monotonic() < deadline:
            time.sleep(0.01)  # its output closed a moment before it exits
            code = self._exit_code()
        if code is not None:
            self.pump.join(timeout=5)
        with self.lock:
            lines, self.output = self.output, []
        return lines, code

    def _exit_code(self) -> int | None:
        """The script's exit code once it has ended (None while it runs). Reaped here, not by
        Popen.poll: a script another process reaped (a Ray worker whose raylet died reaps its
        children) has no status left to read, and Popen reads that as exit 0, a success."""
        assert self.proc is not None
        if self.proc.returncode is None:
            try:
                pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
            except ChildProcessError:
                raise LostStatusError(
                    "the script's exit status was lost: another process reaped it (its Ray "
                    "worker's raylet is dead, or SIGCHLD is ignored there)"
                ) from None
            if pid == 0:
                return None
            self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.proc.returncode

    def _ended(self) -> bool:
        try:
            return self._exit_code() is not None
        except LostStatusError:
            return True

    def stop(self, grace_s: float = GRACE_S) -> tuple[list[bytes], int | None]:
        """End the script's group: SIGTERM, SIGKILL after ``grace_s``; its last output, and its
        exit code (None: the stop ended it)."""
        if self.proc is None:
            return [], None
        running = not self._ended()
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + wait
            # the script and all it left in its group: a signal sent is not a process gone
            while (not self._ended() or _group_alive(self.proc.pid)) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.05)
            if self._ended() and not _group_alive(self.proc.pid):
                break
        if self.guard is not None:
            self.guard.drop()
            self.guard = None
        try:
            lines, code = self.poll()
        except LostStatusError:  # its status is gone: what it said is not
            with self.lock:
                lines, self.output = self.output, []
            return lines, None
        return lines, None if running else code


class LostStatusError(RuntimeError):
    """The script ended and its exit status is gone: the task fails, and dtrun names the node."""


class Guard:
    """A guard (runner/execute/guard.py) that its starter does not count as a child (DETACH):
    it runs ``command`` once this process ends, unless dropped first."""

    def __init__(self, command: list[str]) -> None:
        start = subprocess.Popen(
            ["sh", "-c", DETACH, "dtrun-guard-start",
             "sh", "-c", WAIT_FOR_END + ' && exec "$@"', "dtrun-guard", *command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd="/", start_new_session=True,
        )  # fmt: skip
        assert start.stdin is not None and start.stdout is not None
        self.pid = int(start.stdout.read().strip())
        start.wait()
        self.pipe = start.stdin  # its end of file sets the guard off

    def drop(self) -> None:
        """The script was stopped or is over: the guard ends without running its command."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.pipe.close()


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs: a zombie does not count (it has ended; its
    new parent, often init, reaps it in its own time)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():  # no /proc to tell zombies by: the group is there
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()  # after "pid (comm)"
            if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
                return True
    return False
