"""Real faults for the tests: a slow node (a CPU quota) and a slow link (a shaped address).

- **A slow node**: a cgroup v1 ``cpu`` group with a CFS quota (the kernel's CFS bandwidth
  control, Documentation/scheduler/sched-bwc.rst: ``cpu.cfs_quota_us`` of CPU time per
  ``cpu.cfs_period_us``), and one node's processes moved into it. A process a member starts is
  a member too (a child starts in its parent's cgroup), so moving an sshd instance throttles
  every session it serves from then on and everything they run. ``slow_tree`` moves what runs
  under a process (an sshd's sessions, a standalone Spark worker's executors) and an embedded
  node's processes are caught by their ``DTRUN_NODE_NAME``, as they appear, from a cue on:
  a node slowed for what is measured, not for its imports. Each group is named for this test
  process (``dtrun-test-<pid>-<n>``) and removed afterwards, its tasks moved back to the root
  group first, whatever the test did.
- **A slow link**: an HTB qdisc on the loopback device, a default class at full rate and one
  at ``rate`` that a u32 filter sends every IPv4 packet addressed to one node into
  (tc-htb(8), tc-u32(8); this kernel has HTB and u32 but not netem). Only ever inside a test
  worker's own network namespace (``-n 1 --worker-netns``): on the root namespace's loopback it
  would slow every other process on the machine. The qdisc is deleted afterwards.

Both need root, as the e2e part already does (sshd, network namespaces, tmpfs mounts).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.sshd import SshCluster

CPU_ROOT = Path("/sys/fs/cgroup/cpu")  # the cgroup v1 cpu controller's hierarchy
# 20 ms (the default is 100): a step of a few ms is held back evenly, and the kernel's
# smallest quota, 1 ms, is a twentieth of a CPU
PERIOD_US = 20_000
_groups = itertools.count()


class FaultRefused(RuntimeError):
    """A fault this machine or this test process cannot (or must not) make."""


@dataclass(frozen=True)
class CpuGroup:
    """A cpu cgroup with a quota; ``join`` moves a process (its every thread) into it."""

    path: Path
    share: float  # of one CPU: quota / period

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]

    def throttled(self) -> tuple[int, float]:
        """How often its members ran out of quota: periods throttled and seconds held back
        (cpu.stat's nr_throttled and throttled_time)."""
        stat = dict(
            line.split(" ", 1) for line in (self.path / "cpu.stat").read_text().splitlines()
        )
        return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_time", 0)) / 1e9


def _require_cpu_cgroups() -> None:
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        raise FaultRefused(
            f"no cgroup v1 cpu controller at {CPU_ROOT}: a slow node needs one (and root)"
        )


def _remove(group: Path) -> None:
    """Every task back to the root group, then the group itself; a task that a member forks
    while they are moved keeps the group busy (EBUSY), so it is tried until it is empty."""
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(FileNotFoundError):
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    (CPU_ROOT / "cgroup.procs").write_text(pid)
        try:
            group.rmdir()
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        else:
            return


@contextlib.contextmanager
def cpu_quota(share: float, pids: Iterable[int] = ()) -> Iterator[CpuGroup]:
    """A cpu cgroup allowed ``share`` of one CPU (0.25: 5 ms in every 20 ms), holding
    ``pids``; removed on the way out, its tasks back in the root group."""
    _require_cpu_cgroups()
    if not 0.05 <= share <= 64:  # the kernel's smallest quota is 1 ms
        raise ValueError(f"share {share} of a CPU: give one from 0.05 up")
    path = CPU_ROOT / f"dtrun-test-{os.getpid()}-{next(_groups)}"
    path.mkdir()
    try:
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(round(share * PERIOD_US)))
        group = CpuGroup(path, share)
        for pid in pids:
            group.join(pid)
        yield group
    finally:
        _remove(path)


@contextlib.contextmanager
def slow_sshd(cluster: SshCluster, address: str, share: float) -> Iterator[CpuGroup]:
    """The sshd instance on ``address`` in a cpu group allowed ``share`` of one CPU: every
    session it opens from now on, and all they start, run throttled."""
    process = cluster.processes[address]
    with cpu_quota(share, [process.pid]) as group:
        yield group


