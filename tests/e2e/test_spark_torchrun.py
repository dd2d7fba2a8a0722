"""TorchDistributor's torchrun as each Spark task runs it (runner/engines/spark/distributor.py),
here without Spark: the task's work is ``run_torchrun``, a real torchrun (standalone, one rank)
running a module. Its exit code is the task's, which pyspark's wrapper dropped, and it ends with
its rank when the task's Python worker is killed, which the wrapper's parent watch did."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dtrun.engines.spark.distributor import torchrun_code
from dtrun.engines.spark.task import CODE, LOG_DIR, run_torchrun
from tests.paths import REPO

# A rank that says it started, then does what its first argument says.
RANK = """\
import os, sys, time
from pathlib import Path
Path(sys.argv[2]).write_text(str(os.getpid()))
print("rank started", flush=True)
if sys.argv[1] == "sleep":
    time.sleep(600)
sys.exit(int(sys.argv[1]))
"""


def _params() -> dict[str, object]:
    """TorchDistributor's input_params for one local process, with dtrun's torchrun code and
    its log directory in the working directory (rank_module's), not a /tmp/torchelastic_*."""
    return {"local_mode": True, "num_processes": 1, CODE: torchrun_code(), LOG_DIR: "torchelastic"}


@pytest.fixture()
def rank_module(tmp_path, monkeypatch):
    (tmp_path / "fake_rank.py").write_text(RANK)
    path = os.pathsep.join([str(tmp_path), str(REPO)])
    monkeypatch.setenv("PYTHONPATH", path)  # torchrun's rank finds the module, and dtrun
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)  # torchrun's, and its log directory's (_params)
    return tmp_path


def test_a_rank_that_exits_0_is_a_task_done_and_its_output_is_streamed(rank_module, capfd):
    run_torchrun(_params(), "fake_rank", "0", str(rank_module / "pid"))
    assert "rank started" in capfd.readouterr().out


def test_a_failed_rank_fails_the_task_with_torchrun_s_exit_code(rank_module):
    """pyspark's torch_run_process_wrapper exits 0 whatever torchrun did (pyspark 4.3.0)."""
    with pytest.raises(RuntimeError, match="failed with return code 1") as failed:
        run_torchrun(_params(), "fake_rank", "3", str(rank_module / "pid"))
    assert "rank started" in str(failed.value)  # the output's tail, as TorchDistributor says it


def test_torchrun_and_its_rank_end_when_the_task_s_python_worker_is_killed(rank_module):
    pid_file = rank_module / "pid"
    task = subprocess.Popen(  # the Spark task's Python worker, calling run_torchrun
        [
            sys.executable, "-c",
            "import sys; from dtrun.engines.spark.task import run_torchrun; "
            "from tests.e2e.test_spark_torchrun import _params; "
            "run_torchrun(_params(), 'fake_rank', 'sleep', sys.argv[1])",
            str(pid_file),
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert task.poll() is None and time.monotonic() < deadline, "the rank never started"
            time.sleep(0.2)
        started = [*psutil.Process(task.pid).children(), psutil.Process(int(pid_file.read_text()))]
        torchrun, rank = started
        assert rank.ppid() == torchrun.pid  # the rank is torchrun's, and torchrun the task's
        task.send_signal(signal.SIGKILL)
        task.wait()
        _, alive = psutil.wait_procs(started, timeout=60)
        assert not alive, f"left running after its task was killed: {alive}"
    finally:
        task.kill()
        task.wait()
        for proc in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def _pid_task(rows):
    """A task that, like TorchDistributor's, never reads its input: its Python worker's pid."""
    import os

    import pyarrow as pa  # type: ignore[import-untyped]

    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]})


def test_a_task_reading_its_input_first_keeps_its_python_worker_from_launch_to_launch(
    monkeypatch,
):
    """Spark reuses a Python worker only once its task has read all its input: each launch
    under TorchDistributor's own task forked new ones, which imported pandas, pyarrow and
    pyspark.ml again."""
    from pyspark.sql import SparkSession

    from dtrun.engines.spark.task import read_input_first

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the executors' Python: this one
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.ui.enabled", "false")
        .config("spark.executorEnv.PYTHONPATH", str(REPO))
        .getOrCreate()
    )
    try:

        def workers(task) -> set[int]:
            rows = spark.range(0, 2, 1, 2).mapInArrow(task, "pid long", barrier=True).collect()
            return {row.pid for row in rows}

        unread = [workers(_pid_task) for _ in range(2)]
        assert not unread[0] & unread[1]  # new workers for every stage
        read = [workers(read_input_first(_pid_task)) for _ in range(3)]
        assert read[1] == read[2] and len(read[1]) == 2  # the same two, stage after stage
    finally:
        spark.stop()
