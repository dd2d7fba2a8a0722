"""`dtrun check --spark` on a real standalone Spark (tests/sparkstandalone.py: a master and two
workers on 127.0.0.41 and .42, each executor its worker's child): the nodes are named by the
host of the executor each ran on, the tasks Spark put on one host are that host, a worker
throttled by a CPU quota is named alone, and the check's Spark application ends with it
(docs/check.md). Grouped with the other Spark tests (tests/machine.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import launch_processes, run_dtrun, wait_for

# the cluster's start and a check, one under a CPU quota, took up to 230 s of pytest's default
# 300 s (pyproject.toml) on a 2-core machine at load 12; dtrun itself is given 400 s (_check)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def standalone(tmp_path_factory, request):
    """Workers of one core and 1 GiB each; parametrized ``indirect`` with (cores, memory), other
    workers: an executor takes every core of its worker unless spark.executor.cores says
    otherwise (Spark's standalone default), so workers of 2 run two tasks a host."""
    from tests import sparkstandalone

    if shutil.which("java") is None:  # ./dev test installs it: missing is a broken setup
        pytest.fail("Spark needs Java: run ./dev setup (apt-get install default-jre-headless)")
    cores, memory = getattr(request, "param", (1, "1g"))
    root = tmp_path_factory.mktemp("spark-check")
    cluster = sparkstandalone.start(root, memory, cores=cores)
    yield cluster
    cluster.close()


def _check(tmp, master, *args, env=None):
    done = run_dtrun(
        "check", "--spark", master, *args, "--json", "--output", str(tmp / "runs"),
        "--run-id", "check", cwd=tmp, timeout=400, env=env,
    )  # fmt: skip
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


def _python_workers() -> list[str]:
    """pyspark's Python workers (its daemon and the workers it forks) in this test's network
    namespace (--worker-netns: everything this test started, and only that, lives in it)."""
    import psutil

    here = Path("/proc/self/ns/net").readlink()
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info.get("cmdline") or [])
        if "pyspark.daemon" not in line and "pyspark.worker" not in line:
            continue
        with contextlib.suppress(OSError):  # it ended meanwhile
            if Path(f"/proc/{proc.pid}/ns/net").readlink() == here:
                found.append(f"{proc.pid} {line[:120]}")
    return found


def _ended(standalone, tmp):
    """The check's application is gone: the master removed it, its executors ended, and so did
    their Python workers and every process carrying the launch's tag."""
    from tests import sparkstandalone

    launch = tmp / "runs" / "check" / "check"
    found = re.search(r"on Spark application (\S+):", (launch / "spark-driver.log").read_text())
    assert found is not None, (launch / "spark-driver.log").read_text()
    app = found.group(1)
    master_log = standalone.root / "master.log"
    wait_for(
        lambda: f"Removing app {app}" in master_log.read_text(errors="replace"),
        timeout=60,
        what=f"the master to remove {app}",
    )
    wait_for(
        lambda: sparkstandalone.executor_pids(0) + sparkstandalone.executor_pids(1) == [],
        timeout=60,
        what="the check's executors to end",
    )
    wait_for(lambda: _python_workers() == [], timeout=30, what="no Python worker of Spark's")
    wait_for(lambda: launch_processes() == [], timeout=30, what="no process of the launch")


@pytest.mark.alone  # a clean check flags nothing: a quiet machine's claim (pyproject.toml)
def test_a_clean_check_on_standalone_spark_names_the_executors_hosts_and_ends_its_app(
    standalone, no_leftovers
):
    from tests import sparkstandalone

    done, data = _check(no_leftovers, standalone.url, "--local-nodes", "2", "--port", "29900")
    assert done.returncode == 0, done.stdout + done.stderr
    # Spark chooses which worker runs which barrier task: the hosts, in either order
    hosts = [node["host"] for node in data["nodes"]]
    assert sorted(hosts) == list(sparkstandalone.WORKERS), data
    assert [node["verdict"] for node in data["nodes"]] == ["ok", "ok"]
    assert [(link["a"], link["b"], link["verdict"]) for link in data["links"]] == [
        (*hosts, "unjudged")
    ]
    _ended(standalone, no_leftovers)


