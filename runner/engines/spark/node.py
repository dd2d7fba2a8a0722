"""What runs inside each Spark task: the node's rendered script, logged and accounted for.

TorchDistributor's torchrun runs this module as every rank's process on the executors
(``python -m dtrun.engines.spark.node LAUNCH_DIR NAME...``, runner/engines/spark/distributor.py);
horovod.spark calls ``node_main`` there. It runs ``node-<NODE_RANK>.sh`` from the launch
directory, which the driver and the executors share (local-cluster: this machine; a real
cluster: shared storage), writes every line to ``<node>.log`` there and prints it tagged
``dtrun-node R:`` (TorchDistributor streams task output to the driver), records the exit code
in ``<node>.exit`` (none when it stopped the script: a stopped node has no exit of its own),
and fails the task when the script does, so Spark fails the job at once and names the
partition. A log the disk cannot hold stops the node, which says so (``CUT``) for dtrun to
stop the launch. Under horovod.spark those lines go to the driver's ``Relay``.

The script runs in a process group of its own, which ``node_main`` stops (SIGTERM, then
SIGKILL) when it is stopped itself or when its parent, the Spark-started process, goes away,
and which a guard process ends when ``node_main`` is killed outright: a cancelled Spark job
leaves no rank behind.

Where dtrun came to the executor in the zip the driver ships (runner/engines/spark/shipping.py),
the script's PYTHONPATH names that zip, so the workloads it runs import dtrun from it too.

Under TorchDistributor a Python program runs in the rank's own process instead, with no second
Python start (runner/engines/spark/inprocess.py).

Standard library and dtrun.execute.guard, dtrun.workloads.files, dtrun.workloads.hosted and
dtrun.engines.spark.shipping and .inprocess only: this module is imported on the executors.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast
from urllib.parse import parse_qs, urlsplit

from dtrun.engines.spark.inprocess import program_of, run_here, runs_here, stop_with_parent
from dtrun.engines.spark.shipping import shipped_root
from dtrun.execute.guard import start_guard
from dtrun.workloads.files import NodeLog, write_atomic

EXIT_SUFFIX = ".exit"
HOST_SUFFIX = ".host"  # the executor's host, written as the task starts
TAG = "dtrun-node"
# `dtrun-log-cut R[.L]: ERRNO WHY`: node R's log (its rank L's, past the first) could not be
# written, so it stopped (node_main)
CUT = "dtrun-log-cut"
GRACE_S = 5.0


def contract_from_horovod(env: dict[str, str], master_port: int) -> dict[str, str]:
    """The environment contract under horovod.spark, which sets Horovod's variables only
    (docs/launchers.md "The environment each process sees"). One process per Spark task, one
    task per node: the node is the rank. Horovod's own local and cross ranks group processes by
    host name, which every executor of a local-cluster shares. The torch bookkeeping group
    meets on Horovod's rendezvous host."""
    mapped = {
        "RANK": env["HOROVOD_RANK"],
        "WORLD_SIZE": env["HOROVOD_SIZE"],
        "NODE_RANK": env["HOROVOD_RANK"],
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }
    mapped["MASTER_ADDR"] = env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")
    mapped["MASTER_PORT"] = str(master_port)
    return {**env, **mapped}


def executor_address(env: dict[str, str]) -> str | None:
    """The executor's host, as Spark gives it to its processes: SPARK_LOCAL_IP where the worker
    set one, else the host of the executor's log URL (standalone and YARN set it)."""
    if env.get("SPARK_LOCAL_IP"):
        return env["SPARK_LOCAL_IP"]
    host = urlsplit(env.get("SPARK_LOG_URL_STDERR", "")).hostname
    return host or None


def executor_id(env: dict[str, str]) -> str | None:
    """The executor's id, where its log URL gives it (a standalone worker's does:
    `.../logPage/?appId=...&executorId=0&logType=stderr`)."""
    ids = parse_qs(urlsplit(env.get("SPARK_LOG_URL_STDERR", "")).query).get("executorId")
    return ids[0] if ids else None


