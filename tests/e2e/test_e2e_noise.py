"""Real embedded sweeps with noise made on purpose: the report must name it.

Nothing in dtrun is told about the noise: the tests make it from outside, with a process that
burns CPU, and (for the straggler) a CPU quota on one rank's process.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests import faults
from tests.conftest import processes_under, run_dtrun

pytestmark = pytest.mark.e2e

BURN = [sys.executable, "-c", "while True: pass"]


@contextlib.contextmanager
def burning() -> Iterator[None]:
    """A process spinning on the CPU meanwhile (in its own session: the scheduler shares CPU
    time between sessions, as it does between the embedded nodes)."""
    hog = subprocess.Popen(BURN, start_new_session=True)
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def throttle(root: Path, node: str, stop: threading.Event, group: faults.CpuGroup) -> None:
    """Until ``stop``: once the timed steps have begun (rank 0 logged a step), move ``node``'s
    rank into ``group``, a cpu cgroup whose quota the kernel enforces (tests/faults.py): a node
    throttled as a container's CPU limit or a hot, clocked-down machine would. Not before: the
    rank's imports at a fifth of a CPU would take seconds."""
    while not stop.is_set():
        logs = list(root.glob("runs/*/n*/r*/node-0.log"))
        if any("step " in log.read_text() for log in logs):
            ranks = [p for p in processes_under(root) if _rank_of(p, node)]
            if ranks:
                for rank in ranks:
                    with contextlib.suppress(OSError):  # it ended meanwhile
                        group.join(rank.pid)
                return
        stop.wait(0.02)


def _rank_of(proc: psutil.Process, node: str) -> bool:
    """A training rank (torchrun sets RANK for its workers, not for itself) of ``node``."""
    with contextlib.suppress(psutil.Error):
        env = proc.environ()
        return env.get("DTRUN_NODE_NAME") == node and "RANK" in env
    return False


def bench(cwd: Path, run_id: str, port: int) -> dict[str, object]:
    out = cwd / "runs"
    done = run_dtrun(
        "bench", "--nodes", "2", "--steps", "20", "--warmup", "2", "--repeat", "1", "--no-busbw",
        "--quiet",
        "--output", str(out), "--run-id", run_id, "--port", str(port), cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = out / run_id
    summary: dict[str, object] = json.loads((run / "summary.json").read_text())
    summary["report"] = (run / "report.md").read_text()
    summary["html"] = (run / "report.html").read_text()
    return summary


@pytest.mark.alone  # the other worker's launches slow both ranks: 2 misses in 4 full runs here
def test_a_throttled_rank_is_named_a_straggler(no_leftovers):
    stop = threading.Event()
    with faults.cpu_quota(0.2) as group:  # 4 ms in every 20: each probe pass is held back
        slowing = threading.Thread(target=throttle, args=(no_leftovers, "node-1", stop, group))
        slowing.start()
        try:
            summary = bench(no_leftovers, "slow", 29651)
        finally:
            stop.set()
            slowing.join()
        assert group.throttled()[0] > 0, "the quota never held node-1's rank back"
    point = summary["noise"]["points"][0]  # type: ignore[index]
    assert [(s["rank"], s["node"]) for s in point["stragglers"]] == [(1, "node-1")]
    assert point["verdict"] == "unreliable"
    assert "Rank 1 on node-1 (127.0.0.3) is a straggler: it took" in str(summary["report"])


def test_a_cpu_burning_process_during_the_bench_is_reported_as_other_load(no_leftovers):
    with burning():
        summary = bench(no_leftovers, "busy", 29653)
    point = summary["noise"]["points"][0]  # type: ignore[index]
    assert point["other_cores"] > 0.2
    assert point["verdict"] == "unreliable"
    report = str(summary["report"])
    assert "The 2-node point is unreliable: node-0 and node-1 (one machine) spent" in report
    assert f"**Noise**: unreliable at {point['nodes']} nodes (" in report.split("## Set-up")[0]
    # how noise is measured: in report.html (report.md points to docs/report.md)
    assert "every node is a process group on this one machine" in str(summary["html"])
    before = summary["noise"]["before"]  # type: ignore[index]
    assert before["other_cores"] > 0.2  # the burner was running before the sweep, too


def burn_during(run: Path, launch: str, stop: threading.Event) -> None:
    """A CPU burner from when ``launch`` (``n2/r1``) begins until the next launch does."""
    nodes, repeat = launch.split("/r")
    following = run / f"{nodes}/r{int(repeat) + 1}"
    while not stop.is_set() and not (run / launch).exists():
        stop.wait(0.02)
    if stop.is_set():
        return
    with burning():
        while not stop.is_set() and not following.exists():
            stop.wait(0.02)


@pytest.mark.alone  # its claim needs the other launches quiet
def test_a_launch_timed_beside_a_cpu_burner_is_left_out_of_its_point(no_leftovers):
    out = no_leftovers / "runs"
    stop = threading.Event()
    burner = threading.Thread(target=burn_during, args=(out / "left", "n2/r1", stop))
    burner.start()
    try:
        done = run_dtrun(
            "bench", "--nodes", "1,2", "--steps", "20", "--warmup", "2", "--repeat", "3",
            "--no-busbw", "--quiet", "--output", str(out), "--run-id", "left",
            "--port", str(29655), cwd=no_leftovers,
        )  # fmt: skip
    finally:
        stop.set()
        burner.join()
    assert done.returncode == 0, done.stdout + done.stderr
    run = out / "left"
    summary = json.loads((run / "summary.json").read_text())
    point = summary["noise"]["points"][1]
    burned = json.loads((run / "n2" / "r1" / "result.json").read_text())["noise"]
    assert max(node["other_cores"] for node in burned["nodes"]) > 0.2
    assert point["left_out"] == [2], point
    assert point["verdict"] == "quiet" and point["other_cores"] <= 0.2
    row = summary["rows"][1]
    assert row["launches_n"] == 2 and "measured in noise" not in row["verdict_reason"]
    report = (run / "report.md").read_text()
    assert "Launch 2 of 3 is left out of the 2-node point's interval: node-0 and node-1" in report
