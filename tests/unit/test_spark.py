"""The Spark engine without Spark: masters, the inventory, the plan, node_main on a real
script, and how the executor reads each node's end from the files node_main writes."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dtrun.engines.spark.executor import driver_failure, lost_hosts, node_failure, node_results
from dtrun.engines.spark.failures import (
    FAILURE_FILE,
    executor_wait_s,
    master_unreachable,
    task_failure,
    write_failure,
)
from dtrun.engines.spark.inventory import executors, spark_inventory
from dtrun.engines.spark.node import contract_from_horovod, executor_address, node_main
from dtrun.errors import NodeFailedError, PlanError, RunError, UsageError
from dtrun.plan.launchers.spark import SPARK_CONFIG
from dtrun.spec.cluster import Node, Starter
from dtrun.spec.launchplan import LaunchPlan, NodeLaunch
from dtrun.spec.outcome import NodeResult
from tests.conftest import ended, wait_for
from tests.paths import REPO
from tests.plans import build_run_plan
from tests.unit.test_launch_stubs import run_spec


@pytest.mark.parametrize(
    ("master", "nodes"),
    [
        ("local-cluster[2,1,1024]", 2),
        ("local-cluster[ 4 , 2 , 512 ]", 4),
        ("spark://head:7077", 8),
        ("spark://a:7077,b:7077", 8),
        ("yarn", 8),
        ("k8s://https://api:6443", 8),
    ],
)
def test_each_master_gives_its_executors_as_nodes(master, nodes):
    assert executors(master, 8) == nodes


@pytest.mark.parametrize(
    "master", ["local", "local[2]", "local[*]", "local-cluster[0,1,1024]", "spark:/x", ""]
)
def test_a_master_without_an_executor_per_node_is_refused(master):
    with pytest.raises(UsageError) as caught:
        executors(master, 2)
    assert caught.value.exit_code == 2 and "local-cluster[N,1,1024]" in caught.value.fix


def test_the_inventory_names_nodes_by_barrier_partition():
    inventory = spark_inventory("local-cluster[3,1,1024]", 1)
    assert [node.name for node in inventory.nodes] == ["spark-0", "spark-1", "spark-2"]
    assert inventory.starter is Starter.TASKS and inventory.interface == "lo"
    assert inventory.source == "spark:local-cluster[3,1,1024]"


def test_spark_launchers_refuse_other_engines_and_render_no_launcher_of_their_own(tmp_path):
    not_spark = replace(spark_inventory("local-cluster[2,1,1024]", 2), starter=None)
    with pytest.raises(PlanError, match="runs under Spark"):
        build_run_plan(not_spark, run_spec("torchdistributor"))
    spark = spark_inventory("local-cluster[2,1,1024]", 2)
    with pytest.raises(PlanError, match="one process per node"):
        build_run_plan(spark, run_spec("horovod-spark", procs=2))
    plan = build_run_plan(spark, run_spec("horovod-spark", procs=1))
    assert [launch.node.name for launch in plan.launches] == ["spark-0", "spark-1"]
    script = plan.launches[1].script
    assert "export MASTER_ADDR" not in script and "export NODE_RANK" not in script
    assert "come from horovod.spark" in script and "DTRUN_NODE_NAME=spark-1" in script
    assert [f.name for f in plan.files] == [SPARK_CONFIG]


def test_horovod_variables_become_the_contract_with_the_node_as_the_rank():
    env = {
        "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_CROSS_RANK": "0", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.4", "KEEP": "x",
    }  # fmt: skip
    mapped = contract_from_horovod(env, 29500)
    assert {k: mapped[k] for k in ("RANK", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK")} == {
        "RANK": "1", "WORLD_SIZE": "2", "NODE_RANK": "1", "LOCAL_RANK": "0",
    }  # fmt: skip
    assert (mapped["MASTER_ADDR"], mapped["MASTER_PORT"], mapped["KEEP"]) == (
        "10.0.0.4",
        "29500",
        "x",
    )


def test_node_main_runs_the_node_script_logs_it_and_records_its_exit(tmp_path, monkeypatch, capfd):
    (tmp_path / "node-1.sh").write_text('echo "rank $RANK here"; exit 3\n')
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit) as ended:
        node_main(str(tmp_path), ["spark-0", "spark-1"])
    assert ended.value.code == 3
    assert (tmp_path / "spark-1.exit").read_text() == "3\n"
    assert (tmp_path / "spark-1.log").read_text() == "rank 1 here\n"
    assert "dtrun-node 1: rank 1 here" in capfd.readouterr().out
    (tmp_path / "node-1.sh").write_text("pwd\n")  # it runs in the launch directory
    assert node_main(str(tmp_path), ["spark-0", "spark-1"]) == 0
    assert (tmp_path / "spark-1.exit").read_text() == "0\n"
    assert (tmp_path / "spark-1.log").read_text().endswith(f"{tmp_path}\n")


def test_a_node_log_the_disk_cannot_hold_stops_the_node_and_node_main_says_so(
    small_disk: Callable[[int], Path],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
):
    """The node's log is on its executor: once the disk cannot hold it, node_main stops the
    script (as dtrun stops a node on the other engines), records no exit of its own, fails its
    task, and tells dtrun why on its output (`dtrun-log-cut R: ERRNO WHY`, which the driver
    streams). Before, the script ran on unlogged, and its exit file then failed to be written."""
    disk = small_disk(64)
    (disk / "node-0.sh").write_text(f"for i in $(seq 4000); do echo {'x' * 200}; done\n")
    monkeypatch.setenv("NODE_RANK", "0")
    with pytest.raises(SystemExit) as ended:
        node_main(str(disk), ["spark-0"])
    assert ended.value.code == 128 + signal.SIGTERM  # stopped, not run to its end
    assert f"dtrun-log-cut 0: {errno.ENOSPC} No space left on device\n" in capfd.readouterr().out
    assert not (disk / "spark-0.exit").exists()
    assert "x" * 200 in (disk / "spark-0.log").read_text()  # kept up to the cut


def test_a_cut_line_whose_errno_is_no_plain_number_cuts_the_launch_as_a_full_disk(tmp_path):
    """The driver's reader (SparkApp._pump) reads every line through the executor's demux: a
    `dtrun-log-cut R:` line whose number int() refuses ("²" is a digit to str.isdigit) raised
    ValueError there, which ended the reader, and the launch then waited for its end forever."""
    from dtrun.engines.spark.executor import _cut
    from dtrun.workloads.files import CUT_LOGS

    log = tmp_path / "spark-0.log"
    try:
        cut = _cut(log, "\u00b2 No space left on device")
        assert (cut.errno, cut.filename) == (errno.ENOSPC, str(log))
        assert CUT_LOGS[str(log)] == "No space left on device"
    finally:
        CUT_LOGS.pop(str(log), None)


def _plan(names: list[str]) -> LaunchPlan:
    launches = tuple(
        NodeLaunch(Node(name, "127.0.0.1"), i, f"node-{i}.sh", "") for i, name in enumerate(names)
    )
    return LaunchPlan("torchdistributor", "train", len(names), 1, len(names), 8, "r", "h", 1,
                      launches)  # fmt: skip


def test_the_failed_node_is_the_one_whose_exit_file_says_so_first(tmp_path):
    plan = _plan(["spark-0", "spark-1", "spark-2"])
    (tmp_path / "spark-2.exit").write_text("7\n")
    (tmp_path / "spark-1.exit").write_text("0\n")
    (tmp_path / "spark-2.log").write_text("boom\n")
    results = node_results(plan, tmp_path)
    assert [r.exit_code for r in results] == [None, 0, 7]  # spark-0 never finished: stopped
    driver = NodeFailedError("spark-driver", "127.0.0.1", 1, "d.log", "")
    error = node_failure(results, driver, {})
    assert isinstance(error, NodeFailedError) and error.node == "spark-2"
    assert error.node_results == results


def test_an_exit_file_cut_short_reads_as_no_exit(tmp_path):
    (tmp_path / "spark-0.exit").write_text("")
    assert [r.exit_code for r in node_results(_plan(["spark-0"]), tmp_path)] == [None]


def test_without_a_failed_node_the_driver_is_the_failure(tmp_path):
    results = node_results(_plan(["spark-0"]), tmp_path)
    driver = NodeFailedError("spark-driver", "127.0.0.1", 1, str(Path("d.log")), "no Java")
    assert node_failure(results, driver, {}) is driver


@pytest.mark.parametrize(
    ("env", "address"),
    [
        (
            {"SPARK_LOCAL_IP": "127.0.0.42", "SPARK_LOG_URL_STDERR": "http://10.0.0.9:1/x"},
            "127.0.0.42",
        ),
        ({"SPARK_LOG_URL_STDERR": "http://10.0.0.9:45561/logPage/?executorId=0"}, "10.0.0.9"),
        ({}, None),
    ],
)
def test_the_executor_address_is_what_spark_tells_its_processes(env, address):
    assert executor_address(env) == address


def test_the_node_script_records_the_executor_address_when_known(tmp_path):
    plan = build_run_plan(
        spark_inventory("spark://h:7077", 2), run_spec("torchdistributor", procs=1)
    )
    script = tmp_path / "node-1.sh"
    script.write_text(plan.launches[1].script.replace("exec ", "echo $DTRUN_NODE_ADDR; : ", 1))

    def address(**env: str) -> str:
        env = {"PATH": os.environ["PATH"], **env}
        run = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
        return run.stdout.splitlines()[-1]

    assert address(DTRUN_EXECUTOR_ADDR="10.0.0.7") == "10.0.0.7"
    assert address() == "spark-executor"


# node_main in a process of its own, as a Spark task's rank runs it: `hand` says how the stop
# arrives (a signal on a thread that is not the main one, or a SIGKILL of node_main itself).
RANK_PROCESS = """\
import os, signal, sys, threading, time
from pathlib import Path
from dtrun.engines.spark.node import node_main

