"""dtrun on a real Spark (pyspark's local-cluster: a master, workers and two executor JVMs on
this machine, each a node): a 1,2-node sweep with each Spark launcher, a failing node, SIGTERM,
and refused requests. Spark needs Java (./dev test installs default-jre-headless)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    DTRUN,
    default_signals,
    ends_within,
    launch_processes,
    run_dtrun,
    wait_for,
)
from tests.paths import TESTS

pytestmark = pytest.mark.e2e

MASTER = "local-cluster[2,1,1024]"
QUICK = ("--steps", "6", "--warmup", "2", "--repeat", "1", "--no-health-gate", "--quiet")


@pytest.fixture(autouse=True)
def _java() -> None:
    if shutil.which("java") is None:  # ./dev test installs it: missing is a broken setup
        pytest.fail("Spark needs Java: run ./dev setup (apt-get install default-jre-headless)")


def _results(run: Path, nodes: int) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((run / f"n{nodes}" / "r0" / "result.json").read_text())
    return result


@pytest.mark.parametrize(
    ("launcher", "engine"), [("torchdistributor", "ddp"), ("horovod-spark", "horovod")]
)
def test_a_sweep_runs_on_spark_executors_with_each_spark_launcher(no_leftovers, launcher, engine):
    out = no_leftovers / "runs"
    before = _pyspark_work()
    done = run_dtrun(
        "bench", "--spark", MASTER, "--launcher", launcher, "--nodes", "1,2", *QUICK,
        "--output", str(out), "--run-id", "sp", cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = out / "sp"
    result = _results(run, 2)
    assert result["engine"] == engine
    assert [rank["node"] for rank in result["ranks"]] == ["spark-0", "spark-1"]
    assert result["communication"]["ok"] is True
    assert _results(run, 1)["world_size"] == 1
    for node in ("spark-0", "spark-1"):  # node_main's own log and exit code, per node
        assert (run / "n2" / "r0" / f"{node}.exit").read_text().strip() == "0"
        assert "dtrun" in (run / "n2" / "r0" / f"{node}.log").read_text() or node != "spark-0"
    # one Spark application for the sweep: started for its first launch, and used by the next
    first, second = (run / n / "r0" / "spark-driver.log" for n in ("n1", "n2"))
    assert "Spark is up" in first.read_text() and "Spark is up" not in second.read_text()
    assert len({_application(first), _application(second)}) == 1
    assert (run / "report.md").exists()
    # the executors' logs are the run's (runner/engines/spark/driver.py, own_spark_home): in
    # the launch that started the application, and nothing new in pyspark's own directory
    kept = run / "n1" / "r0" / "spark-work" / _application(first)
    assert sorted(p.name for p in kept.iterdir()) == ["0", "1"]
    assert all((kept / e / "stderr").is_file() for e in ("0", "1"))
    assert _pyspark_work() == before
    if launcher == "torchdistributor":  # the tasks agree with no barrier sync (distributor.py)
        logs = "".join((kept / e / "stderr").read_text() for e in ("0", "1"))
        assert "Executor: Running task" in logs  # Spark's INFO lines are there
        assert "entered the global sync" not in logs


def _pyspark_work() -> set[str]:
    """The application directories under pyspark's own SPARK_HOME/work."""
    import pyspark

    work = Path(pyspark.__file__).parent / "work"
    return {p.name for p in work.iterdir()} if work.is_dir() else set()


def _application(driver_log: Path) -> str:
    """The Spark application the launch ran on, as its driver log names it."""
    found = re.search(r"on Spark application (\S+):", driver_log.read_text())
    assert found is not None, driver_log.read_text()
    return found.group(1)


FAIL_ON_NODE_1 = """\
import os, sys, time
if os.environ["NODE_RANK"] == "1":
    print("node 1 gives up", flush=True)
    sys.exit(3)
time.sleep(600)
"""


