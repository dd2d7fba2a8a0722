"""The sweep's SparkSession, as the driver (runner/engines/spark/driver.py) starts it: its
configuration, a local-cluster's own Spark home and lighter JVMs, and the wait for its executors;
at the end, where it records class data, the wait for its JVMs' own exit.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dtrun.engines.spark.cds import Archives, real_spark_home
from dtrun.engines.spark.failures import executor_wait_s
from dtrun.engines.spark.inventory import LOCAL_CLUSTER
from dtrun.engines.spark.shipping import SHIPPED, build_zip
from dtrun.execute.guard import TAG as LAUNCH_TAG

WORK = "work"  # Spark's: SPARK_HOME/work, a local-cluster's application directories
CHECK_EVERY_S = 5  # Spark's barrier slot check, retried this often up to the wait (below)
POLL_S = 0.05  # how often the driver looks for a local-cluster's executors while they start

# A local-cluster's JVMs (the driver's, with its master and workers, and each executor's) run
# on this machine beside the ranks, for a few seconds of Spark's own work a launch. Started
# with these, they spend less CPU on starting (docs/spark.md "How a launch runs"): C1 compiles
# only (Java's tiered compilation stops at level 1), one compiler thread, the serial collector
# (no parallel GC threads), no perf-data file; and Spark's classes mapped from an archive
# (runner/engines/spark/cds.py). On a real cluster the cluster's settings stand.
LIGHT_JVM = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC -XX:-UsePerfData"
# The JVMs' java.io.tmpdir, in the application's directory, which dtrun removes with it
# (runner/engines/spark/app.py): /tmp otherwise, where lz4-java leaves its native library
# (liblz4-java-*.so) and Spark a spark-* directory at every application (docs/spark.md).
JAVA_TMP = "java-tmp"
NO_PERF_DATA = "-XX:-UsePerfData"  # no /tmp/hsperfdata_<user> (the JVM's perf-data file)


def executors_python(config: dict[str, Any]) -> str:
    """The executors' Python: PYSPARK_PYTHON where set (Spark's own variable: a cluster whose
    executors run another Python), else the launch's, which is dtrun's."""
    return os.environ.get("PYSPARK_PYTHON") or str(config["python"])


def own_spark_home(app_dir: Path) -> Path:
    """A Spark home of this application's own, for a local-cluster: the real one's entries
    linked into APP_DIR/spark-home, and SPARK_HOME set to it. A local-cluster's workers write
    each application's directory (its executors' stdout and stderr) under SPARK_HOME/work,
    always: Spark starts them with no work directory, and a worker without one takes
    SPARK_HOME/work (Spark's LocalSparkCluster and Worker.createWorkDir; SPARK_WORKER_DIR and
    spark.worker.dir are read by standalone workers only). That is pyspark's own directory in
    site-packages: it grew with every sweep, and in an install the user cannot write to a
    worker cannot create it (createWorkDir then exits). Returns the work directory."""
    real = real_spark_home()
    home = app_dir / "spark-home"
    home.mkdir(exist_ok=True)
    for entry in real.iterdir():
        link = home / entry.name
        if entry.name == WORK:
            continue
        if link.is_symlink() and link.readlink() != entry:  # a kept home's, gone stale
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(entry)
    shutil.rmtree(home / WORK, ignore_errors=True)  # a killed application's, in a kept home
    (home / WORK).mkdir()
    os.environ["SPARK_HOME"] = str(home)
    return home / WORK


def local_home(chosen: Archives, app_dir: Path) -> tuple[Archives | None, Path]:
    """A local-cluster's class data and work directory: in the Spark home kept in the cache
    where ``chosen`` records (runner/engines/spark/cds.py), else in the application's own; the
    application's own and no class data where the kept one cannot be set right (a file where
    its work directory goes): the speed-up is lost, not the sweep."""
    if chosen.home is None:
        return chosen, own_spark_home(app_dir)
    try:
        return chosen, own_spark_home(chosen.home)
    except OSError:
        return None, own_spark_home(app_dir)


def session(
    master: str, config: dict[str, Any], app_dir: Path, archives: Archives | None = None
) -> Any:
    from pyspark.sql import SparkSession

    python = executors_python(config)
    os.environ["PYSPARK_PYTHON"] = python
    executor_env = {
        # dtrun's code as shipped (runner/engines/spark/shipping.py), in each executor's
        # working directory, where TorchDistributor's tasks and ranks run; then this
        # checkout's path, where executors see it (as before the zip)
        "PYTHONPATH": os.pathsep.join([SHIPPED, str(config["code_dir"])]),
        "PYSPARK_PYTHON": python,
    }
    if LAUNCH_TAG in os.environ:  # every process of the sweep's application carries its tag
        executor_env[LAUNCH_TAG] = os.environ[LAUNCH_TAG]
    builder = (
        SparkSession.builder.master(master)
        .appName(f"dtrun {config['run_id']}".strip())
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", "1")  # a failed rank fails the point, no retry
        .config("spark.stage.maxConsecutiveAttempts", "1")
        # Spark's check that the cluster has a slot per barrier task, retried every 5 s for the
        # executor wait (its default, 40 times every 15 s, let a launch wait 10 minutes)
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", f"{CHECK_EVERY_S}s")
        .config(
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures",
            str(max(1, executor_wait_s() // CHECK_EVERY_S)),
        )
        .config("spark.local.dir", str(app_dir / "spark-tmp"))
    )
    for key, value in executor_env.items():
        builder = builder.config(f"spark.executorEnv.{key}", value)
    for key, value in jvm_settings(master, archives).items():
        builder = builder.config(key, value)
    for key, value in temp_settings(master, app_dir).items():
        builder = builder.config(key, value)
    os.environ.update(driver_java_env(app_dir, os.environ))  # this process starts one driver
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import dtrun

    shipped = build_zip(Path(dtrun.__file__).resolve().parent, app_dir)
    spark.sparkContext.addPyFile(str(shipped))
    return spark


def jvm_settings(master: str, archives: Archives | None = None) -> dict[str, str]:
    """The lighter JVMs of a local-cluster (LIGHT_JVM, with ``archives``' class data where
    given); none for any other master."""
    if not local_executors(master):
        return {}
    chosen = archives or Archives(LIGHT_JVM, LIGHT_JVM)
    return {
        "spark.driver.extraJavaOptions": chosen.driver,
        "spark.executor.extraJavaOptions": chosen.executor,
    }


def java_tmp_option(app_dir: Path) -> str:
    """-Djava.io.tmpdir=APP_DIR/java-tmp (JAVA_TMP), made, quoted as Spark splits options (a
    shell's way)."""
    temp = app_dir / JAVA_TMP
    temp.mkdir(exist_ok=True)
    return shlex.quote(f"-Djava.io.tmpdir={temp}")


def temp_settings(master: str, app_dir: Path) -> dict[str, str]:
    """A local-cluster's executors' java.io.tmpdir (they run here, on dtrun's own cluster),
    through Spark's defaultJavaOptions, which its extraJavaOptions follow; a real cluster's
    executors keep their own."""
    if not local_executors(master):
        return {}
    return {"spark.executor.defaultJavaOptions": java_tmp_option(app_dir)}


def driver_java_env(app_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The driver's JVM (any master) and Spark's launcher JVM, through the environment that
    spark-submit reads before any Spark setting: java.io.tmpdir in the application's directory
    and no perf-data file (/tmp/hsperfdata_<user>). A user's own options (spark-defaults.conf,
    --conf, their own SPARK_SUBMIT_OPTS) come after ours on the JVM's command line, and win."""
    ours = {
        "SPARK_LAUNCHER_OPTS": NO_PERF_DATA,
        "SPARK_SUBMIT_OPTS": f"{java_tmp_option(app_dir)} {NO_PERF_DATA}",
    }
    return {name: f"{value} {env.get(name, '')}".strip() for name, value in ours.items()}


def local_executors(master: str) -> int:
    """How many executors a local-cluster master starts; 0 for any other master."""
    local = LOCAL_CLUSTER.fullmatch(master)
    return int(local.group(1)) if local else 0


def await_executors(spark: Any, count: int, wait_s: float) -> int:
    """Wait, up to ``wait_s``, until ``count`` executors have registered, so that the first
    launch's barrier stage is not refused for want of slots and then checked again only
    CHECK_EVERY_S later (a local-cluster's executor JVMs start after its session); how many
    there are."""
    deadline = time.monotonic() + wait_s
    while (found := registered_executors(spark)) < count and time.monotonic() < deadline:
        if found < 0:  # the session is stopping
            break
        time.sleep(POLL_S)
    return found


def registered_executors(spark: Any) -> int:
    """Executors registered with this application now (Spark lists the driver too)."""
    try:
        return max(0, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)
    except Exception:  # the context is stopping: no answer is not a count
        return -1


EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"  # an executor JVM's


def executors_exit(spark: Any, wait_s: float, stopped: Callable[[], bool]) -> bool:
    """Let a local-cluster's executors end on their own, before the application does, and wait
    up to ``wait_s`` for their JVMs to exit, unless ``stopped`` first; whether they all exited.
    Each writes its class data as it exits (cds.py), which Spark's own stop cut short under
    load: as the application ends, its worker SIGTERMs the executor, which is told to stop at
    the same moment, and SIGKILLs it 10 s later (Spark's ExecutorRunner.killProcess); writing
    60 MB took 8 s beside one busy process (2026-12-07). So: no executor to replace them (the
    master starts one for any that exits while the application runs), then Spark's StopExecutor
    to each (as its stop sends), with the worker left waiting for their exit."""
    import psutil

    def executor(process: psutil.Process) -> bool:
        with contextlib.suppress(psutil.Error):
            return EXECUTOR_MAIN in process.cmdline()
        return False

    try:
        executors = [p for p in psutil.Process().children(recursive=True) if executor(p)]
        context = spark.sparkContext._jsc.sc()
        jvm = spark.sparkContext._jvm
        context.requestTotalExecutors(0, 0, jvm.PythonUtils.toScalaMap(jvm.java.util.HashMap()))
        context.schedulerBackend().stopExecutors()
    except Exception:  # the context is stopping: Spark's stop ends them
        return False
    deadline = time.monotonic() + wait_s
    while executors and not stopped() and time.monotonic() < deadline:
        _, executors = psutil.wait_procs(executors, timeout=POLL_S)
    return not executors


def jvm_exited(wait_s: float, stopped: Callable[[], bool]) -> bool:
    """End the driver's JVM (pyspark's gateway: it exits at the end of its stdin) and wait up
    to ``wait_s`` for it, unless ``stopped`` first; whether it exited, unstopped."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None or stopped():
        return False
    with contextlib.suppress(OSError):
        proc.stdin.close()
    deadline = time.monotonic() + wait_s
    while not stopped() and time.monotonic() < deadline:
        try:
            proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        return not stopped()
    return False
