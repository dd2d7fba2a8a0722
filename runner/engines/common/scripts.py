"""What every engine's executor shares: the launch files and node scripts written beside each
other, a node's output read line by line into its log, and short scripts run on every node at
once (``Executor.command``). Engines import it; it imports no engine."""

from __future__ import annotations

import contextlib
import io
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from dtrun.execute import LineSink
from dtrun.spec.launchplan import LaunchPlan
from dtrun.workloads.files import NodeLog, write_atomic


def run_scripts(
    scripts: dict[str, str],
    start: Callable[[str], subprocess.Popen[bytes]],
    on_line: LineSink | None = None,
) -> dict[str, tuple[list[str], int]]:
    """Each node's short script, all at once: ``start(node)`` starts a process that reads the
    script on its stdin (bash -s here, srun ... bash -s under Slurm). Every node's output lines,
    streamed to ``on_line`` as they come, and its exit code."""
    lines: dict[str, list[str]] = {name: [] for name in scripts}
    lock = threading.Lock()

    def collect(name: str, line: str) -> None:
        with lock:
            lines[name].append(line)
            if on_line is not None:
                on_line(name, line)

    processes = {name: start(name) for name in scripts}
    readers = []
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
            reader.join()
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
    return {name: (lines[name], process.wait()) for name, process in processes.items()}


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


def pump(stream: IO[bytes], log: NodeLog | io.BytesIO, name: str, on_line: LineSink) -> None:
    with stream, log:
        for raw in iter(stream.readline, b""):
            log.write(raw)  # a NodeLog on a full disk stops writing, and the reading goes on
            on_line(name, raw.decode(errors="replace").rstrip("\r\n"))