def test_a_failed_task_fails_the_point_and_names_the_node(no_leftovers):
    script = no_leftovers / "fail.py"
    script.write_text(FAIL_ON_NODE_1)
    done = run_dtrun(
        "run", "--spark", MASTER, "--launcher", "torchdistributor", "--nodes", "2",
        "--output", str(no_leftovers / "runs"), "--run-id", "f", "--", "python", str(script),
        cwd=no_leftovers, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "spark-1 (127.0.0.1) failed with exit code 3" in done.stderr
    assert "node 1 gives up" in (no_leftovers / "runs" / "f" / "launch" / "spark-1.log").read_text()
    record = json.loads((no_leftovers / "runs" / "f" / "run.json").read_text())
    assert record["status"] == "failed"


def test_sigterm_stops_the_driver_the_executors_and_every_rank(no_leftovers):
    script = no_leftovers / "sleep.py"
    script.write_text("import time; print('sleeping', flush=True); time.sleep(600)\n")
    runs = no_leftovers / "runs"
    with (no_leftovers / "dtrun.out").open("w+") as out:
        dtrun = subprocess.Popen(
            [*DTRUN, "run", "--spark", MASTER, "--launcher", "torchdistributor", "--nodes", "2",
             "--output", str(no_leftovers / "runs"), "--", "python", str(script)],
            cwd=no_leftovers, stdout=out, stderr=subprocess.STDOUT, preexec_fn=default_signals,
        )  # fmt: skip
        # the program runs inside each rank's process (runner/engines/spark/inprocess.py): it
        # has no command line of its own, so its logs say it started
        wait_for(
            lambda: sum(b"sleeping" in log.read_bytes() for log in runs.rglob("spark-*.log")) >= 2,
            timeout=180,
            what="both nodes' programs to start",
        )
        dtrun.send_signal(signal.SIGTERM)
        assert ends_within(dtrun, 90, out) == 143
        out.seek(0)
        said = out.read()
    assert "stopped by SIGTERM" in said, said
    assert "Traceback" not in said and "py4j" not in said.lower(), said
    wait_for(lambda: launch_processes() == [], timeout=30, what="no process of the launch")
    record = json.loads(next((no_leftovers / "runs").iterdir()).joinpath("run.json").read_text())
    assert record["status"] == "interrupted"
    # each node's state, not none: both were running, so both were stopped
    assert [(n["node"], n["exit_code"]) for n in record["nodes"]] == [
        ("spark-0", None),
        ("spark-1", None),
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--spark", "local[2]", "--launcher", "torchdistributor"), "local[N] run every task"),
        (("--spark", MASTER, "--launcher", "torchrun"), "cannot start ranks on Spark"),
        (("--launcher", "torchdistributor"), "runs under Spark"),
        (("--spark", MASTER, "--hosts", "a:1,b:1", "--launcher", "torchdistributor"), "--spark"),
    ],
    ids=["local-master", "torchrun", "no-spark", "spark-and-hosts"],
)
def test_a_spark_request_dtrun_cannot_serve_is_one_clear_error(no_leftovers, args, said):
    done = run_dtrun("bench", *args, "--nodes", "2", cwd=no_leftovers)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def standalone(tmp_path_factory):
    from tests import sparkstandalone

    cluster = sparkstandalone.start(tmp_path_factory.mktemp("spark-standalone"))
    yield cluster
    cluster.close()


def test_a_standalone_master_runs_each_node_on_its_own_worker(standalone, no_leftovers):
    """spark://: executors are the workers' children on 127.0.0.41 and .42, not the driver's."""
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--spark", standalone.url, "--launcher", "torchdistributor", "--nodes", "2",
        *QUICK, "--output", str(out), "--run-id", "sa", cwd=no_leftovers, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = _results(out / "sa", 2)
    assert result["communication"]["ok"] is True
    # each node's rank ran on an executor of its own worker (Spark chooses which)
    assert sorted(rank["address"] for rank in result["ranks"]) == ["127.0.0.41", "127.0.0.42"]
    wait_for(lambda: launch_processes() == [], timeout=30, what="the executors to end")