def node_main(
    launch_dir: str,
    names: list[str],
    horovod_port: int | None = None,
    relay: tuple[str, int, str] | None = None,
) -> int:
    """Run this rank's node script; its exit code, or SystemExit with it when it failed.
    ``relay``: where its lines go under horovod.spark (``Relay``)."""
    env = dict(os.environ)
    if horovod_port is not None:
        env = contract_from_horovod(env, horovod_port)
    address = executor_address(env)
    node_rank = int(env["NODE_RANK"])
    name = names[node_rank]
    if address is not None:  # recorded as the node's address (templates/launch/base.sh.j2)
        env["DTRUN_EXECUTOR_ADDR"] = address
        # and where dtrun reads it if this task ends with no result: the host of an executor
        # Spark loses is how dtrun knows which node was lost (runner/engines/spark/executor.py)
        executor = executor_id(env) or ""
        with contextlib.suppress(OSError):  # a failed write only loses that clue
            where = Path(launch_dir) / f"{name}{HOST_SUFFIX}"
            write_atomic(where, f"{address} {executor}".strip().encode() + b"\n")
    shipped = shipped_root(__file__)
    if shipped is not None:  # the script runs where the executor's working directory is not
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [shipped, env.get("PYTHONPATH")]))
    local_rank = int(env.get("LOCAL_RANK", "0"))
    stem = name if local_rank == 0 else f"{name}.{local_rank}"
    where = Path(launch_dir)
    script = where / f"node-{node_rank}.sh"
    # TorchDistributor's rank is a Python of its own: a Python program runs in it
    # (runner/engines/spark/inprocess.py); horovod.spark's ranks run the script
    program = program_of(script, env) if horovod_port is None else None
    stops: list[Callable[[], object]] = []  # how this node stops, once it runs
    # this process's own output (the program's, when it runs here, goes through a pipe)
    with _output(relay) as out:

        def cut(error: OSError) -> None:
            """The log the disk cannot hold (NodeLog) stops the node, and dtrun hears why
            (runner/engines/spark/executor.py): every other node stops with the launch."""
            with contextlib.suppress(OSError, ValueError):
                who = node_rank if local_rank == 0 else f"{node_rank}.{local_rank}"  # its log
                out.write(f"{CUT} {who}: {error.errno} {error.strerror}\n".encode())
                out.flush()
            for stop in stops:
                stop()

        with NodeLog(where / f"{stem}.log", on_error=cut) as log:
            if program is not None and runs_here(*program):

                def write(raw: bytes) -> None:
                    log.write(raw)
                    line = raw.decode(errors="replace").rstrip("\n")
                    with contextlib.suppress(OSError, ValueError):  # a late line of a left child
                        out.write(f"{TAG} {node_rank}: {line}\n".encode())
                        out.flush()

                # the program has no process of its own: this one ends, as run_here's does
                stops.append(lambda: os.kill(os.getpid(), signal.SIGTERM))
                code, stopped = run_here(*program, where, write), False
            else:
                code, stopped = _run(script, env, log, node_rank, stops, out)
    if not stopped:  # a script node_main stopped did not end by itself: no exit to record
        write_atomic(where / f"{stem}{EXIT_SUFFIX}", f"{code}\n".encode())
    if code != 0:
        sys.exit(code)
    return code


def _run(
    script: Path,
    env: dict[str, str],
    log: Any,
    node_rank: int,
    stops: list[Callable[[], object]],
    out: BinaryIO,
) -> tuple[int, bool]:
    """The script's exit code, and whether node_main stopped it (a signal, its parent gone, its
    log cut: ``stops`` gets the stop)."""
    proc = subprocess.Popen(
        ["bash", str(script)],
        cwd=script.parent,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    guard = start_guard(["sh", "-c", END_GROUP, "dtrun-node-stop", str(proc.pid)])
    once = threading.Lock()
    stopping = threading.Event()

    def stop(*_: object) -> None:
        if not once.acquire(blocking=False):  # the signal, the kernel's and the watch's: once
            return
        stopping.set()
        for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 0.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            deadline = time.monotonic() + wait
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, stop)
    stop_with_parent(stop)
    stops.append(stop)
    assert proc.stdout is not None
    pump = threading.Thread(
        target=_pump, args=(proc.stdout, log, node_rank, out), name="dtrun-node-output", daemon=True
    )
    pump.start()
    code = _wait(proc)
    assert guard.stdin is not None
    guard.stdin.close()  # what the script left running in its group ends with it
    pump.join()
    if stopping.is_set():
        return (128 + signal.SIGTERM if code < 0 else code), True
    return code, False


def _pump(output: Any, log: Any, node_rank: int, out: BinaryIO) -> None:
    for raw in output:
        log.write(raw)  # a full disk stops the log, not the node's output
        line = raw.decode(errors="replace").rstrip("\n")
        with contextlib.suppress(OSError, ValueError):  # the driver gone: the log has it
            out.write(f"{TAG} {node_rank}: {line}\n".encode())
            out.flush()


