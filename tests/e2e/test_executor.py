"""The local executor: streaming, logs, fail-fast, timeout, Ctrl-C, nothing left behind.

Nodes here run small bash scripts, so the behaviour is checked without torch; the tests in
test_e2e.py check the same behaviour with real torchrun launches.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.errors import NodeFailedError, RunTimeoutError
from dtrun.execute.success import Next, after_exit, mark_stopped, settle
from dtrun.spec.cluster import Node
from dtrun.spec.launchplan import LaunchFile, LaunchPlan, NodeLaunch
from dtrun.spec.outcome import NodeResult, SuccessRule
from tests.conftest import default_signals, processes_under, wait_for

# A node that behaves like torchrun: its worker lives in a session of its own.
LIKE_TORCHRUN = """
setsid sleep 600 &
echo "worker $! started"
wait
"""


def plan_of(
    *scripts: str,
    services: tuple[int, ...] = (),
    files=(),
    success: SuccessRule = SuccessRule.ALL,
) -> LaunchPlan:
    launches = tuple(
        NodeLaunch(
            node=Node(f"node-{i}", f"127.0.0.{i + 2}"),
            node_rank=i,
            script_name=f"node-{i}.sh",
            script="#!/usr/bin/env bash\nset -euo pipefail\n" + textwrap.dedent(body),
            service=i in services,
        )
        for i, body in enumerate(scripts)
    )
    return LaunchPlan(
        "fake", "fake", len(launches), 1, len(launches), 1, "id", "127.0.0.2", 1, launches, files,
        success=success,
    )  # fmt: skip


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, node: str, line: str) -> None:
        with self.lock:
            self.lines.append((node, line))


def test_every_node_runs_and_its_output_is_streamed_and_saved(no_leftovers):
    lines = Lines()
    plan = plan_of("echo hello from 0\necho bye >&2", "echo hello from 1")
    results = LocalExecutor().run(plan, no_leftovers / "p", timeout_s=60, on_line=lines)
    assert [r.exit_code for r in results] == [0, 0]
    assert ("node-0", "hello from 0") in lines.lines
    assert ("node-0", "bye") in lines.lines
    assert ("node-1", "hello from 1") in lines.lines
    assert (no_leftovers / "p" / "node-1.log").read_text() == "hello from 1\n"
    assert (no_leftovers / "p" / "node-0.sh").stat().st_mode & 0o777 == 0o700


# A progress bar as tqdm draws it: "\r" before each state, "\n" at its end; then a last line
# with no line end saying whether the bar's 0% state reached dtrun while the bar was still
# drawing: the script waits (at most 10 s) for the file the test's sink makes on seeing it.
def bar(seen_flag: Path) -> str:
    return (
        "printf '\\r 0%%'; sleep 0.1; printf '\\r 50%%'; when=late; for _ in $(seq 200); do "
        f"if [ -e {seen_flag} ]; then when=early; break; fi; sleep 0.05; done; "
        "printf '\\r100%%\\n'; printf %s \"$when\""
    )


def progress_sink(seen_flag: Path, seen: list[str]):
    def sink(node: str, line: str) -> None:
        seen.append(line)
        if line == " 0%\r":
            seen_flag.touch()

    return sink


def test_a_progress_bar_s_states_stream_as_lines_and_the_log_keeps_every_byte(no_leftovers):
    seen: list[str] = []
    flag = no_leftovers / "seen-0"
    LocalExecutor().run(
        plan_of(bar(flag)), no_leftovers / "p", timeout_s=60, on_line=progress_sink(flag, seen)
    )
    # each state as it was drawn over, not every state at the bar's end
    assert seen == ["\r", " 0%\r", " 50%\r", "100%", "early"]
    assert (no_leftovers / "p" / "node-0.log").read_bytes() == b"\r 0%\r 50%\r100%\nearly"


def test_a_failing_node_stops_the_others_and_is_named_with_its_log(no_leftovers):
    plan = plan_of(LIKE_TORCHRUN, "echo 'loading data'\necho 'CUDA error: boom'\nexit 3")
    with pytest.raises(NodeFailedError) as caught:
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=600, on_line=Lines())
    error = caught.value
    assert error.node == "node-1"
    assert "node-1 (127.0.0.3) failed with exit code 3" in error.message
    assert "CUDA error: boom" in error.message
    assert "node-1.log" in error.message
    assert [(r.node, r.exit_code) for r in error.node_results] == [("node-0", None), ("node-1", 3)]
    assert processes_under(no_leftovers) == []


# 5 s: node-1's `echo` must have ended by then for the claim, and a bash started on a loaded
# machine (three e2e workers on 2 cores) may take more than 1 s; node-0 sleeps 600 s
def test_a_launch_past_its_timeout_is_stopped_and_the_running_nodes_named(no_leftovers):
    plan = plan_of(LIKE_TORCHRUN, "echo done")
    with pytest.raises(RunTimeoutError, match="did not finish within 5 s") as caught:
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=5, on_line=Lines())
    assert "still running when stopped: node-0" in caught.value.message
    assert "node-1" not in caught.value.why
    assert processes_under(no_leftovers) == []


# A program that daemonizes: its child, in a session of its own, is orphaned to init at once,
# so no reading of the node's process tree ever sees it.
DAEMON = "(setsid sleep 600 &)\necho daemon started"


def test_a_daemon_a_node_left_running_is_stopped_when_the_launch_ends(no_leftovers):
    LocalExecutor().run(plan_of(DAEMON), no_leftovers / "p", timeout_s=60, on_line=Lines())
    assert processes_under(no_leftovers) == []


def test_a_daemon_a_node_left_running_is_stopped_when_another_node_fails(no_leftovers):
    plan = plan_of(DAEMON + "\nsleep 600", "sleep 1\nexit 1")
    with pytest.raises(NodeFailedError):
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=60, on_line=Lines())
    assert processes_under(no_leftovers) == []


def test_a_process_that_ignores_sigterm_is_killed(no_leftovers):
    # node-1 fails once node-0 ignores SIGTERM (its file says so), not after a fixed 0.5 s: a
    # bash started late on a loaded machine would die of the stop's SIGTERM, and nothing would
    # be left for the SIGKILL this test is about
    stubborn = "trap '' TERM\ntouch ignoring\nwhile true; do sleep 0.2; done"
    plan = plan_of(stubborn, "until [ -e ignoring ]; do sleep 0.05; done\nexit 1")
    with pytest.raises(NodeFailedError):
        LocalExecutor(grace_s=0.5).run(plan, no_leftovers / "p", timeout_s=60, on_line=Lines())
    assert processes_under(no_leftovers) == []


def test_a_signal_death_is_reported_as_the_signal(no_leftovers):
    plan = plan_of("kill -KILL $$")
    with pytest.raises(NodeFailedError, match="failed with signal SIGKILL"):
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=60, on_line=Lines())


def test_ctrl_c_stops_every_node_process_before_dtrun_exits(no_leftovers):
    driver = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from tests.e2e.test_executor import plan_of, LIKE_TORCHRUN
        from dtrun.engines.embedded.executor import LocalExecutor

        def line(node, text):
            print(node, text, flush=True)

        plan = plan_of(LIKE_TORCHRUN, LIKE_TORCHRUN)
        LocalExecutor().run(plan, Path({str(no_leftovers / "p")!r}), timeout_s=600, on_line=line)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True, cwd=".", bufsize=1,
        preexec_fn=default_signals,
    )  # fmt: skip
    assert proc.stdout is not None
    started = [proc.stdout.readline(), proc.stdout.readline()]
    assert all("worker" in line for line in started), started
    wait_for(lambda: len(processes_under(no_leftovers)) >= 4, timeout=30, what="4 node processes")
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # say whether the driver could see the signal at all
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        proc.kill()
        raise AssertionError(
            f"no exit 60 s after SIGINT: {[s for s in status if 'Sig' in s]}"
        ) from None
    assert proc.returncode != 0
    assert processes_under(no_leftovers) == []


def test_launch_files_are_written_beside_the_scripts_before_any_node_starts(no_leftovers):
    files = (LaunchFile("hostfile", "127.0.0.2 slots=1\n"), LaunchFile("wrap.sh", "echo", 0o755))
    plan = plan_of("cat hostfile\ntest -x wrap.sh", files=files)
    lines = Lines()
    LocalExecutor().run(plan, no_leftovers / "p", timeout_s=60, on_line=lines)
    assert ("node-0", "127.0.0.2 slots=1") in lines.lines
    assert (no_leftovers / "p" / "hostfile").stat().st_mode & 0o777 == 0o644


def test_service_nodes_are_stopped_once_every_other_node_is_done(no_leftovers):
    # node 1 serves (TensorFlow's parameter servers) and would never exit on its own
    plan = plan_of("sleep 0.5\necho trained", LIKE_TORCHRUN, services=(1,))
    results = LocalExecutor().run(plan, no_leftovers / "p", timeout_s=60, on_line=Lines())
    assert [(r.node, r.exit_code) for r in results] == [("node-0", 0), ("node-1", None)]
    assert processes_under(no_leftovers) == []


def test_a_service_node_that_fails_fails_the_launch(no_leftovers):
    plan = plan_of(LIKE_TORCHRUN, "echo 'ps crashed'\nexit 4", services=(1,))
    with pytest.raises(NodeFailedError, match=r"node-1 \(127\.0\.0\.3\) failed with exit code 4"):
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=60, on_line=Lines())
    assert processes_under(no_leftovers) == []


def test_under_worker0_node_0_exiting_0_ends_the_launch_and_stops_the_others(no_leftovers):
    # node 0 finishes once the others' workers run (a synchronisation: they exist to be stopped)
    worker = "setsid sleep 600 &\ntouch started-$$\nwait"
    node_0 = "until [ $(ls started-* 2>/dev/null | wc -l) -ge 2 ]; do sleep 0.05; done\necho ok"
    plan = plan_of(node_0, worker, worker, success=SuccessRule.WORKER0)
    results = LocalExecutor().run(plan, no_leftovers / "p", timeout_s=600, on_line=Lines())
    assert [(r.node, r.exit_code, r.stopped_after_worker0) for r in results] == [
        ("node-0", 0, False),
        ("node-1", None, True),
        ("node-2", None, True),
    ]
    assert processes_under(no_leftovers) == []


def test_under_worker0_a_node_failing_before_node_0_is_done_still_fails_fast(no_leftovers):
    plan = plan_of(LIKE_TORCHRUN, "echo 'bad shard'\nexit 3", success=SuccessRule.WORKER0)
    with pytest.raises(NodeFailedError, match=r"node-1 \(127\.0\.0\.3\) failed with exit code 3"):
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=600, on_line=Lines())
    assert processes_under(no_leftovers) == []


def test_under_the_default_rule_node_0_exiting_0_waits_for_the_others(no_leftovers):
    plan = plan_of("echo trained", LIKE_TORCHRUN)
    # node-0's `echo` ended well within the 5 s (it would be named too), node-1 never does
    with pytest.raises(RunTimeoutError, match="still running when stopped: node-1"):
        LocalExecutor().run(plan, no_leftovers / "p", timeout_s=5, on_line=Lines())
    assert processes_under(no_leftovers) == []


def test_the_success_rule_decides_on_each_exit_in_the_order_they_happened():
    zero, one = plan_of("true", "true").launches
    assert after_exit(SuccessRule.ALL, zero, 0) is Next.WAIT
    assert after_exit(SuccessRule.WORKER0, zero, 0) is Next.DONE
    assert after_exit(SuccessRule.WORKER0, one, 0) is Next.WAIT
    assert after_exit(SuccessRule.WORKER0, zero, 1) is Next.FAILED
    # a failure after node 0 exited 0 is dtrun stopping it, not a failure of the launch
    done = settle(SuccessRule.WORKER0, [(2.0, one, 143), (1.0, zero, 0)])
    assert (done.next, done.launch, done.at) == (Next.DONE, zero, 1.0)
    failed = settle(SuccessRule.WORKER0, [(0.5, one, 3), (1.0, zero, 0)])
    assert (failed.next, failed.launch) == (Next.FAILED, one)
    assert settle(SuccessRule.ALL, [(1.0, zero, 0), (2.0, one, 0)]).next is Next.WAIT


def test_only_worker0_marks_the_nodes_dtrun_stopped_as_stopped_after_worker_0():
    results = (NodeResult("node-0", "a", 0, "l", 1.0), NodeResult("node-1", "b", None, "l", 1.0))
    assert [r.stopped_after_worker0 for r in mark_stopped(SuccessRule.WORKER0, results)] == [
        False,
        True,
    ]
    assert mark_stopped(SuccessRule.ALL, results) == results


class CtrlCWhileStopping(LocalExecutor):
    """A Ctrl-C comes while the nodes are being stopped (held back by sigint_deferred)."""

    def _stop(self, nodes, tag):
        signal.raise_signal(signal.SIGINT)
        super()._stop(nodes, tag)


def test_a_ctrl_c_while_a_cut_log_s_launch_stops_is_the_interruption_and_says_the_cut(
    small_disk, no_leftovers
):
    """node-0 prints without end on a 64 KiB disk, node-1 sleeps: once node-0's log cannot be
    written every node is stopped, and a Ctrl-C during that stop is the launch's interruption,
    with the cut log as its end (records: interrupted, saying both). Before, the Ctrl-C was
    dropped and the launch raised the cut alone (LogCut: failed, exit 1)."""
    from dtrun.errors import LaunchInterrupted

    disk = small_disk(64)
    plan = plan_of("while true; do echo " + "x" * 200 + "; done", LIKE_TORCHRUN)
    with pytest.raises(LaunchInterrupted) as caught:
        CtrlCWhileStopping().run(plan, disk / "p", timeout_s=120, on_line=Lines())
    ended = caught.value.ended
    assert ended is not None and "node log " in ended.what and "node-0.log" in ended.what
    assert [r.node for r in caught.value.node_results] == ["node-0", "node-1"]
    assert processes_under(no_leftovers) == []