@pytest.mark.alone  # a clean check flags nothing: a quiet machine's claim (pyproject.toml)
@pytest.mark.parametrize(
    ("standalone", "executor_cores", "port"),
    [((2, "1g"), None, "29910"), ((2, "2g"), 1, "29940")],
    indirect=["standalone"],
    ids=["one-executor-a-host", "two-executors-a-host"],
)
def test_spark_tasks_on_one_host_are_judged_as_that_host(
    standalone, executor_cores, port, no_leftovers
):
    """dtrun's defaults on workers of two cores: check asks for 4 barrier tasks, and Spark's
    standalone master gives each worker one executor of both cores, so two tasks run on each
    host; with spark.executor.cores 1 (spark-defaults.conf), two executors a host. Each host is
    one node of two processes (its figure its slower one's), and the only pair is between the
    hosts. Before, the two tasks of a host were two nodes compared with each other, and the
    driver's executor watch (2 executors for 4 tasks) cancelled the running check after 130 s
    as if Spark had given it no executors."""
    from tests import sparkstandalone

    env = None
    if executor_cores is not None:
        conf = no_leftovers / "spark-conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text(f"spark.executor.cores {executor_cores}\n")
        env = {**os.environ, "SPARK_CONF_DIR": str(conf)}
    done, data = _check(no_leftovers, standalone.url, "--port", port, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dtrun check: 4 Spark tasks x 1" in done.stderr
    hosts = [node["host"] for node in data["nodes"]]
    assert sorted(hosts) == list(sparkstandalone.WORKERS), data
    assert [node["verdict"] for node in data["nodes"]] == ["ok", "ok"]
    for node in data["nodes"]:
        each = node["figures"]["compute_gflops_each"]
        assert len(each) == 2 and node["figures"]["compute_gflops"] > 0, node
    assert [(link["a"], link["b"], link["verdict"]) for link in data["links"]] == [
        (*hosts, "unjudged")
    ]
    result = json.loads((no_leftovers / "runs" / "check" / "check" / "result.json").read_text())
    assert sorted(len(node["ranks"]) for node in result["nodes"]) == [2, 2], result["nodes"]
    assert [[pair["nodes"] for pair in round_] for round_ in result["rounds"]] == [[[0, 1]]]
    # what Spark gave: each worker launched one executor, or two of a core each
    launched = [
        (standalone.root / f"worker-{i}.log").read_text().count("Asked to launch executor")
        for i in range(2)
    ]
    assert launched == ([1, 1] if executor_cores is None else [2, 2]), launched
    _ended(standalone, no_leftovers)


SHARE = 0.15  # of one CPU for the slow worker and all it starts (tests/faults.py)


@pytest.mark.parametrize(
    ("standalone", "ask", "port"),
    [((1, "1g"), ("--local-nodes", "2"), "29920"), ((2, "1g"), (), "29930")],
    indirect=["standalone"],
    ids=["one-task-a-host", "two-tasks-a-host"],
)
def test_a_throttled_spark_worker_is_named_alone_with_cause_compute(
    standalone, ask, port, no_leftovers
):
    """What the worker on 127.0.0.42 runs in a cpu cgroup with a quota while the check
    measures: its executor, the executor's Python workers and the ranks they run are its
    descendants; the check names that host alone, exit 5."""
    from tests import faults, sparkstandalone

    slow, fine = sparkstandalone.WORKERS[1], sparkstandalone.WORKERS[0]
    with faults.slow_tree(
        standalone.worker_pid(1), SHARE,
        after=lambda: faults.check_said(no_leftovers, "dtrun: checking"),
        until=lambda: faults.check_said(no_leftovers, "dtrun: checked"),
    ) as group:  # fmt: skip
        done, data = _check(no_leftovers, standalone.url, *ask, "--port", port)
        periods, _ = group.throttled()
    assert periods > 0, "the quota never held the worker back"
    assert done.returncode == 5, done.stdout + done.stderr
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts == {slow: ("slow", "compute"), fine: ("ok", None)}, data["nodes"]
    # two hosts' one pair: nothing to compare it with (docs/check.md)
    assert [link["verdict"] for link in data["links"]] == ["unjudged"], data["links"]
    _ended(standalone, no_leftovers)


def _check_killing(tmp, master, port, pids, signal_=None, env=None):
    """`dtrun check` on ``master`` (2 nodes), sending ``pids()`` SIGKILL (or ``signal_``) once
    every rank joined."""
    import signal
    import threading

    from tests import faults

    def kill() -> None:
        wait_for(lambda: faults.check_said(tmp, "dtrun: checking"), timeout=300,
                 what="every rank to join")  # fmt: skip
        for pid in pids():
            os.kill(pid, signal_ or signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        return _check(tmp, master, "--local-nodes", "2", "--port", port, env=env)
    finally:
        killer.join(timeout=60)


def test_a_spark_worker_lost_mid_check_is_named_and_the_other_is_checked(standalone, no_leftovers):
    """The worker on 127.0.0.42 goes down once every rank has joined (its JVM and its
    executor killed, as a host going down): the check names that host and measures the other
    (as a lost sshd node, Slurm node or raylet is: docs/check.md)."""
    from tests import sparkstandalone

    lost, fine = sparkstandalone.WORKERS[1], sparkstandalone.WORKERS[0]
    done, data = _check_killing(
        no_leftovers, standalone.url, "29990",
        lambda: [standalone.worker_pid(1), *sparkstandalone.executor_pids(1)],
    )  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts == {lost: ("failed", "unreachable"), fine: ("ok", None)}, data["nodes"]
    # the node whose executor went, not the one whose gloo then lost its peer (before: that
    # one, by the exit code it wrote, under its task's name)
    evidence = next(n for n in data["nodes"] if n["host"] == lost)["figures"]["evidence"]
    assert re.match(rf"lost during the check: Spark lost spark-\d \({re.escape(lost)}\): "
                    r"Spark lost its executor: worker lost", evidence[0]), evidence  # fmt: skip
    record = json.loads((no_leftovers / "runs" / "check" / "check.json").read_text())
    assert record["nodes"] == data["nodes"]
    _ended(standalone, no_leftovers)


def test_an_executor_killed_mid_check_names_its_host_once_and_fails_the_check(
    standalone, no_leftovers
):
    """Worker 2's executor is SIGKILLed once every rank has joined; the worker lives and starts
    a new one, where Spark may put the next attempt's task. Either way the host is named once,
    failed, with Spark's exit code. In 4 runs here Spark put the next task on the other
    worker's executor each time; where it puts it on the new one, the host is one failed row
    with its figures (tests/unit/test_check.py), not two."""
    from tests import sparkstandalone

    killed = sparkstandalone.WORKERS[1]
    done, data = _check_killing(
        no_leftovers, standalone.url, "29995", lambda: sparkstandalone.executor_pids(1)
    )
    assert done.returncode == 5, done.stdout + done.stderr
    hosts = [n["host"] for n in data["nodes"]]
    assert len(hosts) == len(set(hosts)) and killed in hosts, data["nodes"]
    row = next(n for n in data["nodes"] if n["host"] == killed)
    assert (row["verdict"], row["cause"]) == ("failed", "unreachable"), row
    assert "exit code 137" in row["figures"]["evidence"][0], row
    _ended(standalone, no_leftovers)


# The driver's heartbeat timeout, as a user sets it in their spark-defaults.conf; Spark's own
# defaults (120 s, checked each 60 s) name a silent executor after 2-3 minutes.
HEARTBEAT_CONF = """spark.network.timeout 20s
spark.network.timeoutInterval 5s
spark.executor.heartbeatInterval 2s
"""


def test_a_spark_worker_that_hangs_mid_check_is_named_and_the_other_is_checked(
    standalone, no_leftovers
):
    """Every process of the worker on 127.0.0.42 (its JVM, its executor, the executor's Python
    workers and ranks) is stopped with SIGSTOP once every rank has joined: nothing closes a
    connection, as when a host freezes. Spark names the executor whose heartbeats stopped;
    the check names that host, not the peer whose collective waits on it."""
    import signal

    import psutil

    conf = no_leftovers / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(HEARTBEAT_CONF)
    from tests import sparkstandalone

    hung, fine = sparkstandalone.WORKERS[1], sparkstandalone.WORKERS[0]
    worker = standalone.worker_pid(1)
    family = lambda: [worker, *(p.pid for p in psutil.Process(worker).children(recursive=True))]  # noqa: E731
    try:
        env = os.environ | {"SPARK_CONF_DIR": str(conf)}
        done, data = _check_killing(
            no_leftovers, standalone.url, "29985", family, signal.SIGSTOP, env
        )
    finally:
        for pid in family():  # the host is gone: what it ran goes with it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert done.returncode == 5, done.stdout + done.stderr
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts == {hung: ("failed", "unreachable"), fine: ("ok", None)}, data["nodes"]
    evidence = next(n for n in data["nodes"] if n["host"] == hung)["figures"]["evidence"]
    assert re.match(rf"lost during the check: Spark lost spark-\d \({re.escape(hung)}\)",
                    evidence[0]), evidence  # fmt: skip
    _ended(standalone, no_leftovers)
