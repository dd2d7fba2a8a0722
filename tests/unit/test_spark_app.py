"""The sweep's one Spark application without Spark: SparkApp drives a stand-in driver that
speaks the driver's protocol (`launch DIR` / `cancel` in, `dtrun-spark-done CODE` out), and the
code the driver ships imports with nothing but the zip on the path."""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

import dtrun
from dtrun.engines.spark.app import DRIVER_LOG, AppTimeout, SparkApp
from dtrun.engines.spark.executor import SparkExecutor
from dtrun.engines.spark.shipping import SHIPPED, build_zip, shipped_root
from dtrun.errors import DiskFullError
from dtrun.execute import LogCut
from dtrun.record.writefail import write_error
from dtrun.workloads.files import CUT_LOGS
from tests.paths import REPO
from tests.unit.test_spark import _plan

# A stand-in driver: answers each launch with its directory's `code` file, ignores a launch of
# a directory holding `hang` until cancelled, and says which of its process it is.
STAND_IN = """\
#!/usr/bin/env bash
echo "driver pid $$"
while read -r word dir; do
  if [ "$word" = launch ]; then
    echo "running $dir"
    [ -e "$dir/hang" ] || echo "dtrun-spark-done $(cat "$dir/code")"
  elif [ "$word" = cancel ]; then
    echo "dtrun-spark-done 130"
  fi
done
"""


def _launch_dir(root: Path, name: str, code: int, *, hang: bool = False) -> Path:
    where = root / name
    where.mkdir()
    (where / "code").write_text(f"{code}\n")
    if hang:
        (where / "hang").touch()
    return where


def test_every_launch_runs_on_the_one_driver_and_a_failed_launch_keeps_it(tmp_path):
    app = SparkApp(lambda tag: STAND_IN, grace_s=2.0)
    lines: list[str] = []
    try:
        assert app.launch(_launch_dir(tmp_path, "a", 0), lines.append, 30) == 0
        assert app.launch(_launch_dir(tmp_path, "b", 1), lines.append, 30) == 1  # failed
        assert app.launch(_launch_dir(tmp_path, "c", 0), lines.append, 30) == 0
        assert app.starts == 1
        # each launch's driver output is in its own directory's log, and the sink
        assert (tmp_path / "c" / "spark-driver.log").read_text() == f"running {tmp_path / 'c'}\n"
        assert (tmp_path / "c" / "spark-driver.sh").read_text() == STAND_IN
    finally:
        app.close()
    assert app.proc is None and not app.up


# A stand-in whose launch fails and whose Spark says, half a second later, that it lost an
# executor: the job failed from that loss before the scheduler logged it.
LATE_LOSS = """\
#!/usr/bin/env bash
while read -r word dir; do
  if [ "$word" = launch ]; then
    echo "dtrun-spark-done 1"
    sleep 0.5
    echo "ERROR TaskSchedulerImpl: Lost executor 0 on 127.0.0.42: worker lost"
  fi
done
"""


def test_a_failed_launch_keeps_its_log_until_spark_says_it_lost_an_executor(tmp_path):
    app = SparkApp(lambda tag: LATE_LOSS, grace_s=2.0)
    lines: list[str] = []
    polled: list[bool] = []

    def settled() -> bool:
        polled.append(any("Lost executor" in line for line in lines))
        return polled[-1]

    try:
        assert app.launch(_launch_dir(tmp_path, "a", 1), lines.append, 30, settled=settled) == 1
    finally:
        app.close()
    # before: the line came after the launch returned, into the next launch's log
    assert "Lost executor 0 on 127.0.0.42" in (tmp_path / "a" / "spark-driver.log").read_text()
    assert polled[0] is False and polled[-1] is True


