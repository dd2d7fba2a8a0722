"""A stop (Ctrl-C, SIGTERM, SIGHUP) ends dtrun while one of its threads is stuck for good
(runner/engines/common/threads.py): the threads that read ~/.ssh/config for the hosts, and the
SSH session loop's threads. A FIFO held open and never written holds whoever reads it, as a
`Match exec` command that never ends, or a name lookup that never answers, would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import DTRUN, default_signals, ends_within, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _read(fifo: Path, held: list[int]) -> bool:
    """Someone holds ``fifo`` open to read it; the end opened here is held open, never
    written, so the reader stays stuck in its read."""
    try:
        held.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: no reader yet
        return False
    return True


def _stopped_while_stuck(tmp_path: Path, command: list[str], fifo: Path, signum: int) -> str:
    """``command`` stopped by ``signum`` once it reads ``fifo``: what it printed; its exit code
    must be the stop's (128 + the signal), and past 30 s the test fails with its stacks."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    held: list[int] = []
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )  # fmt: skip
        try:
            reading = lambda: _read(fifo, held) or proc.poll() is not None  # noqa: E731
            wait_for(reading, timeout=120, what="a reader of the FIFO")
            assert proc.poll() is None, "it ended before it read the FIFO"
            proc.send_signal(signum)
            code = ends_within(proc, 30, out)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for fd in held:
                os.close(fd)
        out.seek(0)
        said = out.read()
    assert code == 128 + signum, said
    return said


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_ends_dtrun_while_a_thread_reading_the_ssh_config_is_stuck(tmp_path, signum):
    """Reading the config for a host runs its `Match exec` commands: one that never ends held
    the main thread's wait (ThreadPoolExecutor's shutdown), and then Python's exit."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(f'Match exec "cat {fifo}"\n  User someone\n')
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - host: 127.0.0.91\n    port: 29771\n")
    command = [*DTRUN, "exec", "--hosts", str(hosts), "--connect-timeout", "600", "--", "true"]
    said = _stopped_while_stuck(tmp_path, command, fifo, signum)
    words = "interrupted by the user" if signum == signal.SIGINT else signal.Signals(signum).name
    assert words in said
    assert "Traceback" not in said


_SESSION = """
import asyncio, sys
from pathlib import Path
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.session import SshSession