def test_sigterm_on_a_standalone_master_leaves_no_executor_or_rank(standalone, no_leftovers):
    script = no_leftovers / "sleep.py"
    script.write_text("import time; print('sleeping', flush=True); time.sleep(600)\n")
    runs = no_leftovers / "runs"
    with (no_leftovers / "dtrun.out").open("w+") as out:
        dtrun = subprocess.Popen(
            [*DTRUN, "run", "--spark", standalone.url, "--launcher", "torchdistributor",
             "--nodes", "2", "--output", str(no_leftovers / "runs"), "--", "python", str(script)],
            cwd=no_leftovers, stdout=out, stderr=subprocess.STDOUT, preexec_fn=default_signals,
        )  # fmt: skip
        # the program runs inside each rank's process (runner/engines/spark/inprocess.py): it
        # has no command line of its own, so its logs say it started
        wait_for(
            lambda: sum(b"sleeping" in log.read_bytes() for log in runs.rglob("spark-*.log")) >= 2,
            timeout=180,
            what="both nodes' programs to start",
        )
        dtrun.send_signal(signal.SIGTERM)
        assert ends_within(dtrun, 90, out) == 143
    # the executors are the workers' children: Spark's master ends them once the driver is gone
    wait_for(lambda: launch_processes() == [], timeout=60, what="no process of the launch")


def test_a_master_that_does_not_answer_fails_at_once_saying_so(no_leftovers):
    # the guard: Spark's own registration retries (3 x 20 s) ended the run at about 68 s
    done = run_dtrun(
        "run", "--spark", "spark://127.0.0.40:7199", "--launcher", "torchdistributor",
        "--nodes", "2", "--output", str(no_leftovers / "runs"), "--", "true",
        cwd=no_leftovers, timeout=55,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot connect to the Spark master at spark://127.0.0.40:7199" in done.stderr
    assert "Traceback" not in done.stderr and "stopped SparkContext" not in done.stderr


@pytest.fixture
def small_standalone(tmp_path_factory):
    from tests import sparkstandalone

    cluster = sparkstandalone.start(tmp_path_factory.mktemp("spark-small"), memory="512m")
    yield cluster
    cluster.close()


def test_workers_too_small_for_an_executor_fail_the_launch_saying_what_to_change(
    small_standalone, no_leftovers
):
    """Workers of 512 MiB and executors of 1 GiB: Spark gives the application no executor; the
    launch ends after the executor wait, not at --timeout (none given: as long as it runs,
    so the run's own timeout here is the guard)."""
    done = run_dtrun(
        "run", "--spark", small_standalone.url, "--launcher", "torchdistributor", "--nodes", "2",
        "--output", str(no_leftovers / "runs"), "--run-id", "small", "--", "true",
        cwd=no_leftovers, timeout=240, env={**os.environ, "DTRUN_SPARK_EXECUTOR_WAIT_S": "15"},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Spark gave this launch 0 of the 2 executors it needs within 15 s" in done.stderr
    assert "1g of memory" in done.stderr and "spark-defaults.conf" in done.stderr
    assert "Traceback" not in done.stderr
    record = json.loads((no_leftovers / "runs" / "small" / "run.json").read_text())
    assert [n["exit_code"] for n in record["nodes"]] == [None, None]


def test_an_executor_killed_is_the_failed_node_and_the_stopped_one_is_null(
    standalone, no_leftovers
):
    from tests import sparkstandalone

    script = no_leftovers / "sleep.py"
    script.write_text("import time; print('sleeping', flush=True); time.sleep(600)\n")
    runs = no_leftovers / "runs"
    with (no_leftovers / "dtrun.out").open("w+") as out:
        dtrun = subprocess.Popen(
            [*DTRUN, "run", "--spark", standalone.url, "--launcher", "torchdistributor",
             "--nodes", "2", "--output", str(no_leftovers / "runs"), "--run-id", "k", "--",
             "python", str(script)],
            cwd=no_leftovers, stdout=out, stderr=subprocess.STDOUT, preexec_fn=default_signals,
        )  # fmt: skip
        # the program runs inside each rank's process (runner/engines/spark/inprocess.py): it
        # has no command line of its own, so its logs say it started
        wait_for(
            lambda: sum(b"sleeping" in log.read_bytes() for log in runs.rglob("spark-*.log")) >= 2,
            timeout=180,
            what="both nodes' programs to start",
        )
        (executor,) = sparkstandalone.executor_pids(1)
        os.kill(executor, signal.SIGKILL)
        assert dtrun.wait(timeout=120) == 1
        out.seek(0)
        said = out.read()
    record = json.loads((no_leftovers / "runs" / "k" / "run.json").read_text())
    nodes = {n["node"]: (n["exit_code"], n["cause"] is not None) for n in record["nodes"]}
    lost = next(node for node, (code, _) in nodes.items() if code is not None)
    assert nodes[lost] == (137, True), nodes  # the executor's own exit, as Spark reported it
    assert [value for node, value in nodes.items() if node != lost] == [(None, False)], nodes
    # named by the host its task recorded (runner/engines/spark/node.py): worker 1's
    assert f"error: {lost} (127.0.0.42) failed with exit code 137" in said, said
    # Spark's own words: ExecutorLostFailure (Spark 3) or the scheduler's Lost executor (Spark 4)
    assert ("ExecutorLostFailure" in said or "Lost executor" in said) and "Traceback" not in said
    wait_for(lambda: launch_processes() == [], timeout=60, what="no process of the launch")


@pytest.mark.parametrize(
    ("launcher", "program"),
    [("torchdistributor", "ddp_loop.py"), ("horovod-spark", "horovod_loop.py")],
)
def test_a_user_program_is_benched_on_spark_executors(no_leftovers, launcher, program):
    program = TESTS / "programs" / program
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--spark", MASTER, "--launcher", launcher, "--nodes", "1,2",
        "--warmup", "2", "--repeat", "1", "--quiet", "--output", str(out), "--run-id", "prog",
        "--", "python", str(program), "--steps", "6", "--sleep", "0.02",
        cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "prog" / "n2" / "r0" / "result.json").read_text())
    assert result["schema"] == "dtrun.program/1"
    assert (result["timed_steps"], result["proof"]["answer"]) == (4, "in sync")
    assert sorted(rank["node"] for rank in result["ranks"]) == ["spark-0", "spark-1"]


