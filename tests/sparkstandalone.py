"""A real standalone Spark cluster on loopback: a master on 127.0.0.40:7177 and two workers on
127.0.0.41 and 127.0.0.42, one core and 1 GiB each, started with pyspark's own `spark-class`
(org.apache.spark.deploy.master.Master / worker.Worker), as a site's Spark runs them. Executors
are children of the workers, not of the driver: the case a local-cluster does not show."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from dtrun.engines.spark.session import LIGHT_JVM
from tests.paths import require_e2e

MASTER = ("127.0.0.40", 7177)
WORKERS = ("127.0.0.41", "127.0.0.42")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class StandaloneSpark:
    root: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{MASTER[0]}:{MASTER[1]}"

    def workers_registered(self) -> int:
        return sum(
            "Successfully registered with master" in log.read_text(errors="replace")
            for log in self.root.glob("worker-*.log")
        )

    def close(self) -> None:
        for proc in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def worker_pid(self, worker: int) -> int:
        """The JVM of worker ``worker`` (spark-class execs it: the process started)."""
        import psutil

        pid = self.processes[1 + worker].pid
        line = " ".join(psutil.Process(pid).cmdline())
        if "deploy.worker.Worker" not in line or f"--host {WORKERS[worker]}" not in line:
            raise RuntimeError(f"process {pid} is not worker {worker}'s JVM: {line[:200]}")
        return pid


def executor_pids(worker: int) -> list[int]:
    """The executor JVMs worker ``worker`` started (its children, in its work directory): in
    this process's network namespace only, where the worker lives (--worker-netns). Another
    test session's cluster on the same addresses, in a namespace of its own, is not this one's:
    a test that kills what it finds would kill that session's executor too."""
    import psutil

    here = Path("/proc/self/ns/net").readlink()
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info.get("cmdline") or [])
        if "CoarseGrainedExecutorBackend" in line and f"--hostname {WORKERS[worker]}" in line:
            with contextlib.suppress(OSError):  # it ended meanwhile
                if Path(f"/proc/{proc.pid}/ns/net").readlink() == here:
                    found.append(proc.pid)
    return found


def start(root: Path, memory: str = "1g", *, bare: bool = False, cores: int = 1) -> StandaloneSpark:
    """``memory``: what each worker offers its executors (an executor asks for 1g); ``bare``:
    the daemons get no PYTHONPATH (this checkout's dtrun), as on a cluster without dtrun;
    ``cores``: each worker's (an executor takes them all, Spark's standalone default)."""
    require_e2e("a Spark cluster")
    with socket.socket() as probe:
        if probe.connect_ex(MASTER) == 0:
            raise RuntimeError(f"{MASTER[0]}:{MASTER[1]} is taken: a Spark master still runs")
    home = _spark_home()
    spark_class = str(home / "bin" / "spark-class")
    # The daemons themselves (not the executors they start) on the lighter JVM settings a
    # local-cluster's JVMs get (runner/engines/spark/session.py, LIGHT_JVM), through Spark's
    # own variable for them: a master and two workers up in 3.6 s on 6.8 CPU-s, not 7.8 s on
    # 14.3 (2 cores, 2026-12-06). Sites tune their daemons too; what the tests check is the
    # executors' and the driver's.
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_DAEMON_JAVA_OPTS": LIGHT_JVM}
    if bare:
        env.pop("PYTHONPATH", None)
    cluster = StandaloneSpark(root)

    def daemon(name: str, args: list[str], extra: dict[str, str]) -> None:
        with (root / f"{name}.log").open("wb") as out:
            cluster.processes.append(
                subprocess.Popen(
                    [spark_class, *args],
                    env={**env, **extra},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    daemon(
        "master",
        ["org.apache.spark.deploy.master.Master", "--host", MASTER[0], "--port", str(MASTER[1]),
         "--webui-port", "0"],
        {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
    )  # fmt: skip
    for i, host in enumerate(WORKERS):
        work = root / f"work-{i}"
        work.mkdir(exist_ok=True)
        daemon(
            f"worker-{i}",
            ["org.apache.spark.deploy.worker.Worker", cluster.url, "--host", host,
             "--cores", str(cores), "--memory", memory, "--webui-port", "0",
             "--work-dir", str(work)],
            {"SPARK_LOCAL_IP": host},
        )  # fmt: skip
    deadline = time.monotonic() + 90
    while cluster.workers_registered() < len(WORKERS):
        if time.monotonic() > deadline or any(p.poll() is not None for p in cluster.processes):
            cluster.close()
            said = "".join(p.read_text()[-400:] for p in root.glob("*.log"))
            raise RuntimeError(f"the standalone Spark cluster did not start: {said}")
        time.sleep(0.5)
    return cluster
