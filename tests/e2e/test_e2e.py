"""Real sweeps on the embedded cluster: torchrun, gloo, the train workload, the report.

These start real torchrun processes on 127.0.0.2, 127.0.0.3, ... and take several seconds each.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.errors import NodeFailedError
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.outcome import NodeResult
from dtrun.spec.request import BenchSpec
from dtrun.spec.text import percent
from dtrun.sweep.run import run_sweep
from tests.conftest import (
    DTRUN,
    default_signals,
    launch_processes,
    processes_under,
    run_dtrun,
    wait_for,
)
from tests.plans import sweep_plan

pytestmark = pytest.mark.e2e

QUICK = ("--steps", "6", "--warmup", "2", "--repeat", "1", "--quiet")  # fast, not a verdict


def test_two_node_sweep_with_repeats_writes_results_report_and_proof_of_communication(
    no_leftovers,
):
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--nodes", "1,2", *QUICK, "--repeat", "3", "--output", str(out),
        "--run-id", "e2e", "--port", "29610", "--env", "HF_TOKEN=hunter2", "--json",
        cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = out / "e2e"
    printed = json.loads(done.stdout)  # --json: stdout is the summary alone
    assert printed["run_dir"] == str(run)
    assert "tokens/s" in done.stderr  # ... and the people's output went to stderr

    result = json.loads((run / "n2" / "r0" / "result.json").read_text())
    comm = result["communication"]
    assert result["world_size"] == 2
    assert comm["allreduce_ok"] is True
    assert comm["initial_params_differed"] is True  # each rank started from its own weights
    assert comm["params_in_sync"] is True  # ... and DDP made them equal
    assert len(set(comm["initial_fingerprints"])) == 2
    assert len(set(comm["final_fingerprints"])) == 1
    assert {(r["node"], r["address"]) for r in result["ranks"]} == {
        ("node-0", "127.0.0.2"),
        ("node-1", "127.0.0.3"),
    }
    assert result["tokens_per_s"] > 0
    assert result["step_time_s"]["p90"] >= result["step_time_s"]["p50"] > 0
    # the probe: the same ranks timed all-reduces up to the gradients' size after training
    probe = result["busbw"]
    assert probe["gradient_bytes"] == 4 * result["model"]["params"]
    assert probe["rows"][-1]["size"] == probe["gradient_bytes"]
    assert all(row["in_place"]["wrong"] == 0 for row in probe["rows"])
    assert json.loads((run / "n1" / "r0" / "result.json").read_text())["busbw"] is None

    # the report against the results: each launch's tokens/s at its median step time (from
    # its recorded step times), trimmed means of the kept launches, spread, intervals, verdicts.
    # A launch timed beside the other e2e worker's load is left out (docs/report.md "Noise").
    summary = json.loads((run / "summary.json").read_text())
    assert summary == {k: v for k, v in printed.items() if not k.startswith("report") and
                       k != "run_dir"}  # fmt: skip
    assert summary["status"] == "complete"
    assert [row["nodes"] for row in summary["rows"]] == [1, 2]
    report = (run / "report.md").read_text()
    left_out = {p["nodes"]: p["left_out"] for p in summary["noise"]["points"]}
    expected = {}
    for nodes in (1, 2):
        launches = [
            json.loads((run / f"n{nodes}" / f"r{k}" / "result.json").read_text()) for k in range(3)
        ]
        assert all(len(launch["step_times_s"]) == 4 for launch in launches)  # 6 steps, 2 warm-up
        assert len(left_out[nodes]) <= 1  # left out only while two others were quiet
        kept = [launch for k, launch in enumerate(launches) if k + 1 not in left_out[nodes]]
        values = sorted(
            launch["global_batch"]
            * launch["model"]["seq_len"]
            / statistics.median(launch["step_times_s"])
            for launch in kept
        )
        row = summary["rows"][nodes - 1]
        # a row stands on its kept launches: repeats and launches_n both count them
        assert (row["repeats"], row["steps_n"], row["launches_n"]) == (len(kept), 4, len(kept))
        assert row["tokens_per_s_low"] <= row["tokens_per_s"] <= row["tokens_per_s_high"]
        # three: the fastest and slowest dropped; two: their mean
        middle = values[1] if len(values) == 3 else statistics.fmean(values)
        assert row["tokens_per_s"] == pytest.approx(middle)
        assert row["tokens_per_s_min"] == pytest.approx(values[0])
        assert row["tokens_per_s_max"] == pytest.approx(values[-1])
        expected[nodes] = middle
        assert f"| {nodes} | {row['tokens_per_s']:,.0f} |" in report  # the Verdict's table
        said = f"| {nodes} | {nodes} | 4 x {len(kept)} | {row['tokens_per_s_low']:,.0f}-"
        assert said in report
        if nodes == 2:
            busbws = sorted(launch["busbw"]["rows"][-1]["in_place"]["busbw"] for launch in kept)
            busbw = busbws[1] if len(busbws) == 3 else statistics.fmean(busbws)
            assert row["busbw"] == pytest.approx(busbw)
            # beside the default target, with the decimals that keep it on its side of it
            efficiency = percent(row["efficiency"], BenchSpec.target_efficiency)
            assert f"| 2 | 2 | {efficiency} | {busbw:.2f} GB/s |" in report
    two = summary["rows"][1]
    assert two["efficiency"] == pytest.approx(expected[2] / (2 * expected[1]))
    assert two["efficiency_low"] <= two["efficiency_high"]
    assert two["verdict"] in ("scales", "loses", "inconclusive")  # whichever the numbers say
    more = f" ({len(left_out[2])} more left out for noise)" if left_out[2] else ""
    said = f"- 2 nodes, n = 4 steps x {3 - len(left_out[2])} launches{more}: **{two['verdict']}**"
    assert said in report
    assert "in sync: 2 ranks on 2 nodes" in report
    assert "## Time to train" in report and "## Where scaling is lost" in report
    # the model: a prediction at 2 nodes from the 1-node step time and the probed busbw
    modelled = summary["where_scaling_is_lost"][1]
    assert 0 < modelled["predicted_efficiency_no_overlap"] <= modelled["predicted_efficiency"]
    assert "Predicted against measured" in report  # its table, or where it is when within
    assert modelled["model_finding"] in (run / "report.html").read_text()  # its own column
    for plot in ("throughput.png", "efficiency.png", "busbw.png"):
        assert (run / plot).read_bytes()[:4] == b"\x89PNG", plot
    assert (run / "report.html").read_text().count("data:image/png;base64,") == 3
    for name in ("plan/n1/node-0.sh", "plan/n2/node-1.sh", "n2/r0/node-0.log", "n2/r0/node-1.log"):
        assert (run / name).is_file(), name
    assert "step 6/6" in (run / "n2" / "r0" / "node-0.log").read_text()
    for name in ("manifest.json", "summary.json", "report.md", "report.html", "runs.json"):
        assert "hunter2" not in (run / name).read_text()

    derived = ("summary.json", "report.md", "report.html", "throughput.png", "efficiency.png",
               "busbw.png")  # fmt: skip
    before = {name: (run / name).read_bytes() for name in derived}
    rebuilt = run_dtrun("report", str(run), cwd=no_leftovers)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert {name: (run / name).read_bytes() for name in derived} == before


def test_an_allreduce_sweep_measures_busbw_per_size_and_node_count(no_leftovers):
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--workload", "allreduce", "--nodes", "1,2", "-p", "1", "--sizes", "4K:256K",
        "--ar-iters", "5", "--repeat", "1", "--quiet", "--output", str(out), "--run-id", "ar",
        "--port", "29640", "--json", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["workload"] == "allreduce"
    one, two = summary["busbw_rows"]
    assert (one["world_size"], one["busbw"]) == (1, 0.0)  # one rank moves nothing: factor 0
    assert two["world_size"] == 2 and two["busbw"] > 0 and two["correct"]
    result = json.loads((out / "ar" / "n2" / "r0" / "result.json").read_text())
    assert result["schema"] == "dtrun.allreduce/1"
    assert [row["size"] for row in result["rows"]] == [4096 * 2**k for k in range(7)]
    for row in result["rows"]:
        for mode in ("out_of_place", "in_place"):
            timing = row[mode]
            assert timing["wrong"] == 0
            # nccl-tests: algbw = S / t, busbw = algbw * 2(n-1)/n (= algbw at n = 2)
            assert timing["algbw"] == pytest.approx(row["size"] / 1e9 / (timing["time_us"] / 1e6))
            assert timing["busbw"] == pytest.approx(timing["algbw"])
    assert "| 2 | 2 | 256K |" in (out / "ar" / "report.md").read_text()


class CrashingNode(LocalExecutor):
    """The local executor, but node 1 crashes once node 0's torchrun is up, at ``nodes`` nodes."""

    def __init__(self, nodes: int) -> None:
        super().__init__()
        self.nodes = nodes

    def run(self, plan: LaunchPlan, workdir: Path, **kwargs: object) -> tuple[NodeResult, ...]:
        if plan.nnodes == self.nodes:
            port = int(plan.launches[0].script.split("--rdzv-endpoint=127.0.0.2:")[1][:5])
            crash = (
                "#!/usr/bin/env bash\n"
                f"until (exec 3<>/dev/tcp/127.0.0.2/{port}) 2>/dev/null; do sleep 0.1; done\n"
                "echo 'node-1: simulated crash'\nexit 1\n"
            )
            launches = list(plan.launches)
            launches[1] = replace(launches[1], script=crash)
            plan = replace(plan, launches=tuple(launches))
        return super().run(plan, workdir, **kwargs)  # type: ignore[arg-type]