def test_a_failed_launch_waits_for_spark_s_word_no_longer_than_settle_s(tmp_path, monkeypatch):
    monkeypatch.setattr("dtrun.engines.spark.app.SETTLE_S", 0.2)
    app = SparkApp(lambda tag: STAND_IN, grace_s=2.0)
    polls: list[str] = []

    def never(name: str) -> Callable[[], bool]:
        def settled() -> bool:
            polls.append(name)
            return False

        return settled

    try:
        assert app.launch(_launch_dir(tmp_path, "a", 1), print, 30, settled=never("a")) == 1
        assert app.launch(_launch_dir(tmp_path, "b", 0), print, 30, settled=never("b")) == 0
    finally:
        app.close()
    assert "a" in polls and "b" not in polls  # a launch that succeeded waits for nothing


# A stand-in whose Spark did not start (a silent master): it fails the launch and ends.
NOT_STARTED = """\
#!/usr/bin/env bash
read -r word dir
echo "dtrun-spark-done 1"
"""


def test_a_failed_launch_whose_driver_ended_waits_for_no_more_of_its_lines(tmp_path, monkeypatch):
    monkeypatch.setattr("dtrun.engines.spark.app.SETTLE_S", 60.0)
    app = SparkApp(lambda tag: NOT_STARTED, grace_s=2.0)
    polls: list[int] = []

    def never() -> bool:
        polls.append(1)
        return False

    try:
        code = app.launch(_launch_dir(tmp_path, "a", 1), print, 30, settled=never)
    finally:
        app.close()
    # the wait ended with the driver's output, not at SETTLE_S (before: 1,200 polls, 60 s)
    assert code == 1 and len(polls) < 600, len(polls)


def test_a_launch_past_its_time_is_cancelled_and_the_application_stays(tmp_path):
    app = SparkApp(lambda tag: STAND_IN, grace_s=2.0)
    try:
        with pytest.raises(AppTimeout):
            app.launch(_launch_dir(tmp_path, "slow", 0, hang=True), lambda line: None, 0.5)
        assert app.up
        assert app.launch(_launch_dir(tmp_path, "next", 0), lambda line: None, 30) == 0
        assert app.starts == 1
    finally:
        app.close()


def test_a_driver_that_ended_is_started_again_for_the_next_launch(tmp_path):
    quits = "#!/usr/bin/env bash\nread -r word dir; echo 'dtrun-spark-done 1'\n"
    app = SparkApp(lambda tag: quits, grace_s=2.0)
    try:
        assert app.launch(_launch_dir(tmp_path, "a", 0), lambda line: None, 30) == 1
        app.proc.wait(timeout=10)  # type: ignore[union-attr]
        assert app.launch(_launch_dir(tmp_path, "b", 0), lambda line: None, 30) == 1
        assert app.starts == 2
    finally:
        app.close()


def test_closing_the_application_leaves_none_of_its_processes(tmp_path):
    deaf = "#!/usr/bin/env bash\ntrap '' TERM\nsleep 600 &\nwhile read -r _; do :; done\n"
    app = SparkApp(lambda tag: deaf, grace_s=1.0, cancel_wait_s=0.5)  # the cancel goes unheard
    with pytest.raises(AppTimeout):
        app.launch(_launch_dir(tmp_path, "a", 0, hang=True), lambda line: None, 0.2)
    tag = app.tag
    assert not app.up  # a cancel it did not answer stopped it
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DTRUN_LAUNCH") == tag:
                left.append(proc)
        except psutil.Error:
            continue
    assert left == []


# A stand-in whose launch's node 1 says its log was cut on its executor (node_main), and whose
# launch ends only when dtrun cancels it.
CUT_ON_NODE_1 = """\
#!/usr/bin/env bash
while read -r word dir; do
  if [ "$word" = launch ]; then
    echo "dtrun-node 1: training"
    echo "dtrun-log-cut 1: 28 No space left on device"
  elif [ "$word" = cancel ] && [ -z "$cancelled" ]; then
    cancelled=1; echo "dtrun-spark-done 1"
  fi
done
"""