def _output(relay: tuple[str, int, str] | None) -> BinaryIO:
    """Where node_main's lines go: the driver's Relay, its token first, or this process's own
    output (also where a relay that cannot be reached leaves them: the executor's log)."""
    if relay is not None:
        host, port, token = relay
        with contextlib.suppress(OSError):
            sent = socket.create_connection((host, port), timeout=30).makefile("wb")
            sent.write(f"{token}\n".encode())
            sent.flush()  # now, not with the first line: the Relay waits token_wait_s for it
            return sent
    return os.fdopen(os.dup(1), "wb", buffering=0)


class Relay(socketserver.ThreadingTCPServer):
    """Where horovod.spark's nodes send their lines, which the driver prints as
    TorchDistributor streams them (runner/engines/spark/driver.py). Horovod's own forwarding
    of a task's output does not do: its client reads that stream 64 KiB at a time
    (codecs.StreamReader.read(65536) in horovod/runner/common/util/network.py), so a node's
    lines came late or never, and its cut log's line after the launch had failed."""

    daemon_threads = True
    # A node sends the token as it connects; a connection that does not is let go, not kept
    # with a thread of the driver's until the launch ends
    token_wait_s = 10.0

    def __init__(self, host: str, out: TextIO, bind: str | None = None) -> None:
        """Listening at ``bind`` (``host`` by default), reached at ``host``."""
        # Anyone who reaches the driver's host can connect: only a connection whose first line
        # is this launch's token, which the nodes get with node_main's arguments (Spark's own
        # channel), is heard; another's lines, a made-up cut line among them, are not printed.
        self.out, self.lock, self.token = out, threading.Lock(), secrets.token_hex(16)
        self.host = host
        super().__init__((host if bind is None else bind, 0), _RelayLines)
        threading.Thread(target=self.serve_forever, name="dtrun-relay", daemon=True).start()

    @classmethod
    def of_driver(cls, conf: Any, out: TextIO) -> Relay:
        """The Relay of a driver whose Spark configuration is ``conf``: listening where Spark's
        own RPC does (``spark.driver.bindAddress``, which a driver in a container or behind
        NAT sets apart), reached where the executors reach the driver (``spark.driver.host``)."""
        host = conf.get("spark.driver.host", "127.0.0.1")
        return cls(host, out, conf.get("spark.driver.bindAddress", host))

    @property
    def address(self) -> tuple[str, int, str]:
        """Where the nodes reach it, and its token (node_main's ``relay``)."""
        return self.host, int(self.server_address[1]), self.token

    def __exit__(self, *_: object) -> None:
        self.shutdown()
        self.server_close()


class _RelayLines(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        relay = cast(Relay, self.server)
        self.connection.settimeout(relay.token_wait_s)
        try:
            said = self.rfile.readline(len(relay.token) + 2).rstrip(b"\n")
        except OSError:  # the token late, or the connection gone
            return
        if not hmac.compare_digest(said, relay.token.encode()):
            return  # not a node of this launch
        self.connection.settimeout(None)  # a node may print nothing for hours
        # a node's executor lost resets its connection: its lines up to then are printed, and
        # the failure is the launch's to name (runner/engines/spark/executor.py), not a traceback
        with contextlib.suppress(OSError):
            for raw in self.rfile:
                with relay.lock:
                    relay.out.write(raw.decode(errors="replace").rstrip("\n") + "\n")
                    relay.out.flush()


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """The script's exit code. The main thread waits in short sleeps, not in a read of the
    script's output: the kernel hands a process's signal to any thread that does not block it,
    and Python runs the handler in the main thread only when that thread next runs Python code,
    which a read blocked until the script prints never does."""
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=0.2)


# Run by the guard (runner/execute/guard.py) as `sh -c END_GROUP dtrun-node-stop PGID` once
# node_main ends, however it ends (a SIGKILL from torchrun's escalation or from Spark's kill of
# its Python worker runs no code of node_main's): the script's process group gets SIGTERM, then
# SIGKILL after GRACE_S. The guard is in a session of its own: a stop of node_main's own group
# (torchrun ends its ranks with killpg) does not reach it.
END_GROUP = (
    'kill -TERM "-$1" 2>/dev/null || exit 0; i=0; '
    f'while [ "$i" -lt {int(GRACE_S * 10)} ]; do kill -0 "-$1" 2>/dev/null || exit 0; '
    'sleep 0.1; i=$((i + 1)); done; kill -KILL "-$1" 2>/dev/null; exit 0'
)


if __name__ == "__main__":  # a TorchDistributor rank (runner/engines/spark/distributor.py)
    sys.exit(node_main(sys.argv[1], sys.argv[2:]))
