"""One Spark application per sweep, on a real Spark: a failed launch leaves the application to
the next launch, and a standalone worker whose Python has no dtrun runs dtrun's nodes from the
code shipped with the application (runner/engines/spark/shipping.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from dtrun.engines.base import ClusterChoice, Hooks
from dtrun.engines.registry import EngineOptions
from dtrun.engines.spark.app import DRIVER_LOG
from dtrun.engines.spark.engine import SparkEngine
from dtrun.engines.spark.executor import SparkExecutor
from dtrun.errors import NodeFailedError
from dtrun.spec.request import Program, ProgramKind, RunSpec
from tests.conftest import (
    DTRUN,
    default_signals,
    launch_processes,
    run_dtrun,
    wait_for,
)
from tests.paths import REPO
from tests.plans import build_run_plan

pytestmark = pytest.mark.e2e

MASTER = "local-cluster[2,1,1024]"

FAIL_ONCE = """\
import os, pathlib, sys
marker = pathlib.Path(sys.argv[1])
if os.environ["NODE_RANK"] == "1" and not marker.exists():
    marker.write_text("failed once")
    print("node 1 gives up", flush=True)
    sys.exit(3)
print("node", os.environ["NODE_RANK"], "ran", flush=True)
"""


def _spec(run_id: str, script: Path, marker: Path) -> RunSpec:
    program = Program(ProgramKind.SCRIPT, str(script), (str(marker),))
    return RunSpec(run_id, program, nodes=2, procs_per_node=1, launcher="torchdistributor")


def test_a_failed_launch_leaves_the_application_to_the_next_launch(no_leftovers):
    script, marker = no_leftovers / "fail_once.py", no_leftovers / "failed"
    script.write_text(FAIL_ONCE)
    choice = ClusterChoice(EngineOptions(spark=MASTER), nodes=2)
    with SparkEngine().open(choice, Hooks(notice=print)) as cluster:
        executor = cluster.executor
        assert isinstance(executor, SparkExecutor)
        first = build_run_plan(cluster.inventory, _spec("one", script, marker))
        with pytest.raises(NodeFailedError) as failed:
            executor.run(first, no_leftovers / "one", timeout_s=300, on_line=lambda n, t: None)
        assert "spark-1 (127.0.0.1) failed with exit code 3" in failed.value.message
        second = build_run_plan(cluster.inventory, _spec("two", script, marker))
        results = executor.run(second, no_leftovers / "two", timeout_s=300,
                               on_line=lambda n, t: None)  # fmt: skip
        assert [r.exit_code for r in results] == [0, 0]
        assert executor.app.starts == 1  # the second launch ran on the first one's application
        assert "on Spark application" in (no_leftovers / "two" / "spark-driver.log").read_text()
    wait_for(lambda: launch_processes() == [], timeout=60, what="no process of the application")


def _python_without_dtrun(root: Path) -> Path:
    """A virtual environment whose Python has torch and pyspark (this one's packages, named by
    a .pth line, whose own .pth files, dtrun's editable install among them, are not read) and
    no dtrun."""
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
         str(root)],
        check=True,
    )  # fmt: skip
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture
def bare_standalone(tmp_path_factory):
    from tests import sparkstandalone

    cluster = sparkstandalone.start(tmp_path_factory.mktemp("spark-bare"), bare=True)
    yield cluster
    cluster.close()


def test_a_worker_whose_python_has_no_dtrun_runs_the_code_shipped_with_the_application(
    bare_standalone, no_leftovers
):
    python = _python_without_dtrun(no_leftovers / "venv")
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [str(python), "-c", "import torch, pyspark; import dtrun.engines.spark.node"],
        env=bare, cwd="/", capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert probe.returncode == 1 and "No module named 'dtrun.engines'" in probe.stderr, probe
    program = no_leftovers / "where.py"
    program.write_text("import os, sys; print('pythonpath', os.environ['PYTHONPATH'])\n")
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--spark", bare_standalone.url, "--launcher", "torchdistributor", "--nodes", "2",
        "--output", str(out), "--run-id", "bare", "--", str(python), str(program),
        cwd=no_leftovers, timeout=300, env={**os.environ, "PYSPARK_PYTHON": str(python)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((out / "bare" / "run.json").read_text())
    assert [n["exit_code"] for n in record["nodes"]] == [0, 0]
    for node in ("spark-0", "spark-1"):  # node_main, imported from the zip, put it there
        assert "dtrun-node.zip" in (out / "bare" / "launch" / f"{node}.log").read_text()
    wait_for(lambda: launch_processes() == [], timeout=60, what="the executors to end")


def test_sigkill_of_dtrun_leaves_no_process_of_the_application(no_leftovers):
    """dtrun runs none of its code: the guard stops every process with the application's tag,
    and the driver, its stdin closed, stops Spark."""
    script = no_leftovers / "sleep.py"
    script.write_text("import time; print('sleeping', flush=True); time.sleep(600)\n")
    own_tmp = no_leftovers / "tmp"  # other workers' Spark tests make theirs in the shared /tmp
    own_tmp.mkdir()
    dtrun = subprocess.Popen(
        [*DTRUN, "run", "--spark", MASTER, "--launcher", "torchdistributor", "--nodes", "2",
         "--output", str(no_leftovers / "runs"), "--", "python", str(script)],
        cwd=no_leftovers, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=default_signals, env=os.environ | {"TMPDIR": str(own_tmp)},
    )  # fmt: skip
    runs = no_leftovers / "runs"  # the program runs inside each rank: its logs say it started
    nodes_logs = lambda: (log for log in runs.rglob("spark-*.log") if log.name != DRIVER_LOG)  # noqa: E731
    wait_for(
        lambda: sum(b"sleeping" in log.read_bytes() for log in nodes_logs()) >= 2,
        timeout=180,
        what="both nodes' programs to start",
    )
    left = lambda: list(own_tmp.glob("dtrun-spark-*"))  # noqa: E731
    assert left(), "the application made no directory in TMPDIR"
    dtrun.send_signal(signal.SIGKILL)
    assert dtrun.wait(timeout=10) == -signal.SIGKILL
    wait_for(lambda: launch_processes() == [], timeout=60, what="no process of the application")
    # nor its directory of this machine's temporary files (the driver's script, Spark's home)
    wait_for(lambda: not left(), timeout=30, what="the application's directory to go")


# Two dtrun runs, the first failed (FAIL_ONCE), with a /tmp of their own: an empty tmpfs in a
# mount namespace of this script's (other sessions' files there are not the runs'). Then what
# is left in it besides the runs' own directory.
# An empty tmpfs over /tmp, in a mount namespace of the test's own; what the launch needs from
# the old /tmp (a checkout or a venv there: CI's fresh clone may be) is bound back by its top
# folder, KEEP, and is no leftover.
EMPTY_TMP = r"""
set -u
if [ -n "$KEEP" ]; then
  old=$(mktemp -d /var/tmp/dtrun-old-tmp.XXXXXX) && mount --bind /tmp "$old" || exit 91
fi
mount -t tmpfs dtrun-test-tmp /tmp || exit 90
if [ -n "$KEEP" ]; then
  for top in $KEEP; do
    mkdir "/tmp/$top" && mount --bind "$old/$top" "/tmp/$top" || exit 92
  done
  umount "$old" && rmdir "$old"
fi
mkdir /tmp/run && cd /tmp/run && printf '%s' "$1" > fail_once.py && shift
for _ in 1 2; do
  "$@" -- python /tmp/run/fail_once.py /tmp/run/failed
  echo "dtrun exit $?"
done
echo "left in /tmp:" && ls -A /tmp
"""


def test_a_spark_launch_normal_or_failed_leaves_nothing_in_tmp(no_leftovers):
    """The JVMs' java.io.tmpdir is /tmp whatever TMPDIR says: each left a liblz4-java-*.so
    (and its .lck), the driver a spark-* directory, Spark's launcher /tmp/hsperfdata_root."""
    tmp = Path("/tmp")
    keep = sorted({path.relative_to(tmp).parts[0] for path in (REPO, Path(sys.prefix))
                   if path.is_relative_to(tmp)})  # fmt: skip
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", EMPTY_TMP, "bash",
         FAIL_ONCE, *DTRUN, "run", "--spark", MASTER, "--launcher", "torchdistributor",
         "--nodes", "2", "--output", "runs", "--quiet"],
        cwd=no_leftovers, capture_output=True, text=True, timeout=400, check=False,
        env=os.environ | {"KEEP": " ".join(keep)},
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert done.stdout.count("dtrun exit") == 2, said
    assert "dtrun exit 1" in done.stdout and "dtrun exit 0" in done.stdout, said
    # torch's one per-user compile cache (torchinductor_<user>, made as torch._dynamo is
    # imported) does not grow with the runs: not the JVMs' files this is about
    left = [n for n in done.stdout.split("left in /tmp:\n")[1].split() if not n.startswith(
        "torchinductor_")]  # fmt: skip
    assert sorted(left) == sorted(["run", *keep]), said