def test_a_crashing_node_fails_the_sweep_fast_and_keeps_earlier_results(
    no_leftovers, live_inventory
):
    bench = BenchSpec(
        run_id="crash", node_counts=(1, 2), steps=6, warmup=2, repeat=1, rdzv_port=29620
    )
    with pytest.raises(NodeFailedError) as caught:
        run_sweep(sweep_plan(live_inventory, bench), no_leftovers / "runs", CrashingNode(2))
    error = caught.value
    assert error.node == "node-1"
    assert "exit code 1" in error.message
    assert "simulated crash" in error.message
    # node 0's real torchrun was waiting for node 1 at the rendezvous; dtrun stopped it
    assert [(r.node, r.exit_code) for r in error.node_results] == [("node-0", None), ("node-1", 1)]

    run = no_leftovers / "runs" / "crash"
    runs = json.loads((run / "runs.json").read_text())
    assert runs["status"] == "failed"
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(1, "ok"), (2, "failed")]
    assert (run / "n1" / "r0" / "result.json").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert [row["nodes"] for row in summary["rows"]] == [1]
    assert "Status: **failed**" in (run / "report.md").read_text()


def test_a_sigkilled_dtrun_leaves_no_process_of_its_launch(no_leftovers):
    """SIGKILL runs none of dtrun's code: the launch's guard (runner/execute/guard.py) sees
    dtrun's pipe close and stops every process carrying the launch's tag, torchrun's workers in
    their own sessions included."""
    out = no_leftovers / "runs"
    proc = subprocess.Popen(
        [*DTRUN, "bench", "--nodes", "2", "--steps", "100000", "--warmup", "1", "--repeat", "1",
         "--quiet", "--output", str(out), "--run-id", "killed", "--port", "29642"],
        cwd=no_leftovers, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=default_signals,
    )  # fmt: skip
    point = out / "killed" / "n2" / "r0"

    def workers() -> int:
        found = 0
        for p in processes_under(point):
            with contextlib.suppress(psutil.Error):
                found += "RANK" in p.environ()  # torchrun's workers, not its agents
        return found

    try:
        wait_for(lambda: workers() == 2, timeout=120, what="both ranks to have started")
    finally:
        proc.kill()
        proc.wait(timeout=10)
    wait_for(
        lambda: processes_under(no_leftovers) == [] and launch_processes() == [],
        timeout=20,
        what="the guard to stop every process of the launch",
    )


