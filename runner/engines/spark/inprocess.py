"""A node's Python program, run inside the Spark rank's own process: no second Python start.

TorchDistributor's rank is a Python process already (its torchrun starts it to call
``node_main``). Starting the node's script from there started a second Python, which imported
torch again: about a second a launch on the development machine. So ``node_main`` runs the
script once with ``DTRUN_NODE_PROGRAM`` set, and the script (templates/launch/spark-node.sh.j2)
writes, instead of running it, the program's arguments and the environment it built. A program
of the form ``PYTHON -m MODULE ...`` or ``PYTHON FILE.py ...``, with PYTHON this process's own
interpreter and no step hook (which Python loads at its start), then runs here: in the script's
directory and environment, with its own ``sys.argv`` and path, its output logged and tagged as
the script's was. Any other program runs as a script, as before.

The rank leaves without interpreter finalisation once its host (TorchDistributor's script) is
done, as every workload does on its own (runner/workloads/result.py ``exit_now``): torch's
teardown under gloo sometimes aborts after the work is done.

Standard library and dtrun.workloads.hosted only: this module is imported on the executors.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dtrun.workloads.hosted import host

PROGRAM_ENV = "DTRUN_NODE_PROGRAM"  # where the script writes the program: PATH.argv, PATH.env
STEP_HOOK_ENV = "DTRUN_STEP_HOOK"  # the step hook loads at Python's start: not in-process


def program_of(script: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """The program the node's script would run and the environment it would run it in; None
    for a script that does not say its program (not rendered by dtrun: it runs as it is), or
    that failed to."""
    try:
        if PROGRAM_ENV not in script.read_text(errors="replace"):
            return None
    except OSError:
        return None
    with _exit_on_stop(), tempfile.TemporaryDirectory(prefix="dtrun-node-") as tmp:
        stem = Path(tmp) / "program"
        done = subprocess.run(
            ["bash", str(script)],
            cwd=script.parent,
            env={**env, PROGRAM_ENV: str(stem)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        argv_file, env_file = stem.with_suffix(".argv"), stem.with_suffix(".env")
        if done.returncode != 0 or not argv_file.exists() or not env_file.exists():
            return None
        argv = argv_file.read_bytes().decode().split("\0")[:-1]
        pairs = (item.partition("=") for item in env_file.read_bytes().decode().split("\0"))
        program_env = {key: value for key, _, value in pairs if key and key != PROGRAM_ENV}
    return argv, program_env


@contextlib.contextmanager
def _exit_on_stop() -> Any:
    """SIGTERM or SIGHUP in the block (a launch stopped while the script says its program):
    SystemExit(128 + N), so that the script is killed and the temporary directory removed on the
    way out. A signal's default action runs no clean-up: such a stop left a $TMPDIR/dtrun-node-*
    behind, and the script running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stopped(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    saved = {sig: signal.signal(sig, stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def runs_here(argv: list[str], env: dict[str, str]) -> bool:
    """Whether the program is a Python module or file this interpreter can run itself."""
    if len(argv) < 2 or env.get(STEP_HOOK_ENV) or not _same_python(argv[0]):
        return False
    if argv[1] == "-m":
        return len(argv) >= 3 and not argv[2].startswith("-")
    return not argv[1].startswith("-")


def _same_python(path: str) -> bool:
    with contextlib.suppress(OSError):
        return Path(path).resolve() == Path(sys.executable).resolve()
    return False


Sink = Callable[[bytes], None]


def run_here(argv: list[str], env: dict[str, str], where: Path, write: Sink) -> int:
    """Run the program in this process (module docstring); its exit code. ``write`` gets its
    output, line by line as it comes."""
    os.environ.clear()
    os.environ.update(env)  # before the program imports torch: OMP_NUM_THREADS and the rest
    os.chdir(where)
    inherited = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    first = str(where) if argv[1] == "-m" else str((where / argv[1]).parent)
    sys.path[:] = [first, *inherited, *(p for p in sys.path[1:] if p not in inherited)]
    host()  # the workload's exit_now raises SystemExit: this process leaves as below
    # the program has no process of its own for node_main to stop: this one ends
    stop_with_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))
    hook, code = sys.excepthook, 0

    def failed(*exc: Any) -> None:  # the host's own failure, after the program: exit 1
        nonlocal code
        code = code or 1
        hook(*exc)

    sys.excepthook = failed
    with _output_to(write):
        code = _run(argv)
    atexit.register(lambda: _leave(code))  # after the host's work: its output file, its exit
    return code


def _run(argv: list[str]) -> int:
    try:
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv[1:]
            runpy.run_path(argv[1], run_name="__main__")
    except SystemExit as ended:
        return _exit_code(ended.code)
    except BaseException:  # as Python prints an uncaught exception and exits 1
        traceback.print_exc()
        return 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _output_to(write: Sink) -> Any:
    """File descriptors 1 and 2 into a pipe whose lines go to ``write``, for the block."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    read, into = os.pipe()
    os.dup2(into, 1)
    os.dup2(into, 2)
    os.close(into)
    pump = threading.Thread(target=_pump, args=(read, write), name="dtrun-node-output", daemon=True)
    pump.start()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved[0], 1)  # the pipe's last writer closes: the pump reads its end
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        pump.join(timeout=5)  # a child the program left holding the pipe keeps it open


def _pump(read: int, write: Sink) -> None:
    with os.fdopen(read, "rb") as lines:
        for raw in lines:
            write(raw)


def stop_with_parent(stop: Callable[[], object]) -> None:
    """Call ``stop`` when the process that started this one goes (a cancelled Spark task's
    worker is killed, or torchrun is stopped): its children would live on, orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        stop()

    threading.Thread(target=watch, name="dtrun-parent-watch", daemon=True).start()


def _leave(code: int) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
