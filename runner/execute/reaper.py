"""The reaper: the process that runs a node's launch script and outlives it, so that nothing the
script started survives the launch, even without the launch's tag.

Stops find a launch's processes by the DTRUN_LAUNCH tag in their environment (guard.py,
templates/remote/stop.sh.j2). A program that starts a helper with a cleared environment and a
double fork (``Popen(["sh", "-c", "sleep 1000 &"], env={})``, ``env -i setsid ...``) leaves one
without the tag, reparented to init when its parent ends: no stop found it. The reaper makes
itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4; not inherited by fork, kept
across execve), so every orphan below it is reparented to it instead of to init. When the
script ends, or a stop's SIGTERM, SIGINT or SIGHUP reaches it, it stops every child it has
(SIGTERM, then SIGKILL after its grace, round after round: a killed child's own children become
its children) and exits only when none is left, as the script ended: with its exit code, or
by the signal that ended it (whoever waits sees "signal SIGKILL", not 137).

Python, not a compiled helper: Python is what the nodes already run (torchrun, DeepSpeed, the
workloads, the step hook all run under the launch's python; SSH and a stack's Slurm ship this
file with dtrun's code), and ctypes reaches prctl without a compiler. Run as a file, ``python -I
-S reaper.py GRACE_S COMMAND...``: standard library only, nothing from the user's environment.
Every engine but Spark runs each node's script under it. Spark's executors may hold dtrun
only in a zip (runner/engines/spark/shipping.py), no file to run, and TorchDistributor runs a
Python program in the rank's own process (inprocess.py), with no script to run under anything.

Its grace is shorter than the stop's (``grace_within``): a stop's SIGKILL reaches every tagged
process, the reaper too, and a reaper killed before its children would orphan them to init.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
STOPS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
WATCHED = STOPS | {signal.SIGCHLD}
LOOK_S = 0.02  # how often, while stopping, it looks for orphans just reparented to it (no signal)


def grace_within(stop_grace_s: float) -> float:
    """The reaper's grace, inside a stop's: its SIGKILLs, and its exit, come before the stop's
    SIGKILL (1 s before, or halfway for a grace under 2 s)."""
    return max(stop_grace_s - 1.0, stop_grace_s / 2)


def parent_of(stat: bytes) -> int:
    """The parent pid in a /proc/PID/stat line: the field after the state, which follows the
    last ')' (the process name between parentheses may hold any character, ')' too)."""
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def exit_code(status: int) -> int:
    """A wait status as bash reports it: the exit code, or 128 + N for a signal N."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (single-threaded): the kernel's list where it keeps
    one (CONFIG_PROC_CHILDREN, on in Debian's, Ubuntu's and RHEL's kernels), else each
    process's parent, from /proc. A zombie among them takes a signal harmlessly."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as listed:  # noqa: PTH123 - no pathlib
            return [int(child) for child in listed.read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc"):  # noqa: PTH208 - no pathlib at start-up (10 ms)
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:  # noqa: PTH123 - no pathlib
                line = stat.read()
        except OSError:  # gone meanwhile
            continue
        if parent_of(line) == pid:
            found.append(int(entry))
    return found


class Reaper:
    """The script's exit code once it ends, and the reaping of every child until none is left."""

    def __init__(self, script: int, grace_s: float) -> None:
        self.script = script
        self.grace_s = grace_s
        self.status: int | None = None  # the script's exit code once reaped
        self.signal: int | None = None  # the signal that ended the script, if one did
        self.deadline: float | None = None  # when stopping: the SIGKILLs' time
        self.termed: set[int] = set()

    def reap(self) -> bool:
        """Reap every child that ended; False once it has no child at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.script:
                self.status = exit_code(status)
                self.signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None

    def stop(self, *, spare_script: bool) -> None:
        """Begin the stop: SIGTERM to every child, but the script where a stop signalled it
        already (stop.sh and the embedded engine signal it; twice could cut its own stop short)."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.grace_s
            if spare_script:
                self.termed.add(self.script)

    def signal_children(self) -> None:
        assert self.deadline is not None  # only while stopping
        late = time.monotonic() >= self.deadline
        for pid in children(os.getpid()):
            if late or pid not in self.termed:
                self.termed.add(pid)
                try:  # noqa: SIM105 - no contextlib at start-up
                    os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
                except ProcessLookupError:
                    pass


def die_as(signum: int) -> None:
    """End as the script ended, by its signal, so that whoever waits for the reaper sees what
    it would have seen of the script ("failed with signal SIGKILL", not exit code 137). No core
    file: the reaper's would be of no use."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if signum != signal.SIGKILL and signum != signal.SIGSTOP:
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    time.sleep(1)  # a signal whose default is to go on (SIGCHLD, SIGWINCH): the code instead


def main(argv: list[str]) -> int:
    grace_s, command = float(argv[1]), argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    one, zero = ctypes.c_ulong(1), ctypes.c_ulong(0)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, one, zero, zero, zero) != 0:  # Linux before 3.4
        print(f"dtrun-reaper: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)  # taken by sigtimedwait, never lost
    try:  # the script as it would run without the reaper: Python's SIGPIPE and mask undone
        script = os.posix_spawnp(
            command[0], command, os.environ,
            setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )  # fmt: skip
    except OSError as error:
        print(f"dtrun-reaper: {command[0]}: {error.strerror}", file=sys.stderr)
        return 127
    reaper = Reaper(script, grace_s)
    while True:
        if reaper.deadline is None:  # the script runs: a signal is all there is to wait for
            got: signal.struct_siginfo | None = signal.sigwaitinfo(WATCHED)
        else:  # stopping: orphans come without a signal
            got = signal.sigtimedwait(WATCHED, LOOK_S)
        if got is not None and got.si_signo in STOPS:
            reaper.stop(spare_script=True)
        if not reaper.reap() and reaper.status is not None:
            if reaper.signal is not None:
                die_as(reaper.signal)
            return reaper.status  # the script ended and nothing is left: no look at /proc
        if reaper.status is not None:
            reaper.stop(spare_script=False)
        if reaper.deadline is not None:
            reaper.signal_children()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