@contextlib.contextmanager
def intermittent(group: CpuGroup, on_s: float, off_s: float) -> Iterator[CpuGroup]:
    """``group``'s quota held for ``on_s``, lifted for ``off_s`` (cpu.cfs_quota_us -1: no
    limit), over and over until the block ends: a node slowed part of the time, as a periodic
    job beside it or a quota that a controller turns on and off would; lifted on the way out."""
    quota = group.path / "cpu.cfs_quota_us"
    held = str(round(group.share * PERIOD_US))
    stop = threading.Event()

    def toggle() -> None:
        while True:
            quota.write_text(held)
            if stop.wait(on_s):
                return
            quota.write_text("-1")
            if stop.wait(off_s):
                return

    thread = threading.Thread(target=toggle, name="intermittent-quota", daemon=True)
    thread.start()
    try:
        yield group
    finally:
        stop.set()
        thread.join()
        with contextlib.suppress(FileNotFoundError):
            quota.write_text("-1")


def _processes(env_matches: Callable[[dict[str, str]], bool]) -> Iterator[psutil.Process]:
    """This test worker's processes whose environment ``env_matches``: this test session's (its
    DTRUN_TEST_SESSION) and, under xdist, those carrying the worker's PYTEST_XDIST_WORKER
    (inherited from it) or living in its network namespace (--worker-netns: an embedded node
    starts with a login's variables, runner/plan/machineenv.py, and keeps only DTRUN_*)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if (
                env.get("DTRUN_TEST_SESSION") == os.environ.get("DTRUN_TEST_SESSION")
                and (worker is None or env.get("PYTEST_XDIST_WORKER") == worker or _here(proc))
                and env_matches(env)
            ):
                yield proc


def _here(proc: psutil.Process) -> bool:
    """Whether ``proc`` shares this process's network namespace."""
    try:
        return Path(f"/proc/{proc.pid}/ns/net").readlink() == Path("/proc/self/ns/net").readlink()
    except OSError:
        return False


@contextlib.contextmanager
def _slow_while(
    found: Callable[[], Iterable[psutil.Process]],
    share: float,
    name: str,
    after: Callable[[], bool],
    until: Callable[[], bool],
    every_s: float,
) -> Iterator[CpuGroup]:
    """Each process ``found()`` gives in a cpu group allowed ``share`` of one CPU: a thread
    moves each one in as it appears, from the first look at which ``after()`` holds (a rank's
    imports at a twentieth of a CPU take a minute) to the first at which ``until()`` does, when
    it moves them all back (their exit too would be slow)."""
    with cpu_quota(share) as group:
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(every_s):
                if until():
                    for pid in group.pids():
                        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                            (CPU_ROOT / "cgroup.procs").write_text(str(pid))
                    return
                if not after():
                    continue
                members = set(group.pids())
                for proc in found():
                    if proc.pid not in members:
                        with contextlib.suppress(OSError):  # it ended meanwhile
                            group.join(proc.pid)

        watcher = threading.Thread(target=watch, name=name, daemon=True)
        watcher.start()
        try:
            yield group
        finally:
            stop.set()
            watcher.join()


def slow_processes(
    env_matches: Callable[[dict[str, str]], bool],
    share: float,
    every_s: float = 0.05,
    after: Callable[[], bool] = lambda: True,
    until: Callable[[], bool] = lambda: False,
) -> contextlib.AbstractContextManager[CpuGroup]:
    """Every process of this test worker whose environment ``env_matches`` in a cpu group
    allowed ``share`` of one CPU, as it appears (a rank spends a second or more importing torch
    before it computes, far longer than ``every_s``), while ``after()`` and not ``until()``
    (``_slow_while``)."""
    return _slow_while(
        lambda: _processes(env_matches), share, "slow-processes", after, until, every_s
    )


def slow_tree(
    root: int,
    share: float,
    after: Callable[[], bool],
    until: Callable[[], bool] = lambda: False,
    every_s: float = 0.05,
) -> contextlib.AbstractContextManager[CpuGroup]:
    """Every process under ``root`` (an sshd instance: every session it serves and all they
    start) in a cpu group allowed ``share`` of one CPU, while ``after()`` and not ``until()``:
    a node slowed for its timed steps, not for its imports (``_slow_while``)."""

    def under() -> list[psutil.Process]:
        try:
            return psutil.Process(root).children(recursive=True)
        except psutil.Error:  # ended meanwhile
            return []

    return _slow_while(under, share, "slow-tree", after, until, every_s)