where = Path(sys.argv[1])

def hand():
    while not (where / "spark-0.log").exists() or b"up" not in (where / "spark-0.log").read_bytes():
        time.sleep(0.05)
    if sys.argv[2] == "thread":  # the kernel may hand a process's signal to any of its threads
        watch = next(t for t in threading.enumerate() if t.name == "dtrun-parent-watch")
        signal.pthread_kill(watch.ident, signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGKILL)

threading.Thread(target=hand, daemon=True).start()
node_main(str(where), ["spark-0"])
"""

# the program and a child it leaves in the background, both in the script's process group
NODE_SCRIPT = """\
sleep 600 &
echo "$!" > background.pid
echo "$$" > program.pid
echo up
exec sleep 601
"""


@pytest.mark.parametrize(
    ("hand", "deaf"), [("thread", False), ("sigkill", False), ("sigkill", True)],
    ids=["signal-on-a-thread", "sigkill", "sigkill-term-ignored"],
)  # fmt: skip
def test_a_stopped_rank_leaves_no_process_of_its_node_script(tmp_path, hand, deaf):
    """A SIGTERM the kernel hands to node_main's watch thread still stops the script at once
    (the main thread is not blocked reading its output), and a node_main killed outright has
    its script's whole process group ended by its guard: SIGKILL where SIGTERM is ignored."""
    (tmp_path / "node-0.sh").write_text(("trap '' TERM\n" if deaf else "") + NODE_SCRIPT)
    env = {**os.environ, "NODE_RANK": "0", "PYTHONPATH": str(REPO)}
    rank = subprocess.Popen(
        [sys.executable, "-c", RANK_PROCESS, str(tmp_path), hand],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        code = rank.wait(timeout=30)
        pids = [int((tmp_path / f"{n}.pid").read_text()) for n in ("program", "background")]
        deadline = time.monotonic() + 10
        while not all(ended(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(ended(pid) for pid in pids), pids
        if hand == "thread":
            assert code == 143, rank.stderr.read() if rank.stderr else ""
            # node_main stopped the script: no exit of its own, so the node reads as stopped
            assert not (tmp_path / "spark-0.exit").exists()
        else:
            assert code == -signal.SIGKILL
    finally:
        rank.kill()
        for name in ("program", "background"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((tmp_path / f"{name}.pid").read_text()), signal.SIGKILL)


LOST = (
    "An error occurred while calling o81.collect.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 0.0 "
    "failed 1 times, most recent failure: Lost task 1.0 in stage 0.0 (TID 1) (127.0.0.42 "
    "executor 1): ExecutorLostFailure (executor 1 exited caused by one of the running tasks) "
    "Reason: Command exited with code 137\n"
    "Driver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages"
)


def test_a_lost_executor_names_its_partition_and_the_executors_exit_code():
    failure = task_failure(RuntimeError(LOST))
    assert (failure.partition, failure.exit_code) == (1, 137)
    assert failure.why.startswith("ExecutorLostFailure (executor 1 exited")
    assert "stacktrace" not in failure.why and "\tat " not in failure.why


def test_the_node_spark_lost_is_recorded_with_its_code_and_the_stopped_one_as_stopped(tmp_path):
    plan = _plan(["spark-0", "spark-1"])
    write_failure(tmp_path / FAILURE_FILE, task_failure(RuntimeError(LOST)))
    results = node_results(plan, tmp_path)  # neither node wrote an exit: both were stopped
    assert [(r.exit_code, r.cause is not None) for r in results] == [(None, False), (137, True)]
    driver = NodeFailedError("spark-driver", "127.0.0.1", 1, "d.log", "traceback lines")
    error = node_failure(results, driver, driver_failure(tmp_path))
    assert isinstance(error, NodeFailedError) and error.node == "spark-1"
    assert "failed with exit code 137" in error.message and "ExecutorLostFailure" in error.message


# Spark 4's words for the same loss in a barrier stage (seen on the test standalone cluster):
# the partition in the job's failure, the executor's exit only in the driver's log.
BARRIER = (
    "Job aborted due to stage failure: ResultStage 0 (run at spark_driver.py:246) has failed "
    "the maximum allowable number of times: 1. Most recent failure reason: Stage failed "
    "because barrier task ResultTask(0, 1) finished unsuccessfully."
)


def test_a_barrier_task_spark_4_lost_gets_its_executors_code_from_the_driver_log(tmp_path):
    write_failure(tmp_path / FAILURE_FILE, task_failure(RuntimeError(BARRIER)))
    (tmp_path / "spark-driver.log").write_text(
        "26/11/25 18:59:33 ERROR TaskSchedulerImpl: Lost executor 0 on 127.0.0.42: "
        "Command exited with code 137\n"
    )
    results = node_results(_plan(["spark-0", "spark-1"]), tmp_path)
    assert [(r.exit_code, r.cause is not None) for r in results] == [(None, False), (137, True)]


def test_a_barrier_failure_with_no_lost_executor_in_the_log_records_no_code(tmp_path):
    write_failure(tmp_path / FAILURE_FILE, task_failure(RuntimeError(BARRIER)))
    results = node_results(_plan(["spark-0", "spark-1"]), tmp_path)
    assert [(r.exit_code, r.cause is not None) for r in results] == [(None, False), (None, True)]


def test_spark_s_words_a_failed_node_printed_are_its_output_not_spark_losing_a_node(
    tmp_path, monkeypatch
):
    """A training script that prints an older run's spark-driver.log, then fails: its task's
    error carries the output's last lines, and Spark's failure and driver log carry that error.
    The old run's lost executor and task in it are not this launch's (they named node 0 lost,
    exit 137, while node 1 failed by itself)."""
    from dtrun.engines.spark.task import stream

    (tmp_path / "old.log").write_text(
        "26/11/25 18:59:33 ERROR TaskSchedulerImpl: Lost executor 0 on 127.0.0.42: Command "
        "exited with code 137\n26/11/25 18:59:33 WARN TaskSetManager: Lost task 0.0 in stage "
        "2.0 (TID 4) (127.0.0.42 executor 0): ExecutorLostFailure (executor 0 exited caused by "
        "one of the running tasks) Reason: Command exited with code 137\n"
    )
    (tmp_path / "node-1.sh").write_text("cat old.log\nexit 1\n")
    monkeypatch.setenv("NODE_RANK", "1")
    node = [sys.executable, "-m", "dtrun.engines.spark.node", str(tmp_path), "spark-0", "spark-1"]
    with pytest.raises(RuntimeError) as failed:  # the task's error, as TorchDistributor's
        stream(node)
    said = (  # Spark 4's failure of the barrier stage: its words, then the task's error
        f"{BARRIER}\norg.apache.spark.api.python.PythonException: Traceback (most recent call "
        f"last):\nRuntimeError: {failed.value}\n"
    )
    write_failure(tmp_path / FAILURE_FILE, task_failure(RuntimeError(said)))
    (tmp_path / "spark-driver.log").write_text(
        f"26/11/25 19:00:01 WARN TaskSetManager: Lost task 1.0 in stage 3.0 (TID 7) "
        f"(127.0.0.43 executor 1): {said}"
    )
    assert lost_hosts(tmp_path) == {}
    results = node_results(_plan(["spark-0", "spark-1"]), tmp_path)
    assert [(r.exit_code, r.cause) for r in results] == [(None, None), (1, None)]


URL = "http://127.0.0.42:8081/logPage/?appId=app-1&executorId={}&logType=stderr"


def test_node_main_records_its_executors_host_and_id_as_it_starts(tmp_path, monkeypatch):
    (tmp_path / "node-1.sh").write_text("exit 0\n")
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("SPARK_LOG_URL_STDERR", URL.format(3))
    node_main(str(tmp_path), ["spark-0", "spark-1"])
    assert (tmp_path / "spark-1.host").read_text() == "127.0.0.42 3\n"


def _lost(tmp_path: Path, why: str, executor: str = "0") -> tuple[tuple[NodeResult, ...], RunError]:
    """spark-0 on 127.0.0.41 exited 1 (gloo: its peer closed), spark-1 on 127.0.0.42 wrote no
    exit, and the driver's log says it lost executor ``executor`` on 127.0.0.42."""
    (tmp_path / "spark-0.host").write_text("127.0.0.41 1\n")
    (tmp_path / "spark-1.host").write_text("127.0.0.42 0\n")
    (tmp_path / "spark-0.exit").write_text("1\n")
    (tmp_path / "spark-0.log").write_text("RuntimeError: Connection closed by peer\n")
    (tmp_path / "spark-driver.log").write_text(
        f"26/12/06 09:26:19 ERROR TaskSchedulerImpl: Lost executor {executor} on 127.0.0.42: "
        f"{why}\n"
    )
    results = node_results(_plan(["spark-0", "spark-1"]), tmp_path)
    driver = NodeFailedError("spark-driver", "127.0.0.1", 1, "d.log", "")
    return results, node_failure(results, driver, {})


def test_a_node_whose_executors_host_went_is_the_lost_one_not_the_peer_that_then_failed(
    tmp_path,
):
    results, error = _lost(tmp_path, "worker lost: 127.0.0.42:36329 got disassociated")
    assert [(r.exit_code, r.address) for r in results] == [(1, "127.0.0.1"), (None, "127.0.0.42")]
    assert not isinstance(error, NodeFailedError)
    assert (error.lost_node, error.others_held) == ("spark-1", True)  # a check goes on without it
    assert (error.what, error.why) == (
        "Spark lost spark-1 (127.0.0.42)",
        "Spark lost its executor: worker lost: 127.0.0.42:36329 got disassociated",
    )


def test_a_killed_executor_is_the_failed_node_with_its_code_before_the_peer_that_then_failed(
    tmp_path,
):
    _, error = _lost(tmp_path, "Command exited with code 137")
    assert isinstance(error, NodeFailedError)
    assert (error.node, error.exit_code_of_node) == ("spark-1", 137)
    assert error.what.startswith("spark-1 (127.0.0.42) failed with exit code 137")


def test_another_executor_lost_on_the_same_host_leaves_the_node_to_its_exit(tmp_path):
    results, error = _lost(tmp_path, "Command exited with code 137", executor="5")
    assert [r.cause for r in results] == [None, None]
    assert isinstance(error, NodeFailedError) and error.node == "spark-0"


def test_a_host_two_nodes_ran_on_without_executor_ids_names_neither_by_host(tmp_path):
    for name in ("spark-0", "spark-1"):
        (tmp_path / f"{name}.host").write_text("127.0.0.1\n")
    (tmp_path / "spark-driver.log").write_text(
        "ERROR TaskSchedulerImpl: Lost executor 1 on 127.0.0.1: Command exited with code 137\n"
    )
    results = node_results(_plan(["spark-0", "spark-1"]), tmp_path)
    assert [r.cause for r in results] == [None, None]


@pytest.mark.parametrize(
    ("url_host", "spark_says"),
    [("[2001:db8::5]", "2001:db8::5"), ("[2001:db8::5]", "[2001:db8::5]"),
     ("Worker-B.Example", "Worker-B.Example")],
)  # fmt: skip
def test_a_lost_executor_on_an_ipv6_or_capitalised_host_names_its_node(
    tmp_path, url_host, spark_says
):
    """The task's host is its log URL's, bare and lower-cased (urlsplit); Spark's log line
    keeps the case and the colons: such a node was missed, and its peer named instead."""
    url = f"http://{url_host}:8081/logPage/?appId=app-1&executorId=0&logType=stderr"
    host = executor_address({"SPARK_LOG_URL_STDERR": url})
    (tmp_path / "spark-0.host").write_text("10.0.0.1 1\n")
    (tmp_path / "spark-0.exit").write_text("1\n")
    (tmp_path / "spark-1.host").write_text(f"{host} 0\n")
    (tmp_path / "spark-driver.log").write_text(
        f"ERROR TaskSchedulerImpl: Lost executor 0 on {spark_says}: Command exited with code 137\n"
    )
    results = node_results(_plan(["spark-0", "spark-1"]), tmp_path)
    assert [r.exit_code for r in results] == [1, 137]
    assert results[1].cause == "Spark lost its executor: Command exited with code 137"


def test_a_node_printing_spark_s_words_is_not_spark_losing_an_executor(tmp_path):
    (tmp_path / "spark-driver.log").write_text(
        "dtrun-node 1: ERROR TaskSchedulerImpl: Lost executor 0 on 127.0.0.42: worker lost\n"
    )
    assert lost_hosts(tmp_path) == {}


def test_a_driver_failure_it_recorded_is_the_error_not_its_log(tmp_path):
    unreachable = master_unreachable("spark://127.0.0.1:1")
    assert unreachable is not None
    write_failure(tmp_path / FAILURE_FILE, unreachable)
    results = node_results(_plan(["spark-0"]), tmp_path)
    driver = NodeFailedError("spark-driver", "127.0.0.1", 1, "d.log", "Traceback (most recent")
    error = node_failure(results, driver, driver_failure(tmp_path))
    assert error.message.startswith("cannot connect to the Spark master at spark://127.0.0.1:1")
    assert "Traceback" not in error.message and error.node_results == results


@pytest.mark.parametrize(("value", "ok"), [("", True), ("30", True), ("4", False), ("x", False)])
def test_the_executor_wait_is_bounded_and_checked(value, ok):
    if ok:
        assert executor_wait_s({"DTRUN_SPARK_EXECUTOR_WAIT_S": value}) in (30, 120)
    else:
        with pytest.raises(ValueError, match="DTRUN_SPARK_EXECUTOR_WAIT_S"):
            executor_wait_s({"DTRUN_SPARK_EXECUTOR_WAIT_S": value})


def test_a_local_cluster_gets_a_spark_home_of_its_own_whose_work_is_not_pyspark_s(
    tmp_path, monkeypatch
):
    from dtrun.engines.spark.session import own_spark_home

    real = tmp_path / "pyspark"
    for name in ("bin", "jars", "work"):
        (real / name).mkdir(parents=True)
    monkeypatch.setenv("SPARK_HOME", str(real))
    app = tmp_path / "app"
    app.mkdir()
    work = own_spark_home(app)
    home = app / "spark-home"
    assert os.environ["SPARK_HOME"] == str(home) and work == home / "work"
    assert (home / "jars").resolve() == real / "jars" and (home / "bin").is_symlink()
    assert work.is_dir() and not work.is_symlink()  # the workers write here, not in `real`


def test_a_kept_spark_home_is_relinked_to_this_install_and_its_work_emptied(tmp_path, monkeypatch):
    # the class-data recording's home stays in the cache (runner/engines/spark/cds.py): one
    # made from another install, and an application killed in it, are set right
    from dtrun.engines.spark.session import own_spark_home

    real, other = tmp_path / "pyspark", tmp_path / "gone"
    for name in ("bin", "jars"):
        (real / name).mkdir(parents=True)
    kept = tmp_path / "cache" / "spark-home"
    (kept / "work" / "app-killed" / "0").mkdir(parents=True)
    (kept / "jars").symlink_to(other / "jars")  # dangling: that install was removed
    monkeypatch.setenv("SPARK_HOME", str(real))
    work = own_spark_home(tmp_path / "cache")
    assert (kept / "jars").readlink() == real / "jars" and (kept / "bin").is_symlink()
    assert work == kept / "work" and not list(work.iterdir())


def test_the_executors_logs_go_to_the_launch_that_started_the_application(tmp_path):
    from dtrun.engines.spark.driver import keep_work

    work = tmp_path / "work"
    (work / "app-1" / "0").mkdir(parents=True)
    (work / "app-1" / "0" / "stderr").write_text("executor 0 said\n")
    launch = tmp_path / "n1" / "r0"
    launch.mkdir(parents=True)
    keep_work(work, str(launch))
    assert (launch / "spark-work" / "app-1" / "0" / "stderr").read_text() == "executor 0 said\n"


def test_a_link_where_the_executors_logs_go_is_not_followed(tmp_path):
    from dtrun.engines.spark.driver import keep_work

    work = tmp_path / "work"
    (work / "app-1").mkdir(parents=True)
    launch, elsewhere = tmp_path / "launch", tmp_path / "elsewhere"
    launch.mkdir()
    elsewhere.mkdir()
    (launch / "spark-work").symlink_to(elsewhere)
    keep_work(work, str(launch))
    assert list(elsewhere.iterdir()) == [] and (work / "app-1").is_dir()


class _Tracker:
    """Spark's status tracker as the driver reads it: ``executors`` registered (the driver
    listed too, as Spark does) and one active stage running ``running`` tasks."""

    def __init__(self, executors: int, running: int) -> None:
        self.executors, self.running = executors, running

    def getExecutorInfos(self):
        return [object()] * (self.executors + 1)

    def getActiveStageIds(self):
        return [0]

    def getStageInfo(self, stage):
        from types import SimpleNamespace

        return SimpleNamespace(numActiveTasks=self.running)


def _spark_with(tracker):
    from types import SimpleNamespace

    context = SimpleNamespace(
        statusTracker=lambda: tracker, _jsc=SimpleNamespace(sc=lambda: SimpleNamespace(
            statusTracker=lambda: tracker)),
    )  # fmt: skip
    return SimpleNamespace(sparkContext=context)


@pytest.mark.parametrize(("executors", "running", "starved"), [(2, 4, False), (2, 0, True)])
def test_a_launch_whose_tasks_all_run_on_fewer_executors_is_not_starved(
    tmp_path, executors, running, starved
):
    """4 tasks on 2 executors of 2 cores (a standalone worker's executor takes every core): the
    barrier stage runs, and the executor watch must not cancel it; with no task running after
    the wait it does."""
    from dtrun.engines.spark import driver
    from dtrun.engines.spark.session import CHECK_EVERY_S

    run = driver.Driver("spark://127.0.0.40:7177", tmp_path)
    run.spark = _spark_with(_Tracker(executors, running))
    run.running = 1
    found: list[int] = []
    run.watch_executors(1, needed=4, wait_s=-2 * CHECK_EVERY_S, starved=found)
    assert found == ([executors] if starved else [])


def test_a_host_file_naming_no_host_gives_the_lost_node_no_address_from_it(tmp_path):
    """A task's .host file and the driver's log come from the cluster: a "host" holding a
    shell word or an escape is no address for records and messages (docs/security.md)."""
    forged = "x;$(touch${IFS}pwned)\x1b[2J"
    (tmp_path / "spark-0.host").write_text(f"{forged} 0\n")
    (tmp_path / "spark-driver.log").write_text(
        f"ERROR TaskSchedulerImpl: Lost executor 0 on {forged}: Command exited with code 137\n"
    )
    results = node_results(_plan(["spark-0"]), tmp_path)
    assert [(r.address, r.cause) for r in results] == [("127.0.0.1", None)]


def test_a_cut_line_from_a_node_s_second_rank_names_that_rank_s_log(tmp_path):
    """node_main writes a node's second and later ranks to `<node>.<local rank>.log`: its cut
    line says `R.L`, and the launch is cut short naming that log. Before, the line said only
    R, and the error named `<node>.log`, which the disk had not cut."""
    import types

    from dtrun.engines.spark.executor import SparkExecutor
    from dtrun.workloads.files import CUT_LOGS

    cuts: list[OSError] = []
    executor = SparkExecutor.__new__(SparkExecutor)
    executor.app = types.SimpleNamespace(cut_short=cuts.append)  # type: ignore[assignment]
    names = {"0": "spark-0", "1": "spark-1"}
    demux = executor._demux(names, tmp_path, lambda *_: None, threading.Event())
    try:
        demux("dtrun-log-cut 1.1: 28 No space left on device")
        demux("dtrun-log-cut 0: 28 No space left on device")
        demux("dtrun-log-cut 1.x: 28 not a rank: not a cut")
        assert [cut.filename for cut in cuts] == [
            str(tmp_path / "spark-1.1.log"),
            str(tmp_path / "spark-0.log"),
        ]
    finally:
        for log in ("spark-1.1.log", "spark-0.log"):
            CUT_LOGS.pop(str(tmp_path / log), None)


def test_node_main_under_horovod_sends_its_lines_to_the_driver_s_relay(tmp_path, monkeypatch):
    """Under horovod.spark node_main's tagged lines (and a cut log's) go to the driver's
    Relay, which prints them as they come. Before, they went to the task's own output, which
    Horovod forwards only in 64 KiB chunks or at the task's end (or, without stdout=, never)."""
    import io

    from dtrun.engines.spark.node import Relay

    (tmp_path / "node-1.sh").write_text('echo "rank $RANK here"\n')
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    out = io.StringIO()
    with Relay("127.0.0.1", out) as relay:
        node_main(str(tmp_path), ["spark-0", "spark-1"], None, relay.address)
        wait_for(lambda: "dtrun-node 1: rank 1 here" in out.getvalue(), timeout=10,
                 what="the node's line at the relay")  # fmt: skip


def test_the_relay_prints_nothing_a_connection_without_the_launch_s_token_sends():
    """Anyone who reaches the driver's host can connect to the Relay: a made-up cut line from
    one that does not first send this launch's token is not printed (it would stop the
    launch, naming a node whose log was never cut); a node's, sent with it, is."""
    import io
    import socket

    from dtrun.engines.spark.node import CUT, TAG, Relay

    out = io.StringIO()
    with Relay("127.0.0.1", out) as relay:
        host, port, token = relay.address
        for first in ("", "0" * len(token), token[:-1], f"{token}0"):
            with socket.create_connection((host, port), timeout=10) as stranger:
                stranger.sendall(f"{first}\n{CUT} 1: 28 No space left on device\n".encode())
                stranger.shutdown(socket.SHUT_WR)
                while stranger.recv(4096):  # the relay closes it once it is done with it
                    pass
        assert out.getvalue() == ""
        with socket.create_connection((host, port), timeout=10) as node:
            node.sendall(f"{token}\n{TAG} 0: from the node\n".encode())
        wait_for(lambda: "from the node" in out.getvalue(), timeout=10, what="the node's line")
    assert out.getvalue() == f"{TAG} 0: from the node\n"


def test_the_relay_listens_where_spark_binds_and_is_reached_at_the_driver_s_host(
    monkeypatch, capsys
):
    """A driver in a container or behind NAT gives its executors `spark.driver.host` but binds
    at `spark.driver.bindAddress` (Spark's own RPC does): horovod.spark's Relay listens there
    and tells the nodes the host. Before, it bound at the host itself, an address not of this
    machine, and the launch failed: `OSError: [Errno 99] Cannot assign requested address`."""
    import socket
    import types

    from dtrun.engines.spark import driver

    reached: list[tuple[str, int, str]] = []

    def run(main, args, **_):
        reached.append(args[3])
        _, port, token = args[3]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as node:
            node.sendall(f"{token}\ndtrun-node 0: through the relay\n".encode())
        wait_for(lambda: "through the relay" in capsys.readouterr().out, timeout=10,
                 what="the node's line at the relay")  # fmt: skip

    horovod = types.ModuleType("horovod")
    horovod.spark = types.SimpleNamespace(run=run)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "horovod", horovod)
    monkeypatch.setitem(sys.modules, "horovod.spark", horovod.spark)
    conf = {"spark.driver.host": "203.0.113.5", "spark.driver.bindAddress": "127.0.0.1"}
    context = types.SimpleNamespace(setJobGroup=lambda *_, **__: None, getConf=lambda: conf)
    config = {"nodes": ["spark-0"], "launcher": "horovod-spark", "run_id": "r", "master_port": 1,
              "start_timeout_s": 30, "interface": "lo"}  # fmt: skip
    driver.launch(types.SimpleNamespace(sparkContext=context), config, "/nowhere", True)
    assert [host for host, _, _ in reached] == ["203.0.113.5"]


def test_the_relay_lets_go_of_a_connection_that_does_not_send_the_token_in_time(monkeypatch):
    """Anyone who reaches the driver's host can connect to the Relay and send nothing: it
    closes such a connection once the token is late. Before, each held a thread and a file
    descriptor of the driver until the launch ended: a thousand idle connections, a thousand
    threads."""
    import io
    import socket

    from dtrun.engines.spark.node import Relay

    monkeypatch.setattr(Relay, "token_wait_s", 0.2, raising=False)
    with Relay("127.0.0.1", io.StringIO()) as relay:
        host, port, _ = relay.address
        with socket.create_connection((host, port), timeout=5) as stranger:
            assert stranger.recv(1) == b""  # closed by the relay, not timed out here


def test_a_node_s_connection_reset_prints_no_traceback_on_the_driver(capfd):
    """A node's executor lost or killed resets its connection to the Relay: the lines it sent
    are printed and the driver's console shows no traceback. Before, socketserver printed
    `ConnectionResetError: [Errno 104] Connection reset by peer` with its traceback among the
    launch's lines."""
    import io
    import socket
    import struct

    from dtrun.engines.spark.node import Relay

    out = io.StringIO()
    with Relay("127.0.0.1", out) as relay:
        host, port, token = relay.address
        node = socket.create_connection((host, port), timeout=10)
        node.sendall(f"{token}\ndtrun-node 0: before it was lost\n".encode())
        wait_for(lambda: "before it was lost" in out.getvalue(), timeout=10,
                 what="the node's line")  # fmt: skip
        node.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        node.close()  # a reset, as a killed executor's kernel sends
        with socket.create_connection((host, port), timeout=10) as after:  # served after it
            after.sendall(f"{token}\ndtrun-node 1: still heard\n".encode())
        wait_for(lambda: "still heard" in out.getvalue(), timeout=10,
                 what="a line after the reset")  # fmt: skip
    assert "Traceback" not in capfd.readouterr().err


def test_a_node_silent_at_first_is_heard_when_it_prints_later(monkeypatch):
    """A node sends its token as it connects, not with its first line: a script silent at
    first (importing torch, loading data) is still heard once it prints. Before, the token
    waited in the node's buffer for that first line, past the Relay's wait for it."""
    import io
    import time

    from dtrun.engines.spark import node
    from dtrun.engines.spark.node import Relay

    monkeypatch.setattr(Relay, "token_wait_s", 0.2)
    out = io.StringIO()
    with Relay("127.0.0.1", out) as relay, node._output(relay.address) as sent:
        time.sleep(0.5)  # silent past the token's wait
        sent.write(b"dtrun-node 0: at last\n")
        sent.flush()
        wait_for(lambda: "at last" in out.getvalue(), timeout=10, what="the late line")
