"""What runs on each Ray node: one actor per node of a launch, in that node's bundle of the
launch's placement group, runs the node's rendered script and hands its output to dtrun.

The actor writes the launch's files in the launch directory (the same path as on dtrun's
machine; nothing is written where dtrun's own copy already stands), runs the script with bash
in a process group of its own, and keeps its output until dtrun's next ``poll``. ``stop`` ends
the group (SIGTERM, then SIGKILL after a grace). A guard (runner/execute/guard.py) ends the
group when the actor's process ends without doing so: Ray kills a job's actors when its driver
(dtrun) dies, or when a stop times out.

Standard library and dtrun.execute.guard only: imported in the Ray workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from dtrun.execute.guard import TAG, drop_guard, start_guard

GRACE_S = 5.0
# Run by the guard as `sh -c END_GROUP dtrun-node-stop PGID` once the actor's process ends: the
# script's group gets SIGTERM, then SIGKILL after GRACE_S. The guard has a session of its own.
END_GROUP = (
    'kill -TERM "-$1" 2>/dev/null || exit 0; i=0; '
    f'while [ "$i" -lt {int(GRACE_S * 10)} ]; do kill -0 "-$1" 2>/dev/null || exit 0; '
    'sleep 0.1; i=$((i + 1)); done; kill -KILL "-$1" 2>/dev/null; exit 0'
)


class NodeProcess:
    """One node's script, run in the actor's process (module docstring)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.proc: subprocess.Popen[bytes] | None = None
        self.guard: subprocess.Popen[bytes] | None = None
        self.output: list[bytes] = []
        self.lock = threading.Lock()
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
        self.proc = subprocess.Popen(
            ["bash", script],
            cwd=where,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            env={**os.environ, TAG: self.tag},
        )
        self.guard = start_guard(["sh", "-c", END_GROUP, "dtrun-node-stop", str(self.proc.pid)])
        self.pump = threading.Thread(target=self._pump, name="dtrun-ray-output", daemon=True)
        self.pump.start()
        import ray  # the worker's own: the node's address as Ray knows it

        address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return address, socket.gethostname()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            with self.lock:
                self.output.append(raw)

    def poll(self) -> tuple[list[bytes], int | None]:
        """The output since the last poll, and the script's exit code once it has exited and
        every line of it was handed over (None while it runs)."""
        assert self.proc is not None and self.pump is not None
        code = self.proc.poll()
        if code is not None:
            self.pump.join(timeout=5)
        with self.lock:
            lines, self.output = self.output, []
        return lines, code

    def stop(self, grace_s: float = GRACE_S) -> tuple[list[bytes], int | None]:
        """End the script's group: SIGTERM, SIGKILL after ``grace_s``; its last output, and its
        exit code (None: the stop ended it)."""
        if self.proc is None:
            return [], None
        running = self.proc.poll() is None
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + wait
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.proc.poll() is not None and not _group_alive(self.proc.pid):
                break
        if self.guard is not None:
            drop_guard(self.guard)
            self.guard = None
        lines, code = self.poll()
        return lines, None if running else code


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