def slow_found(
    found: Callable[[], Iterable[psutil.Process]],
    share: float,
    after: Callable[[], bool],
    until: Callable[[], bool] = lambda: False,
    every_s: float = 0.05,
) -> contextlib.AbstractContextManager[CpuGroup]:
    """Every process ``found()`` gives (a Slurm node's: its slurmd's UTS namespace, where
    slurmstepd, reparented away from slurmd, and the tasks it starts live) in a cpu group
    allowed ``share`` of one CPU, while ``after()`` and not ``until()`` (``_slow_while``)."""
    return _slow_while(found, share, "slow-found", after, until, every_s)


def slow_embedded_node(
    node: str,
    share: float,
    after: Callable[[], bool] = lambda: True,
    until: Callable[[], bool] = lambda: False,
) -> contextlib.AbstractContextManager[CpuGroup]:
    """Every process of the embedded node ``node`` (e.g. node-1: the embedded executor sets
    DTRUN_NODE_NAME) in a cpu group allowed ``share`` of one CPU, from when ``after()`` holds
    until ``until()`` does."""
    return slow_processes(
        lambda env: env.get("DTRUN_NODE_NAME") == node, share, after=after, until=until
    )


def check_said(root: Path, words: str) -> bool:
    """A node log of a `dtrun check` writing under ``root``/runs holds ``words``: "dtrun:
    checking" once every rank has joined (runner/workloads/check.py), "dtrun: checked" once
    its measuring is over. A cue to throttle a node for what the check measures, not for its
    imports and start (at a twentieth of a CPU: minutes)."""
    return any(words in log.read_text(errors="replace") for log in root.glob("runs/*/check/*.log"))


def slow_rank(
    rank: int,
    share: float,
    after: Callable[[], bool] = lambda: True,
    until: Callable[[], bool] = lambda: False,
) -> contextlib.AbstractContextManager[CpuGroup]:
    """The process of one rank (its RANK variable, as torchrun sets it) in a cpu group allowed
    ``share`` of one CPU, from when ``after()`` holds until ``until()`` does."""
    return slow_processes(lambda env: env.get("RANK") == str(rank), share, after=after, until=until)


def _netns(pid: int | str) -> str | None:
    try:
        return str(Path(f"/proc/{pid}/ns/net").readlink())
    except OSError:  # pid 1's may be unreadable, even to root, in a container
        return None


def in_own_network_namespace() -> bool:
    """This thread is in a network namespace of its own, as a test worker under --worker-netns
    is (tests/conftest.py): not its parent's (the pytest that started the worker, or a shell)
    nor, where it can be read, init's."""
    mine = _netns("thread-self")
    return mine is not None and mine not in {_netns(os.getppid()), _netns(1)}


def _tc(*args: str) -> None:
    done = subprocess.run(["tc", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FaultRefused(f"tc {' '.join(args)}: {done.stderr.strip()}")


@contextlib.contextmanager
def slow_link(address: str, rate: str = "20mbit", device: str = "lo") -> Iterator[str]:
    """Every IPv4 packet to ``address`` through ``device`` at most ``rate`` (HTB); everything
    else at full rate. Refused outside a network namespace of the test's own."""
    if not in_own_network_namespace():
        raise FaultRefused(
            "a slow link shapes the loopback device: only in a test worker's own network "
            "namespace (pytest -n 1 --worker-netns), never the machine's"
        )
    _tc("qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "10")
    try:
        # the default class: as fast as loopback goes (HTB's rates are 64-bit since 3.13)
        _tc("class", "add", "dev", device, "parent", "1:", "classid", "1:10",
            "htb", "rate", "1000gbit")  # fmt: skip
        _tc("class", "add", "dev", device, "parent", "1:", "classid", "1:20",
            "htb", "rate", rate, "ceil", rate)  # fmt: skip
        _tc("filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1",
            "u32", "match", "ip", "dst", f"{address}/32", "flowid", "1:20")  # fmt: skip
        yield address
    finally:
        subprocess.run(
            ["tc", "qdisc", "del", "dev", device, "root"], capture_output=True, check=False
        )


def best_of(count: int, measure: Callable[[], float]) -> float:
    """The smallest of ``count`` measurements: the one least disturbed by the machine's other
    work (a shared machine only ever adds time)."""
    return min(measure() for _ in range(count))
