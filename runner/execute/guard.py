"""A guard: a process that runs one command when dtrun ends without having stopped a launch.

SIGKILL (an OOM kill, `kill -9`, a CI runner's hard stop) runs none of dtrun's code, so nothing
dtrun does at its end can stop what it started. The guard is a small ``sh`` in a session of its
own, reading a pipe that only dtrun writes (it never does): the pipe reads end of file when
dtrun ends, however it ends, and the guard then runs its command (stop every process of the
launch here; cancel a Slurm step). When dtrun stops or ends the launch itself, it drops the
guard, which then runs nothing. The SSH engine's guard runs on each node
(templates/remote/launch.sh.j2); a Spark task's, beside its script (runner/engines/spark/node.py).

Standard library only at import: Spark's executors import it with node_main.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence

from dtrun.execute.reaper import grace_within

TAG = "DTRUN_LAUNCH"  # every process of a launch carries TAG=<random tag> in its environment
# What a guard waits with: reading a pipe nobody writes ends only at its end of file. A loop in
# the guard's own shell, not a `cat` it waits for: the guard is one process, which whoever
# drops it ends by its pid, and a child killed by something else cannot set it off.
WAIT_FOR_END = "while read -r _; do :; done"
REAPER = "execute/reaper.py"  # below the package's folder, where code_files ships it
# The pids of the processes whose environment holds the entry "$t" (TAG=VALUE): one grep over
# every environment (entries end in NUL: -z; the whole entry: -x; -s: a process gone or not
# ours to read is skipped). find hands grep the files in batches (`-exec {} +`): a glob on
# grep's command line passed ARG_MAX at ~90,000 processes, and grep ran on none. -prune keeps
# find to /proc/PID's own entries, as POSIX find can (-maxdepth is no POSIX option); no single
# quote, so a single-quoted shell string can hold it (runner/engines/ssh/remote.py).
TAGGED = (
    'find /proc -path "/proc/*/*" -prune -path "/proc/[0-9]*/environ" '
    '-exec grep -lsxzF -- "$t" {} + 2>/dev/null | cut -d/ -f3'
)


def reaper_on_node(python: str, package_dir: str, grace_s: float) -> dict[str, list[str]]:
    """The launch templates' values (remote/launch.sh.j2, launch/srun-node.sh.j2): ``reaper``,
    the command a node's script runs under (none without ``python`` and ``package_dir``), and
    ``needs``, what the node must have for it, checked there first."""
    found = bool(python and package_dir)
    return {
        "reaper": reaper_command(python, package_dir, grace_s) if found else [],
        "needs": [python, f"{package_dir}/{REAPER}"],
    }


def reaper_command(python: str, package_dir: str, grace_s: float) -> list[str]:
    """What runs a node's script under the reaper (runner/execute/reaper.py), which stops what
    the script left, tagged or not: the node's python, isolated (-I: no PYTHONPATH, no user
    site; -S: no site, 2 ms of its 12), with a grace inside the stop's ``grace_s``."""
    return [python, "-I", "-S", f"{package_dir}/{REAPER}", f"{grace_within(grace_s):g}"]


def start_guard(command: Sequence[str]) -> subprocess.Popen[bytes]:
    """The guard of ``command``; keep it until the launch is stopped or over."""
    return subprocess.Popen(
        ["sh", "-c", WAIT_FOR_END + ' && exec "$@"', "dtrun-guard", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,  # not stopped with dtrun's own process group
    )


@contextlib.contextmanager
def guarded(command: Sequence[str]) -> Iterator[None]:
    """``command`` runs should dtrun end inside the block without leaving it (SIGKILL)."""
    guard = start_guard(command)
    try:
        yield
    finally:
        drop_guard(guard)


def drop_guard(guard: subprocess.Popen[bytes]) -> None:
    """The launch was stopped or is over: the guard ends without running its command."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(guard.pid, signal.SIGKILL)
    guard.wait()
    if guard.stdin is not None:
        guard.stdin.close()


def stop_script(tag: str, grace_s: float) -> str:
    """A bash script that stops every process carrying the launch's tag on the machine it runs
    on: SIGTERM, SIGKILL after ``grace_s``; it prints ``dtrun-left: PIDS`` (normally none)."""
    from dtrun.render import render  # not at the top: Spark's executors import this module

    return render(
        "remote/stop.sh.j2",
        {"tag_name": TAG, "tag": tag, "grace_steps": max(1, int(grace_s / 0.2))},
    )
