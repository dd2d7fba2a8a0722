"""Issue 41: a Spark point at torchrun's pace. TorchDistributor's rank runs the node's Python
program in its own process (no second Python start), the application starts before the first
launch, and a local-cluster's JVMs start lighter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from dtrun.engines.spark.app import SparkApp
from dtrun.engines.spark.distributor import NODE_MODULE
from dtrun.engines.spark.session import LIGHT_JVM, jvm_settings
from dtrun.render import render
from tests.paths import REPO

PROGRAM = """\
import os, sys
from pathlib import Path
Path("program.pid").write_text(str(os.getpid()))
print("argv", sys.argv[1:], "threads", os.environ["OMP_NUM_THREADS"], flush=True)
sys.exit(int(sys.argv[1]))
"""


def _node_script(tmp_path, program: list[str]) -> None:
    """node-0.sh as dtrun renders it for TorchDistributor, running ``program``."""
    from dtrun.engines.spark.inprocess import PROGRAM_ENV

    script = render(
        "launch/spark-node.sh.j2",
        {
            "version": "test", "run_id": "r", "node_rank": 0, "nnodes": 1,
            "node": {"name": "spark-0", "address": "127.0.0.1"}, "code_dir": str(REPO),
            "env": [{"key": "OMP_NUM_THREADS", "value": "1", "why": ""}], "node_env": [],
            "step_hook": "", "ranks_from": "TorchDistributor's torchrun", "program": program,
        },
    )  # fmt: skip
    assert PROGRAM_ENV in script
    (tmp_path / "node-0.sh").write_text(script)


def _rank(tmp_path) -> tuple[subprocess.CompletedProcess[str], int]:
    """The rank's process as TorchDistributor's torchrun starts it (runner/engines/spark/
    distributor.py), and its pid."""
    env = {**os.environ, "NODE_RANK": "0", "RANK": "0", "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-m", NODE_MODULE, str(tmp_path), "spark-0"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as rank:  # fmt: skip
        out, err = rank.communicate(timeout=60)
    return subprocess.CompletedProcess(rank.args, rank.returncode, out, err), rank.pid


def test_a_python_program_runs_in_the_rank_s_own_process_with_the_script_s_environment(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    _node_script(tmp_path, [sys.executable, str(tmp_path / "prog.py"), "3"])
    done, pid = _rank(tmp_path)
    # the program's exit is the node's and the rank's, after node_main recorded it
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "spark-0.exit").read_text() == "3\n"
    # one process: the rank's; the script's environment (OMP_NUM_THREADS) and arguments
    logged = (tmp_path / "spark-0.log").read_text()
    assert "argv ['3'] threads 1" in logged
    assert "dtrun-node 0: argv ['3'] threads 1" in done.stdout
    assert (tmp_path / "program.pid").read_text() == str(pid)


def test_a_workload_s_exit_now_in_the_rank_gives_its_code_to_the_node(tmp_path):
    (tmp_path / "wl.py").write_text(
        "from dtrun.workloads.result import exit_now\nprint('trained', flush=True)\nexit_now(0)\n"
    )
    _node_script(tmp_path, [sys.executable, "wl.py"])
    done, _ = _rank(tmp_path)
    assert done.returncode == 0, done.stderr
    # os._exit in the workload would have cut node_main short of its exit file
    assert (tmp_path / "spark-0.exit").read_text() == "0\n"
    assert "dtrun-node 0: trained" in done.stdout


def test_a_program_that_is_not_python_runs_as_the_script(tmp_path):
    _node_script(tmp_path, ["sh", "-c", 'echo "pid $$"; exit 4'])
    done, _ = _rank(tmp_path)
    assert done.returncode == 4, done.stderr
    assert (tmp_path / "spark-0.exit").read_text() == "4\n"
    assert "dtrun-node 0: pid" in done.stdout


def test_what_the_driver_says_before_the_first_launch_is_that_launch_s(tmp_path):
    """The application starts when the cluster opens (before any launch): what the driver
    printed meanwhile (Spark starting) lands in the first launch's log, not lost."""
    early = textwrap.dedent("""\
        #!/usr/bin/env bash
        echo "starting Spark"
        while read -r word dir; do
          [ "$word" = launch ] && echo "running $dir" && echo "dtrun-spark-done 0"
        done
        """)  # fmt: skip
    app = SparkApp(lambda tag: early, grace_s=2.0)
    try:
        app.start()
        deadline = time.monotonic() + 10
        while not app.said and time.monotonic() < deadline:
            time.sleep(0.05)
        first = tmp_path / "a"
        first.mkdir()
        assert app.launch(first, lambda line: None, 30) == 0
        assert app.starts == 1
        assert (first / "spark-driver.log").read_text() == f"starting Spark\nrunning {first}\n"
    finally:
        app.close()


def test_only_a_local_cluster_s_jvms_start_lighter():
    assert jvm_settings("local-cluster[2,1,1024]") == {
        "spark.driver.extraJavaOptions": LIGHT_JVM,
        "spark.executor.extraJavaOptions": LIGHT_JVM,
    }
    assert "-XX:TieredStopAtLevel=1" in LIGHT_JVM
    assert jvm_settings("spark://head:7077") == {} and jvm_settings("yarn") == {}


# A node script that says its program (program_of runs it) only after a while.
SLOW_TO_SAY = 'touch "$DTRUN_NODE_PROGRAM.started"; exec sleep 60\n'


def test_a_rank_stopped_while_its_script_says_its_program_leaves_no_temporary_directory(
    tmp_path,
):
    temp = tmp_path / "temp"
    temp.mkdir()
    (tmp_path / "node-0.sh").write_text(SLOW_TO_SAY)
    rank = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; from pathlib import Path; "
         "from dtrun.engines.spark.inprocess import program_of; "
         "program_of(Path(sys.argv[1]), dict(os.environ))", str(tmp_path / "node-0.sh")],
        env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not list(temp.glob("dtrun-node-*/program.started")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(temp.glob("dtrun-node-*/program.started")), "the script never started"
    rank.send_signal(signal.SIGTERM)
    code = rank.wait(timeout=30)
    assert list(temp.iterdir()) == []  # a SIGTERM's default action left it
    assert code == 128 + signal.SIGTERM