def test_a_node_log_cut_on_its_executor_cancels_the_launch_and_raises_naming_it(tmp_path):
    """node_main's word that its log was cut (a full disk on the executor) stops the launch
    at once, as a failed node does, and the launch raises the OSError naming that log, with
    how each node ended, for the full disk's message and the records. Before, the line was
    shown as the driver's and the launch ran on until --timeout."""
    executor = SparkExecutor("local-cluster[2,1,1024]", sys.executable, str(REPO))
    executor.app = SparkApp(lambda tag: CUT_ON_NODE_1, grace_s=2.0)
    lines: list[tuple[str, str]] = []
    try:
        with pytest.raises(OSError) as raised:
            executor.run(_plan(["spark-0", "spark-1"]), tmp_path, timeout_s=20,
                         on_line=lambda node, line: lines.append((node, line)))  # fmt: skip
    finally:
        executor.close()
    log = tmp_path / "spark-1.log"
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(log))
    assert isinstance(raised.value, LogCut)
    assert [(r.node, r.exit_code) for r in raised.value.node_results] == [
        ("spark-0", None),
        ("spark-1", None),
    ]
    assert CUT_LOGS[str(log)] == "No space left on device"  # the records say it was cut
    assert ("spark-1", "training") in lines and not [n for n, line in lines if "cut" in line]
    said = write_error(raised.value, tmp_path)
    assert isinstance(said, DiskFullError)
    assert "spark-1.log could not be written, so the launch was stopped" in said.message


# A stand-in that prints without end once launched, until dtrun cancels the launch.
SPEWS = """\
#!/usr/bin/env bash
while read -r word dir; do
  if [ "$word" = launch ]; then
    while :; do echo "dtrun-node 0: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; done &
    spew=$!
  elif [ "$word" = cancel ] && [ -n "$spew" ]; then
    kill "$spew"; wait "$spew"; spew=; echo "dtrun-spark-done 1"
  fi
done
"""


def test_a_driver_log_the_disk_cannot_hold_cancels_the_launch_and_raises_naming_it(
    small_disk: Callable[[int], Path],
):
    """spark-driver.log, written here, on a full disk: the launch is cancelled as for a failed
    node and raises the OSError naming that log. Before, the log stopped and the launch ran on,
    its output unkept, until --timeout."""
    disk = small_disk(64)
    app = SparkApp(lambda tag: SPEWS, grace_s=2.0)
    try:
        with pytest.raises(OSError) as raised:
            app.launch(_launch_dir(disk, "a", 0), lambda line: None, 20)
        assert app.up  # the application stays for the next launch, as after a failed one
    finally:
        app.close()
    assert (raised.value.errno, raised.value.filename) == (
        errno.ENOSPC,
        str(disk / "a" / DRIVER_LOG),
    )


def test_a_node_s_cut_log_is_named_over_the_driver_log_its_own_lines_then_filled(tmp_path):
    """The driver's log holds the nodes' lines too: on a full disk it may fail on lines a node
    sent before its own log stopped and said so. The node's log is the one named; the first
    node's stays named. Before, the first cut won: spark-driver.log under horovod.spark."""
    app = SparkApp(lambda tag: SPEWS, grace_s=2.0)

    def cut(name: str) -> OSError:
        return OSError(errno.ENOSPC, "No space left on device", str(tmp_path / name))

    driver, node, other = cut(DRIVER_LOG), cut("spark-1.log"), cut("spark-0.log")
    app.cut_short(driver)
    app.cut_short(node)
    app.cut_short(other)
    app.cut_short(driver)
    assert app.cut is node


def test_the_shipped_zip_alone_imports_the_node_code_and_knows_it_came_from_it(tmp_path):
    shipped = build_zip(Path(dtrun.__file__).resolve().parent, tmp_path)
    assert shipped.name == SHIPPED
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dtrun.engines.spark.node as node; "
        "from dtrun.engines.spark.shipping import shipped_root; print(shipped_root(node.__file__))"
    )
    # -I -S: no PYTHONPATH, no site-packages (dtrun's editable install): only the zip
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(shipped)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(shipped)
    assert shipped_root(dtrun.__file__) is None  # imported from a directory here
