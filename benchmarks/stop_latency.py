"""Seconds from a stop signal to dtrun's exit, and the processes it leaves: issue #12's measure.

Starts `dtrun bench --nodes 2` with a step count no run reaches, waits until both ranks train
(processes with RANK in their environment, under the run directory on the embedded cluster, or
carrying DTRUN_LAUNCH over SSH), sends SIGINT, SIGTERM or SIGHUP, and times the exit. Then it
counts what is left: every process whose working directory is under the run directory, and
every process of a launch (DTRUN_LAUNCH in its environment; on an SSH cluster of loopback
sshd instances, the nodes' processes are on this machine too). Target (issue #12): Ctrl-C to
exit in at most 6 s on the embedded cluster, 0 processes left.

    .venv/bin/python benchmarks/stop_latency.py [--rounds 3] [--hosts HOSTS_FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}


def _terminal_signals() -> None:
    """The child gets a terminal's signal dispositions, whatever this script was started by."""
    for signum in SIGNALS.values():
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _ours(proc: psutil.Process, root: str) -> bool:
    """A process this run started: its working directory is under the run's (every embedded
    node's is), or it carries DTRUN_LAUNCH and works under the run's remote directory."""
    with contextlib.suppress(psutil.Error):
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cwd = proc.cwd()
        if cwd == root or cwd.startswith(root + os.sep):
            return True
        return "DTRUN_LAUNCH" in proc.environ() and f"{os.sep}stop{os.sep}" in cwd + os.sep
    return False


def _ranks(root: str) -> int:
    count = 0
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if _ours(proc, root) and "RANK" in proc.environ():
                count += 1
    return count


def left_behind(root: str) -> list[psutil.Process]:
    return [proc for proc in psutil.process_iter() if proc.pid != os.getpid() and _ours(proc, root)]


def one_stop(name: str, hosts: str | None, port: int, work: Path) -> tuple[float, int, int]:
    """(seconds from the signal to dtrun's exit, its exit code, processes left 1 s later)."""
    out = work / name
    command = [
        sys.executable, "-m", "dtrun.cli", "bench", "--nodes", "2", "--steps", "1000000",
        "--warmup", "1", "--quiet", "--no-health-gate", "--port", str(port),
        "--output", str(out), "--run-id", "stop",
    ]  # fmt: skip
    if hosts:
        command += ["--hosts", hosts]
    out.mkdir(parents=True)
    proc = subprocess.Popen(
        command,
        cwd=out,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_terminal_signals,
    )
    root = str(out.resolve())
    deadline = time.monotonic() + 180
    while _ranks(root) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            assert proc.stderr is not None
            raise SystemExit(f"dtrun never started both ranks: {proc.stderr.read()[-2000:]!r}")
        time.sleep(0.1)
    time.sleep(1.0)  # both ranks in their training loop
    sent = time.monotonic()
    proc.send_signal(SIGNALS[name])
    code = proc.wait(timeout=120)
    took = time.monotonic() - sent
    time.sleep(1.0)
    left = left_behind(root)
    for stray in left:
        with contextlib.suppress(psutil.Error):
            print(f"  left: {stray.pid} {stray.name()} {' '.join(stray.cmdline())[:160]}")
        with contextlib.suppress(psutil.Error):
            stray.kill()
    return took, code, len(left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hosts", help="a hosts file (default: the embedded cluster)")
    parser.add_argument("--port", type=int, default=29900)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; cluster: "
        f"{args.hosts or 'embedded'}, 2 nodes training; {args.rounds} stops per signal"
    )
    print("| signal | exit codes | seconds to exit (median, min-max) | processes left |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="dtrun-stop-") as tmp:
        for index, name in enumerate(SIGNALS):
            times, codes, left = [], [], []
            for round_ in range(args.rounds):
                took, code, stray = one_stop(
                    name, args.hosts, args.port + 10 * index + 2 * round_,
                    Path(tmp) / f"{name}-{round_}",
                )  # fmt: skip
                times.append(took)
                codes.append(code)
                left.append(stray)
            print(
                f"| {name} | {', '.join(map(str, sorted(set(codes))))} | "
                f"{statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) | "
                f"{', '.join(map(str, left))} |"
            )


if __name__ == "__main__":
    main()