@pytest.mark.parametrize(
    ("stop", "code", "said"),
    [
        (signal.SIGINT, 130, "interrupted by the user (Ctrl-C)"),
        (signal.SIGTERM, 143, "stopped by SIGTERM"),  # timeout, CI cancels, systemd, kill
        (signal.SIGHUP, 129, "stopped by SIGHUP"),  # the terminal or SSH session closed
        (signal.SIGQUIT, 131, "stopped by SIGQUIT"),  # Ctrl-\
        # Ctrl-C, then the user's tooling's SIGTERM while dtrun stops: the first one names it,
        # and the second does not cut the record of how each node ended
        ((signal.SIGINT, signal.SIGTERM), 130, "interrupted by the user (Ctrl-C)"),
    ],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGINT-then-SIGTERM"],
)
def test_a_signal_stops_every_process_and_keeps_the_record(no_leftovers, stop, code, said):
    stops = stop if isinstance(stop, tuple) else (stop,)
    port = 29630 + 2 * int(stops[-1]) + 40 * len(stops)
    out = no_leftovers / "runs"
    proc = subprocess.Popen(
        [*DTRUN, "bench", "--nodes", "2", "--steps", "100000", "--warmup", "1", "--repeat", "1",
         "--output", str(out), "--run-id", "sigint", "--port", str(port)],
        cwd=no_leftovers, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    point = out / "sigint" / "n2" / "r0"

    def training() -> bool:
        # torchrun's workers, unlike its agents, have RANK in their environment
        workers = []
        for p in processes_under(point):
            try:
                if "RANK" in p.environ():
                    workers.append(p)
            except psutil.Error:
                pass
        return len(workers) == 2

    try:
        wait_for(training, timeout=120, what="both ranks to have started")
    except BaseException:
        proc.kill()
        raise
    for one in stops:
        proc.send_signal(one)
        time.sleep(0.5)  # the first is being handled (dtrun is stopping the nodes)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stdout + stderr
    assert said in stderr
    # the first word after the signal says what is being stopped
    assert f"dtrun: {said}: stopping 2 nodes..." in stdout + stderr
    # without --quiet the nodes' lines stream to the console until the stop; what torchrun
    # prints while it stops (its SignalException traceback) is in the node's log only
    assert "SignalException" in (point / "node-0.log").read_text()
    assert "Traceback" not in stdout + stderr and "SignalException" not in stdout + stderr
    assert processes_under(no_leftovers) == []
    runs = json.loads((out / "sigint" / "runs.json").read_text())
    assert (runs["status"], runs["error"]) == ("interrupted", said)
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(2, "interrupted")]
    nodes = runs["runs"][0]["node_results"]
    assert [(n["node"], n["log_path"]) for n in nodes] == [
        (name, str(point / f"{name}.log")) for name in ("node-0", "node-1")
    ]
    assert (out / "sigint" / "report.md").is_file()