text = "hosts: [127.0.0.92]\\nport: 29772\\n"
session = SshSession(parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin")))

async def stuck():
    await asyncio.get_running_loop().run_in_executor(None, Path(sys.argv[1]).read_text)

try:
    session.call(stuck())
except KeyboardInterrupt:
    print("stopped", flush=True)
finally:
    session.close()
print("closed", flush=True)
sys.exit(130)
"""


def test_the_ssh_session_closes_and_dtrun_ends_while_a_thread_of_its_loop_is_stuck(tmp_path):
    """asyncssh builds options from ~/.ssh/config and looks names up in the loop's threads;
    closing the loop waited for every one of them (asyncio's shutdown_default_executor)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    command = [sys.executable, "-X", "faulthandler", "-c", _SESSION, str(fifo)]
    said = _stopped_while_stuck(tmp_path, command, fifo, signal.SIGINT)
    assert said.split() == ["stopped", "closed"], said


def test_daemon_threads_give_results_in_order_and_leave_stuck_calls_at_shutdown():
    import threading

    from dtrun.engines.common.threads import DaemonThreads

    pool = DaemonThreads(2, "dtrun-test")
    assert list(pool.map(lambda n: n * n, range(10))) == [n * n for n in range(10)]
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result()
    release = threading.Event()
    stuck = [pool.submit(release.wait) for _ in range(3)]  # two threads: the third waits
    wait_for(lambda: stuck[0].running() and stuck[1].running(), timeout=30, what="both calls")
    pool.shutdown(wait=True, cancel_futures=True)  # returns with both calls still running
    assert stuck[2].cancelled()
    ours = [thread for thread in threading.enumerate() if thread.name.startswith("dtrun-test")]
    assert [thread.daemon for thread in ours] == [True, True]
    release.set()
    assert [stuck[0].result(timeout=30), stuck[1].result(timeout=30)] == [True, True]


_TAKEN_BY_A_THREAD = """
import signal, sys, threading, time
from dtrun.engines.common.threads import DaemonThreads

workers = []

def stuck(_):
    workers.append(threading.get_ident())
    time.sleep(60)  # a `Match exec` command's waitpid, say

def send():  # the kernel gives the stop to the worker, not the main thread (signal(7))
    while not workers:
        time.sleep(0.01)
    time.sleep(0.3)
    signal.pthread_kill(workers[0], signal.SIGINT)

threading.Thread(target=send, daemon=True).start()
try:
    list(DaemonThreads(1, "dtrun-test").map(stuck, [1]))
except KeyboardInterrupt:
    print("stopped", flush=True)
    sys.exit(130)
"""


def test_a_stop_signal_a_worker_thread_takes_still_stops_the_main_thread_s_wait():
    """Python runs a signal's handler in the main thread, and only once that thread runs
    Python code again: a stop the kernel gave to a thread stuck in a `Match exec` command held
    dtrun asleep in its wait for the thread's result, for good (once in a fresh clone's suite).
    The wait wakes every WAKE_S: stopped within seconds, not after the call's 60 s."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _TAKEN_BY_A_THREAD], env=env, capture_output=True, text=True,
        timeout=55, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (130, "stopped\n"), done.stderr


# Waits of dtrun's main thread while another thread of its own sits in a syscall; each case
# (a statement) waits on a call that records its thread in `stuck` and then takes 30 s.
_MAIN_WAITS = """
import signal, sys, threading, time

stuck = []

def sleeper(seconds=30):
    stuck.append(threading.get_ident())
    time.sleep(seconds)

def send():  # the kernel gives the stop to that thread, not the main thread (signal(7))
    while not stuck:
        time.sleep(0.01)
    time.sleep(0.5)
    signal.pthread_kill(stuck[0], signal.SIGINT)

threading.Thread(target=send, daemon=True).start()
try:
    exec(sys.argv[1])
except KeyboardInterrupt:
    print("stopped", flush=True)
    sys.exit(130)
"""
_BESIDE = """
from dtrun.sweep.beside import Beside
Beside(sleeper).join()
"""
_SCRIPTS = """
import subprocess
from dtrun.engines.common import scripts
pump = scripts.pump
def recorded(*args):
    stuck.append(threading.get_ident())
    pump(*args)
scripts.pump = recorded
start = lambda name: subprocess.Popen(
    ["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
)
scripts.run_scripts({"n": "sleep 30"}, start)
"""
_REPORT_HELPER = """
from dtrun.report.builder import ReportBuilder
builder = ReportBuilder()
answers = [t for t in threading.enumerate() if t.name == "dtrun-report-helper"]
stuck.append(answers[0].ident)
try:
    builder.call(time.sleep, 30)
finally:
    builder._helper._process.kill()
"""
_UPLOADS = """
from concurrent.futures import Future
from dtrun.store.s3 import S3Store
upload = Future()
threading.Thread(target=lambda: upload.set_result(sleeper()), daemon=True).start()
S3Store._wait({"key": upload})
"""

_SSH_LOOP = """
import asyncio
from dtrun.engines.ssh.hosts import Defaults, parse_hosts_file
from dtrun.engines.ssh.session import SshSession
text = "hosts: [127.0.0.93]\\nport: 29773\\n"
session = SshSession(parse_hosts_file(text, "hosts.yaml", Defaults("u", sys.prefix + "/bin")))
async def looked_up():  # a name lookup, or a child watcher's waitpid, in a loop's thread
    await asyncio.get_running_loop().run_in_executor(None, sleeper)
session.call(looked_up())
"""


@pytest.mark.parametrize(
    "case",
    [_BESIDE, _SCRIPTS, _REPORT_HELPER, _UPLOADS, _SSH_LOOP],
    ids=["sweep-beside", "node-scripts", "report-helper", "s3-uploads", "ssh-loop"],
)
def test_a_stop_another_thread_takes_ends_the_main_thread_s_long_waits(case):
    """The sweep's wait for its work beside the first launch, run_scripts' wait for the
    scripts' output (dtrun exec, the checks), the wait for the report helper's answer, and for
    an upload's transfers, and the SSH session's loop (asleep until its next event): each
    untimed, each held a stop the kernel gave to the thread it waited on until that thread's
    30 s ended. They wake every 0.2 s: stopped within seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _MAIN_WAITS, case], env=env, capture_output=True, text=True,
        timeout=20, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (130, "stopped\n"), done.stderr
