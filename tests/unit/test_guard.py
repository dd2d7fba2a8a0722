"""The guard (runner/execute/guard.py): its command runs when dtrun ends without dropping it,
SIGKILL included, and never once dropped."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from dtrun.execute.guard import TAGGED, drop_guard, start_guard, stop_script
from tests.conftest import ended, wait_for
from tests.paths import REPO

# a stand-in for dtrun: it starts a guard that writes a file, then ends as told
DTRUN = """\
import os, signal, sys, time
from dtrun.execute.guard import drop_guard, start_guard
guard = start_guard(["sh", "-c", 'echo ran > "$0"', sys.argv[1]])
print(guard.pid, flush=True)
if sys.argv[2] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[2] == "drop":
    drop_guard(guard)
"""


def _dtrun(tmp_path: Path, end: str) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-c", DTRUN, str(tmp_path / "ran"), end],
        cwd=REPO, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return done.returncode, int(done.stdout.split()[0])


def test_a_sigkilled_dtruns_guard_runs_its_command(tmp_path):
    code, guard = _dtrun(tmp_path, "sigkill")
    assert code == -signal.SIGKILL
    wait_for(lambda: (tmp_path / "ran").exists(), timeout=10, what="the guard's command")
    wait_for(lambda: ended(guard), timeout=10, what="the guard to end")


def test_a_dtrun_that_exits_without_dropping_its_guard_has_it_run(tmp_path):
    code, _ = _dtrun(tmp_path, "exit")
    assert code == 0
    wait_for(lambda: (tmp_path / "ran").exists(), timeout=10, what="the guard's command")


def test_a_dropped_guard_runs_nothing(tmp_path):
    code, guard = _dtrun(tmp_path, "drop")
    assert code == 0 and ended(guard)
    time.sleep(0.5)
    assert not (tmp_path / "ran").exists()


def test_the_stop_script_ends_every_process_with_the_tag_and_only_those(tmp_path):
    tag, not_ours = secrets.token_hex(4), secrets.token_hex(4)
    tagged = [
        subprocess.Popen(
            ["sleep", "600"], env={**os.environ, "DTRUN_LAUNCH": tag}, start_new_session=True
        )
        for _ in range(2)
    ]
    other = subprocess.Popen(["sleep", "600"], env={**os.environ, "DTRUN_LAUNCH": not_ours})
    try:
        guard = start_guard(["bash", "-c", stop_script(tag, 1.0)])
        assert guard.stdin is not None
        guard.stdin.close()  # what dtrun's end does
        guard.wait(timeout=20)
        assert all(proc.wait(timeout=5) == -signal.SIGTERM for proc in tagged)
        assert other.poll() is None
        drop_guard(guard)  # dropping one that already ran is harmless
    finally:
        for proc in [*tagged, other]:
            proc.kill()
            proc.wait()


def test_the_stop_script_starts_a_few_processes_however_many_the_machine_runs(tmp_path):
    """It ran on every node after every launch, and started two processes (tr, grep) per
    process of the machine per look: 3.5 s a stop with 150 processes (issue 41)."""
    calls = tmp_path / "calls"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("grep", "tr", "cut"):  # each records its start, then is the real one
        real = subprocess.run(["which", tool], capture_output=True, text=True, check=True)
        stub = stubs / tool
        stub.write_text(f'#!/bin/sh\necho {tool} >> "{calls}"\nexec {real.stdout.strip()} "$@"\n')
        stub.chmod(0o755)
    machine = len([entry for entry in Path("/proc").iterdir() if entry.name.isdigit()])
    tagged = subprocess.Popen(
        ["sleep", "600"], env={**os.environ, "DTRUN_LAUNCH": "t1"}, start_new_session=True
    )
    try:
        env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}
        done = subprocess.run(
            ["bash", "-c", stop_script("t1", 1.0)], env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert tagged.wait(timeout=5) == -signal.SIGTERM
    finally:
        tagged.kill()
        tagged.wait()
    assert done.stdout.split() == ["dtrun-left:"]
    started = calls.read_text().split()
    # Each look starts one grep and one cut whatever the machine runs; the number of looks
    # depends on how soon the signalled process goes (a loaded host took one more look), so it
    # is bounded by the script's own loops, not pinned: TERM, 5 grace looks, KILL, 10, the end.
    looks = started.count("grep")
    assert started.count("cut") == looks and started.count("tr") == 1, started
    assert machine > 20 and 5 <= looks <= 18 < machine, (machine, looks)


def test_the_stop_script_sleeps_not_at_all_when_nothing_carries_the_tag(tmp_path):
    """A launch that ended by itself leaves nothing to stop; the stop ran after every launch on
    every node and slept 0.2 s there before its last look (issue 41)."""
    calls = tmp_path / "calls"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    real = subprocess.run(["which", "sleep"], capture_output=True, text=True, check=True)
    (stubs / "sleep").write_text(
        f'#!/bin/sh\necho sleep >> "{calls}"\nexec {real.stdout.strip()} "$@"\n'
    )
    (stubs / "sleep").chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", stop_script(secrets.token_hex(8), 1.0)], env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.split() == ["dtrun-left:"]
    assert not calls.exists(), calls.read_text()


def _scan(scan: str, entry: str, cwd: Path, stack_kib: int | None = None) -> list[str]:
    """The pids the tag scan ``scan`` (a shell command reading "$t") finds for ``entry``."""
    limit = f"ulimit -s {stack_kib}; " if stack_kib else ""
    done = subprocess.run(["sh", "-c", f"{limit}t={entry}; {scan}"], cwd=cwd,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return done.stdout.split()


def test_the_tag_scan_finds_a_tagged_process_past_the_command_line_s_limit(tmp_path):
    """A node with ~90,000 processes: `grep ... /proc/[0-9]*/environ` put every path on one
    command line, past ARG_MAX, and grep ran on none (`Argument list too long`): a stop found
    nothing to stop. Here a stand-in /proc of 3,000 long pid names (360 KiB of paths) under
    a 1 MiB stack (ARG_MAX 256 KiB): the scan finds the one that carries the tag, and none
    other."""
    proc = tmp_path / "p"
    for index in range(3000):
        (proc / f"{index:0100d}").mkdir(parents=True)
        (proc / f"{index:0100d}" / "environ").write_bytes(b"HOME=/\0DTRUN_LAUNCH=other\0")
    (proc / f"{1234:0100d}" / "environ").write_bytes(b"HOME=/\0DTRUN_LAUNCH=t1-0\0")
    (proc / "sys").mkdir()  # not a process: not read
    (proc / "sys" / "environ").write_bytes(b"DTRUN_LAUNCH=t1-0\0")
    scan = TAGGED.replace("/proc", "./p")  # ./p/PID/environ: the pid is the third field too
    assert _scan(scan, "DTRUN_LAUNCH=t1-0", tmp_path, stack_kib=1024) == [f"{1234:0100d}"]


def test_the_tag_scan_finds_a_tagged_process_of_this_machine(tmp_path):
    """The scan that the SSH wrapper's guard, the local scripts' guard and a Ray node's stop
    run (TAGGED), on this machine's own /proc."""
    tag = secrets.token_hex(4)
    tagged = subprocess.Popen(["sleep", "600"], env={**os.environ, "DTRUN_LAUNCH": tag})
    try:
        assert _scan(TAGGED, f"DTRUN_LAUNCH={tag}", tmp_path) == [str(tagged.pid)]
    finally:
        tagged.kill()
        tagged.wait()