# Rank 0 outlives the fail-fast stop's SIGTERM (it says it got it, for the test's handshake);
# rank 1 fails once rank 0 trains.
_FAILS_WHILE_ONE_HOLDS = """\
import os, pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
if os.environ["RANK"] == "0":
    signal.signal(signal.SIGTERM, lambda *_: (here / "term-seen").touch())
    (here / "training").touch()
    while True:
        time.sleep(0.1)
while not (here / "training").exists():
    time.sleep(0.1)
sys.exit(3)
"""


def test_a_signal_while_a_failed_launch_stops_keeps_the_failure_in_the_record(no_leftovers):
    """SIGTERM while dtrun stops the nodes a failure left (their grace period): the record
    says the node that failed and its exit code, and the stop, not only the stop."""
    (no_leftovers / "prog.py").write_text(_FAILS_WHILE_ONE_HOLDS)
    out = no_leftovers / "runs"
    proc = subprocess.Popen(
        [*DTRUN, "bench", "--nodes", "2", "--repeat", "1", "--no-health-gate", "--output",
         str(out), "--run-id", "f", "--port", "29744", "--", "python", "prog.py",
         str(no_leftovers)],
        cwd=no_leftovers, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    try:  # the stop's SIGTERM reached rank 0, which holds out for the grace period (5 s)
        wait_for(lambda: (no_leftovers / "term-seen").exists(), timeout=120, what="the stop")
    except BaseException:
        proc.kill()
        raise
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout + stderr
    said = "node-1 (127.0.0.3) failed with exit code 1; the other nodes were stopped; stopped "
    said += "by SIGTERM during that stop"
    assert f"error: {said}" in stderr
    runs = json.loads((out / "f" / "runs.json").read_text())
    assert (runs["status"], runs["error"]) == ("interrupted", said)
    (run,) = runs["runs"]
    assert (run["status"], run["error"]) == ("interrupted", said)
    assert [(n["node"], n["exit_code"]) for n in run["node_results"]] == [
        ("node-0", None), ("node-1", 1)
    ]  # fmt: skip
    assert processes_under(no_leftovers) == []


def test_a_launch_leaves_torchrun_s_log_directory_in_its_own_not_in_tmp(tmp_path: Path):
    """Without --log-dir torchrun makes a /tmp/torchelastic_* on every node at every launch
    and never removes it (5,771 here from the suite and the sessions' sweeps)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    (tmp_path / "r.py").write_text("import os\nprint('rank', os.environ['RANK'])\n")
    done = run_dtrun(
        "run", "--nodes", "2", "-o", str(tmp_path / "runs"), "--run-id", "t", "--port", "29736",
        "--", "python", "r.py", cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(temp.glob("torchelastic_*"))
    assert len(list((tmp_path / "runs" / "t" / "launch" / "torchelastic").iterdir())) == 2