@pytest.mark.parametrize("launcher", ["torchdistributor", "horovod-spark"])
def test_a_node_log_the_disk_cannot_hold_stops_every_rank_and_says_the_disk_is_full(
    small_disk, no_leftovers, launcher
):
    """The node logs are written on the executors (node_main): once the disk cannot hold one,
    that node stops and says so, dtrun cancels the launch as for a failed node, nothing of it
    is left running, and the full disk is the error, naming the cut log. Before, the nodes ran
    on unlogged until --timeout (600 s by default: past this test's wait)."""
    disk = small_disk(400)
    spew = no_leftovers / "spew.py"
    spew.write_text("while True:\n    print('x' * 200, flush=True)\n")
    done = run_dtrun(
        "bench", "--spark", MASTER, "--launcher", launcher, "--nodes", "2",
        "--repeat", "1", "--no-health-gate", "-o", str(disk),
        "--run-id", "spew", "--", "python", str(spew), cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    run = disk / "spew"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"error: the disk holding {run} is full (" in done.stderr, done.stderr
    assert "where the disk filled" in done.stderr
    # the node log it cut short is the one named (under Horovod too, not spark-driver.log)
    assert re.search(r"n2/r0/spark-\d\.log could not be written", done.stderr), done.stderr
    assert "did not finish within" not in done.stderr
    logs = [
        path for path in (run / "n2" / "r0").glob("spark-*.log") if "x" * 200 in path.read_text()
    ]
    assert logs  # kept up to the cut
    assert not [path for path in run.rglob("*") if ".partial" in path.name]
    wait_for(lambda: launch_processes() == [], timeout=60, what="no process of the launch")


def test_a_horovod_spark_node_s_lines_show_on_the_console_as_its_node_s(no_leftovers):
    """Under horovod.spark each node's output reaches dtrun's console as `[spark-R] ...`, as
    under TorchDistributor (node_main sends it to the driver's Relay). Before, Horovod kept it
    in the executors' own logs: no node line reached the console."""
    hello = no_leftovers / "hello.py"
    hello.write_text("import os\nprint('hello from rank', os.environ['RANK'], flush=True)\n")
    done = run_dtrun(
        "bench", "--spark", MASTER, "--launcher", "horovod-spark", "--nodes", "2",
        "--repeat", "1", "--no-health-gate", "--output", str(no_leftovers / "runs"),
        "--run-id", "hello", "--", "python", str(hello), cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    assert "[spark-0] hello from rank 0" in done.stdout, done.stdout + done.stderr
    assert "[spark-1] hello from rank 1" in done.stdout, done.stdout + done.stderr
    wait_for(lambda: launch_processes() == [], timeout=60, what="no process of the launch")
