"""Where the test suite's CPU goes: every process it started, summed by kind.

The e2e part is CPU-bound on the 2-core VM (one Spark test alone kept the machine 83% busy), so
its wall time follows the CPU its processes use. This runs pytest under BSD process accounting
(acct(5): the kernel writes one record per process as it exits, its command name, parent, user
and system time) and reads the records with `dump-acct` (Debian's acct package; needs root).
Each process is put in one kind by its command name and its parent's: a torch rank is a Python
whose parent is a torchrun agent, and so on. Accounting is machine-wide: run it with nothing
else running.

    .venv/bin/python benchmarks/suite_cpu.py -- tests/e2e -m "not alone" -n 2 ...
    .venv/bin/python benchmarks/suite_cpu.py --pacct FILE [--pacct FILE]   # records taken before
        [--between START END]   # only what started in that window (one part of a suite)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

TICKS = 100  # acct v3's clock: AHZ, 100 a second on Linux (checked: `sleep 3` records 300)
# command name (the kernel's 15-character comm) -> kind, where the name alone says it
BY_NAME = {
    "torchrun": "torchrun agents",
    "pt_elastic": "torchrun agents",  # the elastic agent names itself so
    "dtrun": "dtrun (its own process)",
    "deepspeed": "DeepSpeed's launcher",
    "java": "Spark JVMs",
    "sshd": "sshd",
    "ssh": "ssh clients",
    "slurmctld": "Slurm daemons",
    "slurmd": "Slurm daemons",
    "slurmstepd": "Slurm daemons",
    "munged": "Slurm daemons",
    "mpirun": "OpenMPI",
    "prterun": "OpenMPI",
    "prted": "OpenMPI",
    "orted": "OpenMPI",
    "horovodrun": "Horovod's launcher",
    "raylet": "Ray daemons",
    "gcs_server": "Ray daemons",
    "chromium": "chromium",
    "chrome": "chromium",
    "g++": "compilers",
    "cc1plus": "compilers",
    "pulumi": "Pulumi",
}


@dataclass(frozen=True)
class Record:
    name: str
    cpu_s: float
    pid: int
    ppid: int
    start: float  # seconds since the epoch (dump-acct prints whole seconds)


def records(pacct: Path) -> list[Record]:
    """dump-acct's fields: command|version|user|system|elapsed|uid|gid|memory|io|pid|ppid|
    flags|exit code|tty|start time (ctime's format)."""
    out = subprocess.run(
        ["dump-acct", str(pacct)], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 11:
            continue
        user, system = float(fields[2]), float(fields[3])
        start = time.mktime(time.strptime(fields[14], "%a %b %d %H:%M:%S %Y"))
        found.append(
            Record(fields[0], (user + system) / TICKS, int(fields[9]), int(fields[10]), start)
        )
    return found


def parents(found: list[Record]) -> dict[int, str]:
    """Each record's parent's command name, by index. A busy suite starts tens of thousands of
    processes and pids are reused: the parent is the latest process of that pid that started
    no later than the child."""
    by_pid: dict[int, list[Record]] = defaultdict(list)
    for r in found:
        by_pid[r.pid].append(r)
    for candidates in by_pid.values():
        candidates.sort(key=lambda r: r.start)
    out = {}
    for i, r in enumerate(found):
        before = [c for c in by_pid.get(r.ppid, []) if c.start <= r.start]
        out[i] = before[-1].name if before else ""
    return out


# a Python process's kind by its parent's command name
PYTHON_BY_PARENT = {
    "pt_elastic": "torch ranks (under torchrun's agent)",
    "torchrun": "torch ranks (under torchrun's agent)",
    "java": "Spark's Python workers and their ranks",
    "deepspeed": "DeepSpeed's ranks",
    "mpirun": "ranks under mpirun or horovodrun",
    "prterun": "ranks under mpirun or horovodrun",
    "horovodrun": "ranks under mpirun or horovodrun",
    "slurmstepd": "ranks under Slurm",
}


# acct(5) writes the command name of a process's last thread to exit. A torch rank (torch 2.13)
# mostly ends on one of gloo's threads: 12 ranks of tests/e2e/test_e2e.py ended as
# pt_gloo_runloop, one as gloo_tcp_loop (2026-12-06). Those names are a Python's.
TORCH_THREADS = ("pt_gloo", "gloo_")
# A JVM ends on one of its own threads as often as on `java` (a fresh-clone suite, 2026-12-06):
# HotSpot's names, cut to 15 characters as comm is
JVM_THREADS = (
    "Reference Handl", "Finalizer", "C1 CompilerThre", "C2 CompilerThre", "Sweeper thread",
    "Monitor Deflati", "Notification Th", "Signal Dispatch", "VM Thread", "G1 ", "GC Thread",
    "Common-Cleaner", "Attach Listener", "Service Thread", "VM Periodic Tas", "DestroyJavaVM",
)  # fmt: skip


def kind(record: Record, parent: str) -> str:
    name = record.name
    if name in BY_NAME:
        return BY_NAME[name]
    if name.startswith(JVM_THREADS):
        return BY_NAME["java"]
    if name.startswith(("python", *TORCH_THREADS)):
        if parent in PYTHON_BY_PARENT:
            return PYTHON_BY_PARENT[parent]
        if parent.startswith("ray::") or parent == "raylet":
            return "Ray's workers and their ranks"
        return "other Python (pytest's workers, dtrun, test helpers)"
    if name.startswith("ray::"):
        return "Ray's workers and their ranks"
    if name in ("bash", "sh", "dash", "env", "cat", "sleep", "timeout", "setsid", "nice"):
        return "shells and small tools"
    return "other"


def summary(found: list[Record], wall_s: float | None) -> str:
    parent = parents(found)
    cpu: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for i, r in enumerate(found):
        k = kind(r, parent[i])
        cpu[k] += r.cpu_s
        count[k] += 1
    total = sum(cpu.values())
    lines = [f"{'kind':62s} {'processes':>9s} {'CPU s':>8s} {'share':>6s}"]
    for k, s in sorted(cpu.items(), key=lambda kv: -kv[1]):
        lines.append(f"{k:62s} {count[k]:9d} {s:8.0f} {100 * s / total:5.1f}%")
    lines.append(f"{'all':62s} {len(found):9d} {total:8.0f}")
    if wall_s:
        lines.append(f"wall {wall_s:.0f} s: {total / wall_s:.2f} cores busy on average")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pacct",
        action="append",
        type=Path,
        default=[],
        help="summarise these accounting files instead of running pytest",
    )
    parser.add_argument(
        "--between",
        nargs=2,
        type=datetime.fromisoformat,
        metavar=("START", "END"),
        help="with --pacct: only the processes that started in this window (ISO times, e.g. "
        "2026-12-06T06:59:10), and the cores it kept busy",
    )
    parser.add_argument("pytest", nargs="*", help="pytest's arguments (after --)")
    args = parser.parse_args()
    if shutil.which("dump-acct") is None or shutil.which("accton") is None:
        raise SystemExit("needs Debian's acct package (accton, dump-acct): apt-get install acct")
    if args.pacct:
        found = [r for p in args.pacct for r in records(p)]
        wall = None
        if args.between:
            start, end = (t.timestamp() for t in args.between)
            found, wall = [r for r in found if start <= r.start <= end], end - start
        print(summary(found, wall))
        return
    with tempfile.TemporaryDirectory() as tmp:
        pacct = Path(tmp) / "pacct"
        pacct.touch()
        subprocess.run(["accton", str(pacct)], check=True, capture_output=True)
        start = time.monotonic()
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", *args.pytest], check=False)
        finally:
            wall = time.monotonic() - start
            subprocess.run(["accton", "off"], check=False, capture_output=True)
        print(summary(records(pacct), wall))
        print(f"pytest exit {done.returncode}")


if __name__ == "__main__":
    main()
