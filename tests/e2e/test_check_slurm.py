"""`dtrun check --slurm` on the tests' Slurm cluster (docs/check.md). Its own file: the Slurm
daemons are the machine's, so tests/machine.py keeps every test that uses them on one worker."""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import pytest

from tests import faults
from tests.conftest import DTRUN, default_signals, ends_within, run_dtrun, wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.alone  # a clean check flags nothing: a quiet machine's claim (pyproject.toml)
def test_a_check_on_slurm_names_its_nodes_as_slurm_does_and_ends_its_job(slurm, no_leftovers):
    done = run_dtrun(
        "check", "--slurm", "--local-nodes", "2", "--port", "29880", "--json",
        "--output", str(no_leftovers / "runs"), "--run-id", "check",
        cwd=no_leftovers, env=slurm.env, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [(n["host"], n["verdict"]) for n in data["nodes"]] == [("n1", "ok"), ("n2", "ok")]
    assert [(link["a"], link["b"], link["verdict"]) for link in data["links"]] == [
        ("n1", "n2", "unjudged")  # two nodes' one pair: nothing to compare it with
    ]
    assert slurm.jobs() == []  # the allocation dtrun asked for is gone


SHARE = 0.2  # of one CPU: the throttled node's quota, as tests/e2e/test_check.py's


@pytest.mark.alone  # "the other ok": a quiet machine's claim
@pytest.mark.parametrize(("slow", "port"), [("n2", "29890"), ("n1", "29892")])
def test_a_throttled_slurm_node_is_named_slow_for_compute_by_its_slurm_name(
    slurm, no_leftovers, slow, port
):
    """Every process of one node (its slurmd, the slurmstepd it forks, their tasks) held to a
    fifth of a CPU from when every rank has joined: two nodes' one pair is judged against
    nothing on CPUs (docs/check.md), their compute, each against the other's by the minimum
    effect, names it (54-83% below here, loaded or not). n1 also runs the allocation's batch
    script. (A tenth of a CPU for 1 s in every 2 was named in 4 of 5: missed where its timings
    fell free and a loaded machine kept its CPU wait under 3x the other's, docs/check.md.)"""
    with faults.slow_found(
        lambda: slurm.node_processes(slow), SHARE,
        after=lambda: faults.check_said(no_leftovers, "dtrun: checking"),
        until=lambda: faults.check_said(no_leftovers, "dtrun: checked"),
    ) as group:  # fmt: skip
        done = run_dtrun(
            "check", "--slurm", "--local-nodes", "2", "--port", port, "--json",
            "--output", str(no_leftovers / "runs"), "--run-id", "slow",
            cwd=no_leftovers, env=slurm.env, timeout=280,
        )  # fmt: skip
        periods, _ = group.throttled()
    said = done.stdout + done.stderr
    assert periods > 0, "the quota never held the node back"
    assert done.returncode == 5, said
    data = json.loads(done.stdout)
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    other = "n1" if slow == "n2" else "n2"
    assert verdicts == {slow: ("slow", "compute"), other: ("ok", None)}, said
    assert [link["verdict"] for link in data["links"]] == ["unjudged"], said
    assert f"next Slurm job: --exclude {slow}" in said, said
    record = json.loads((no_leftovers / "runs" / "slow" / "check.json").read_text())
    assert record["nodes"] == data["nodes"]
    wait_for(lambda: slurm.jobs() == [], timeout=30, what="the allocation to end")


@pytest.mark.parametrize(
    ("command", "said", "fix"),
    [(("check",), "needs 4 nodes (check's default; --local-nodes sets it)", "--local-nodes"),
     (("exec", "--local-nodes", "3"), "needs 3 nodes (--local-nodes)", "--local-nodes"),
     (("bench", "--nodes", "1,3"), "needs 3 nodes (the largest of --nodes)", "--nodes")],
    ids=["check", "exec", "bench"],
)  # fmt: skip
def test_more_nodes_than_the_partition_names_the_option_that_asked_for_them(
    slurm, no_leftovers, command, said, fix
):
    """`dtrun check --slurm` asks for 4 nodes unless --local-nodes says otherwise. Before, on
    this 2-node partition, it said "(the largest of --nodes)", an option check does not have."""
    rest = ("--", "true") if command[0] == "exec" else ("--output", str(no_leftovers / "runs"))
    done = run_dtrun(*command, "--slurm", *rest, cwd=no_leftovers, env=slurm.env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"dtrun {said} and Slurm partition debug has 2" in done.stderr
    assert f"next: ask for at most 2 nodes with {fix}, or pass --partition" in done.stderr
    assert slurm.jobs() == []


@pytest.mark.parametrize(("fault", "port"), [("set-down", "29884"), ("hung", "29888")])
def test_a_node_slurm_loses_mid_check_is_named_and_the_other_is_checked(
    slurm, no_leftovers, fault, port
):
    """n2 set down once every rank has joined, or hung (every process of it SIGSTOPped: Slurm
    finds it after SlurmdTimeout, 30 s here): the check names it and measures n1 in the same
    allocation (before: the whole check failed, check.json naming no node)."""
    done, said = _down_mid_check(slurm, no_leftovers, "n2", port, hang=fault == "hung")
    assert done.returncode == 5, said
    data = json.loads(done.stdout)
    verdicts = {n["host"]: (n["verdict"], n["cause"]) for n in data["nodes"]}
    assert verdicts == {"n1": ("ok", None), "n2": ("failed", "unreachable")}, said
    evidence = next(n for n in data["nodes"] if n["host"] == "n2")["figures"]["evidence"]
    assert evidence[0].startswith("lost during the check: Slurm lost node n2"), evidence
    record = json.loads((no_leftovers / "runs" / "lost" / "check.json").read_text())
    assert record["nodes"] == data["nodes"]
    wait_for(lambda: slurm.jobs() == [], timeout=30, what="the allocation to end")


def test_losing_the_node_that_holds_the_job_fails_the_check_saying_so(slurm, no_leftovers):
    """n1 runs the allocation's batch script: Slurm ends the job with it, --no-kill or not, so
    no retry on n2 can run (one said "Expired or invalid job"): the check ends naming n1."""
    done, said = _down_mid_check(slurm, no_leftovers, "n1", "29886")
    assert done.returncode == 1, said
    assert "error: Slurm lost node n1 (node failure)" in said, said
    assert "ended with it" in said and "Expired or invalid job" not in said, said
    record = json.loads((no_leftovers / "runs" / "lost" / "check.json").read_text())
    assert (record["status"], record["failed_node"]) == ("failed", "n1"), record
    assert "Traceback" not in said
    wait_for(lambda: slurm.jobs() == [], timeout=30, what="the allocation to end")


def _down_mid_check(slurm, where, node: str, port: str, hang: bool = False):
    """`dtrun check --slurm` on both nodes, ``node`` set down (or hung) once every rank has
    joined."""
    frozen: list[int] = []

    def go_down() -> None:
        wait_for(lambda: faults.check_said(where, "dtrun: checking"), timeout=200,
                 what="every rank to join")  # fmt: skip
        if hang:
            frozen.extend(slurm.freeze_node(node))
        else:
            slurm.run("scontrol", "update", f"nodename={node}", "state=down", "reason=dtrun test")

    stopper = threading.Thread(target=go_down, daemon=True)
    stopper.start()
    try:
        done = run_dtrun(
            "check", "--slurm", "--local-nodes", "2", "--port", port, "--json",
            "--output", str(where / "runs"), "--run-id", "lost",
            cwd=where, env=slurm.env, timeout=280,
        )  # fmt: skip
    finally:
        stopper.join(timeout=60)
        if hang:  # the hung host is gone; a new one takes its name for the next test
            slurm.kill_frozen(node, frozen)
            slurm.restart_node(node)
    if hang:
        assert len(frozen) > 2, f"{node} was not frozen with its step: {frozen}"
    return done, done.stdout + done.stderr


def test_a_check_on_slurm_stopped_by_sigterm_records_it_and_ends_its_job(slurm, no_leftovers):
    """SIGTERM once every rank has joined: exit 143, check.json says interrupted by SIGTERM
    with each node's end and no verdict, and the allocation and its steps are gone."""
    out = no_leftovers / "runs"
    with (no_leftovers / "dtrun.out").open("w+") as said:
        dtrun = subprocess.Popen(
            [*DTRUN, "check", "--slurm", "--local-nodes", "2", "--port", "29896", "--output",
             str(out), "--run-id", "stopped"],
            cwd=no_leftovers, env=slurm.env, stdout=said, stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )  # fmt: skip
        try:
            wait_for(lambda: faults.check_said(no_leftovers, "dtrun: checking"), timeout=200,
                     what="every rank to join")  # fmt: skip
        except BaseException:
            dtrun.kill()
            raise
        dtrun.send_signal(signal.SIGTERM)
        assert ends_within(dtrun, 120, said) == 143
        said.seek(0)
        text = said.read()
    assert "Traceback" not in text, text
    record = json.loads((out / "stopped" / "check.json").read_text())
    assert (record["status"], record["signal"], record["error"]) == (
        "interrupted", "SIGTERM", "stopped by SIGTERM",
    ), record  # fmt: skip
    assert sorted(node["node"] for node in record["launch"]) == ["n1", "n2"], record
    assert "nodes" not in record and "links" not in record
    assert slurm.jobs() == [] and slurm.steps() == []


@pytest.mark.alone  # "both ok": a quiet machine's claim
def test_a_slurmd_killed_mid_check_leaves_its_step_measured_and_the_job_ended(slurm, no_leftovers):
    """n2's slurmd SIGKILLed once every rank has joined: its step's slurmstepd and ranks live
    on, as on a real node, so the check measures both nodes; Slurm marks n2 down only after
    SlurmdTimeout (30 s here)."""
    measuring: list[bool] = []  # whether the check was still measuring when slurmd died

    def kill() -> None:
        wait_for(lambda: faults.check_said(no_leftovers, "dtrun: checking"), timeout=200,
                 what="every rank to join")  # fmt: skip
        slurm.kill_node("n2")
        measuring.append(not faults.check_said(no_leftovers, "dtrun: checked"))

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        done = run_dtrun(
            "check", "--slurm", "--local-nodes", "2", "--port", "29898", "--json",
            "--output", str(no_leftovers / "runs"), "--run-id", "killed",
            cwd=no_leftovers, env=slurm.env, timeout=280,
        )  # fmt: skip
    finally:
        killer.join(timeout=60)
        slurm.restart_node("n2")
    said = done.stdout + done.stderr
    assert measuring == [True], "n2's slurmd was not killed mid-check"
    assert done.returncode == 0, said
    data = json.loads(done.stdout)
    assert [(n["host"], n["verdict"]) for n in data["nodes"]] == [("n1", "ok"), ("n2", "ok")]
    wait_for(lambda: slurm.jobs() == [], timeout=60, what="the allocation to end")
