"""A local-cluster's JVMs on real Spark map the class data the first application recorded
(runner/engines/spark/cds.py): the second sweep's driver and executor load Spark's classes from
the archives, as each JVM's own class-loading log says."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_dtrun

pytestmark = pytest.mark.e2e

QUICK = ("--steps", "4", "--warmup", "1", "--repeat", "1", "--no-health-gate", "--no-busbw",
         "--quiet")  # fmt: skip
MAPPED = "source: shared objects file (top)"  # a class from the dynamic archive, not a jar


def _sweep(workdir: Path, run_id: str, env: dict[str, str]) -> None:
    done = run_dtrun(
        "bench", "--spark", "local-cluster[1,1,1024]", "--launcher", "torchdistributor",
        "--nodes", "1", *QUICK, "--output", str(workdir / "runs"), "--run-id", run_id,
        cwd=workdir, timeout=400, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_second_local_cluster_maps_the_class_data_the_first_recorded(no_leftovers):
    if shutil.which("java") is None:  # ./dev test installs it: missing is a broken setup
        pytest.fail("Spark needs Java: run ./dev setup (apt-get install default-jre-headless)")
    cache = no_leftovers / "cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    _sweep(no_leftovers, "records", env)
    # the executor ended on its own, told to stop, and had the driver's wait to write its
    # archive: Spark's stop SIGTERMs it and SIGKILLs it 10 s later, and under load the cache
    # once held driver.jsa alone (ExecutorRunner.killProcess; session.py executors_exit)
    (log,) = (no_leftovers / "runs" / "records").glob("n1/r0/spark-work/app-*/0/stderr")
    assert "Driver commanded a shutdown" in log.read_text()
    assert "RECEIVED SIGNAL TERM" not in log.read_text()
    (home,) = (cache / "dtrun" / "spark-cds").iterdir()
    assert sorted(p.name for p in home.glob("*.jsa")) == ["driver.jsa", "executor.jsa"]
    assert not list(home.glob("recording-*"))
    assert not list((home / "spark-home" / "work").iterdir())  # the logs went to the run
    logs = no_leftovers / "classes"
    logs.mkdir()
    # every JVM of the second sweep (Spark's launcher too) writes where its classes came from
    traced = {**env, "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={logs}/%p.log"}
    _sweep(no_leftovers, "maps", traced)
    mapped = [log for log in logs.iterdir() if log.read_text().count(MAPPED) > 1000]
    assert len(mapped) == 2, sorted(log.name for log in logs.iterdir())  # driver, executor
