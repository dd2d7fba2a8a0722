"""The Slurm engine's pure parts: what it reads from Slurm's documented formats, the lines it
submits and starts, how one step's labelled output becomes per-node logs and exits, and the
wrapper each task runs (golden, shellcheck, and run as srun would run it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from dtrun.cli.options import Launching
from dtrun.engines.base import Cluster, ClusterChoice
from dtrun.engines.registry import EngineOptions
from dtrun.engines.slurm.allocation import (
    allocation_request,
    cpus_per_node,
    gpus_of,
    inside_allocation,
    slurm_inventory,
    slurm_nodes,
)
from dtrun.engines.slurm.engine import SlurmEngine
from dtrun.engines.slurm.executor import SlurmExecutor, _Step, step_command, wrapper
from dtrun.engines.slurm.fault import Heard, NodeLostError, ended_by_slurm
from dtrun.engines.slurm.job import Head, open_slurm
from dtrun.engines.slurm.lease import LEASE_ENV, hold_script
from dtrun.engines.slurm.shell import SlurmShell, cancel, step_guard
from dtrun.engines.slurm.stage import HeadStaging
from dtrun.errors import NodeFailedError, RunError, RunInterruptedError
from dtrun.execute import LogCut
from dtrun.execute.guard import drop_guard
from dtrun.plan.launchfiles import What, plan_launch
from dtrun.plan.resolve import resolve_run
from dtrun.record.rundir import create_run_dir
from dtrun.record.writer import release_writer
from dtrun.spec.cluster import Node, Starter
from dtrun.spec.launchplan import PROBE_DIR
from dtrun.spec.outcome import NodeResult, SuccessRule
from dtrun.spec.request import Program, ProgramKind, RunSpec
from dtrun.spec.slurmrequest import SlurmRequest
from tests.conftest import ended, require_tool
from tests.paths import REPO, TESTS

NODES = (
    Node("gpu01", "10.0.0.4", slots=8, cpus=96),
    Node("gpu02", "10.0.0.5", slots=8, cpus=96),
)


def _plan(launcher: str = "torchrun", nodes: int = 2):
    inventory = slurm_inventory(
        "slurm:job 7", NODES, gpus=8, python_bin="/opt/venv/bin", code_dir="/opt"
    )
    spec = RunSpec(
        "r1", launcher=launcher, procs_per_node=8,
        program=Program(ProgramKind.SCRIPT, "/home/u/train.py", ("--lr", "1e-3")), nodes=nodes,
    )  # fmt: skip
    resolved = resolve_run(spec)
    what = What(spec.program, "run", 60)
    return plan_launch(inventory, resolved.launch, nodes, what)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [("(null)", 0), ("gpu:8", 8), ("gpu:a100:4(S:0-1)", 4), ("gpu:t4:2,gpu:a10:1", 3),
     ("gpu:h100:8(S:0-1),mps:100", 8), ("", 0)],
)  # fmt: skip
def test_gpus_are_read_from_sinfo_gres(gres, gpus):
    assert gpus_of(gres) == gpus


@pytest.mark.parametrize(
    ("value", "count", "cpus"),
    [("72(x2),36", 3, (72, 72, 36)), ("1(x2)", 2, (1, 1)), ("8", 1, (8,)), ("8", 2, None),
     ("", 2, None), ("x", 1, None)],
)  # fmt: skip
def test_the_allocations_cpus_per_node(value, count, cpus):
    assert cpus_per_node(value, count) == cpus


def test_inside_an_allocation_is_slurm_job_id():
    assert inside_allocation({"SLURM_JOB_ID": "42"}) == "42"
    assert inside_allocation({"SLURM_JOB_ID": " "}) is None
    assert inside_allocation({}) is None


def test_the_allocation_request_holds_the_largest_count_and_every_passed_option():
    request = SlurmRequest(partition="gpu", account="ml", qos="high", time="2:00:00",
                           constraint="ib&a100", exclude="gpu[03]", nodelist=None)  # fmt: skip
    assert allocation_request(request, 8, "dtrun-r1") == [
        "sbatch", "--parsable", "--job-name=dtrun-r1", "--nodes=8", "--ntasks-per-node=1",
        "--exclusive", "--no-kill", "--output=/dev/null", "--comment=dtrun-lease:0",
        "--partition=gpu", "--account=ml", "--qos=high", "--time=2:00:00", "--constraint=ib&a100",
        "--exclude=gpu[03]", f"--wrap={hold_script(300)}",
    ]  # fmt: skip
    unleased = allocation_request(replace(request, lease_s=0), 8, "dtrun-r1")
    assert unleased[-1] == "--wrap=exec sleep infinity"  # DTRUN_SLURM_LEASE_S=0


def test_a_launch_is_one_step_a_task_per_node_with_all_its_cpus_and_gpus():
    plan = _plan()
    command = step_command(plan, "7", "/home/u/runs/r1/launch", "ab", gpus_per_node=8)
    assert command[:12] == [
        "srun", "--jobid=7", "--job-name=dtrun-ab", "--nodes=2", "--ntasks=2",
        "--ntasks-per-node=1", "--nodelist=gpu01,gpu02", "--cpus-per-task=96",
        "--kill-on-bad-exit=1", "--label", "--chdir=/home/u/runs/r1/launch", "--gres=gpu:8",
    ]  # fmt: skip
    assert command[-3:] == ["dtrun-srun", "/home/u/runs/r1/launch", "ab"]


def test_mpirun_under_slurm_runs_on_the_head_with_a_hostfile_of_slurm_names():
    plan = _plan("mpirun")
    assert [launch.node.name for launch in plan.launches] == ["gpu01"]
    hostfile = next(f for f in plan.files if f.name == "hostfile")
    assert hostfile.content == "gpu01 slots=8\ngpu02 slots=8\n"
    assert "ras '^slurm'" in plan.launches[0].script
    assert "plm_rsh" not in plan.launches[0].script and "local-rsh" not in plan.launches[0].script


def test_a_stack_s_slurm_stages_each_run_s_probe_in_that_run_s_folder():
    """A stack's Slurm copies each launch directory to its shared storage: --probe's
    (runs/<id>/n2/r0/probe here) goes in its run's folder there, beside the program's launch.
    Before, every run's probe was <shared>/.dtrun/runs/n2/r0/probe, one folder for all."""
    staging = HeadStaging(SlurmShell(), "/shared", "/shared/.dtrun/code")
    probe = Path("runs/alice/n2/r0") / PROBE_DIR
    assert staging.remote_dir(probe) == "/shared/.dtrun/runs/alice/n2/r0/probe"
    assert staging.remote_dir(probe.parent) == "/shared/.dtrun/runs/alice/n2/r0"
    assert staging.remote_dir(Path("runs/bob/n2/r0") / PROBE_DIR) != staging.remote_dir(probe)


def test_the_step_output_becomes_each_nodes_log_and_exit(tmp_path):
    seen: list[tuple[str, str]] = []
    step = _Step(tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"},
                 lambda node, line: seen.append((node, line)), "5f3a")  # fmt: skip
    for raw in [
        "srun: warning: something about the job\n",
        "1: dtrun: slurm task 1 of job 7 runs node-1.sh on gpu02\n",
        " 0: dtrun: slurm task 0 of job 7 runs node-0.sh on gpu01\n",
        "0: step 1 loss 7.0\n",
        "1: Traceback (most recent call last):\n",
        "1: dtrun: node-1.sh on gpu02 exited 3 (launch 5f3a)\n",
        "0: dtrun: node-0.sh on gpu01 exited 0 (launch 5f3a)\n",
    ]:
        step.line(raw.encode())
    step.close()
    assert step.exits["gpu02"][0] == 3 and step.exits["gpu01"][0] == 0
    assert (tmp_path / "gpu01.log").read_text().splitlines()[1] == "step 1 loss 7.0"
    assert "Traceback" in (tmp_path / "gpu02.log").read_text()
    assert (tmp_path / "srun.log").read_text() == "srun: warning: something about the job\n"
    assert ("slurm", "srun: warning: something about the job") in seen
    assert ("gpu01", "step 1 loss 7.0") in seen


def test_a_task_printing_sruns_node_failure_words_is_not_slurm_losing_a_node(tmp_path):
    """A program's output (its own srun's, a log it prints) must not make dtrun report a
    healthy node lost: a check would put it out, and --drain-failing drain it."""
    step = _Step(
        tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None, "5f3a"
    )
    step.line(b"0: dtrun: slurm task 0 of job 7 runs node-0.sh on gpu01\n")
    step.line(b"0: srun: error: Node failure on gpu02\n")
    step.close()
    assert (step.slurm.lost, step.slurm.said) == ([], False)


def test_a_node_without_the_run_directory_is_noticed(tmp_path):
    step = _Step(tmp_path, {"node-0.sh": "gpu01"}, lambda node, line: None, "5f3a")
    step.line(b"0: dtrun: the run directory /home/u/runs/r1/launch is not on gpu01\n")
    step.close()
    assert step.guard == ["gpu01"]


def test_an_exit_said_once_dtrun_cancels_the_step_is_the_stop_s_not_the_node_s(tmp_path):
    """A task can outlive the script Slurm killed under it and say `exited 137`: the node was
    still running when dtrun cancelled the step (its timeout names it), not ended by itself."""
    step = _Step(
        tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None, "5f3a"
    )
    step.line(b"0: dtrun: slurm task 0 of job 7 runs node-0.sh on gpu01\n")
    step.line(b"1: dtrun: slurm task 1 of job 7 runs node-1.sh on gpu02\n")
    step.line(b"0: dtrun: node-0.sh on gpu01 exited 0 (launch 5f3a)\n")
    step.stopping = True
    step.line(b"1: dtrun: node-1.sh on gpu02 exited 137 (launch 5f3a)\n")
    step.close()
    assert {node: code for node, (code, _) in step.exits.items()} == {"gpu01": 0}


def test_an_end_line_of_an_older_launch_that_a_program_prints_is_its_output(tmp_path):
    """A training script that prints an older run's log (its end lines: one from before tags,
    one of another launch) has not ended: its node fails or ends when its own wrapper says."""
    plan = _plan()
    (tmp_path / "srun-node.sh").write_text(wrapper(plan, "r1"))
    (tmp_path / "old.log").write_text(
        "dtrun: node-1.sh on gpu02 exited 1\ndtrun: node-1.sh on gpu02 exited 0 (launch 9e9e)\n"
    )
    (tmp_path / "node-1.sh").write_text("cat old.log\necho 'step 1 loss 7.0'\nexit 3\n")
    env = {**os.environ, "SLURMD_NODENAME": "gpu02", "SLURM_PROCID": "1", "SLURM_JOB_ID": "7"}
    done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                          capture_output=True, check=False)  # fmt: skip
    step = _Step(tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None,
                 "5f3a")  # fmt: skip
    ended = []
    for raw in done.stdout.splitlines(keepends=True):
        step.line(b"1: " + raw)
        ended.append(step.exits.get("gpu02", (None, 0.0))[0])
    step.close()
    assert ended == [None, None, None, None, 3]
    assert "exited 0 (launch 9e9e)" in (tmp_path / "gpu02.log").read_text()


def test_a_program_that_leaves_its_last_line_unended_still_ends_its_node(tmp_path):
    """Its wrapper's end line then follows the program's last words on the same line (`epoch 1
    donedtrun: node-0.sh on gpu01 exited 0 ...`): the node ended, with its code; before, dtrun
    heard no end and said srun did not run the launch."""
    plan = _plan()
    (tmp_path / "srun-node.sh").write_text(wrapper(plan, "r1"))
    (tmp_path / "node-0.sh").write_text("printf 'epoch 1 done'\nexit 4\n")
    env = {**os.environ, "SLURMD_NODENAME": "gpu01", "SLURM_PROCID": "0"}
    done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                          capture_output=True, check=False)  # fmt: skip
    step = _Step(tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None,
                 "5f3a")  # fmt: skip
    for raw in done.stdout.splitlines(keepends=True):
        step.line(b"0: " + raw)
    step.close()
    assert {node: code for node, (code, _) in step.exits.items()} == {"gpu01": 4}


def test_the_wrapper_is_golden_and_shellcheck_clean(tmp_path, golden):
    text = wrapper(_plan(), "r1", "/opt/venv/bin/python", "/opt/dtrun")
    golden("slurm/srun-node.sh", text)
    path = tmp_path / "srun-node.sh"
    path.write_text(text)
    shellcheck = require_tool("shellcheck")
    checked = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=style", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(("node", "code"), [("gpu01", 0), ("gpu02", 5)])
def test_the_wrapper_runs_its_nodes_script_and_says_how_it_ended(tmp_path, node, code):
    plan = _plan()
    (tmp_path / "srun-node.sh").write_text(wrapper(plan, "r1"))
    (tmp_path / "node-0.sh").write_text("echo zero\n")
    (tmp_path / "node-1.sh").write_text("echo one; exit 5\n")
    env = {**os.environ, "SLURMD_NODENAME": node, "SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}
    done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                          capture_output=True, text=True)  # fmt: skip
    script = "node-0.sh" if node == "gpu01" else "node-1.sh"
    assert done.returncode == code
    lines = done.stdout.splitlines()
    assert lines[0] == f"dtrun: slurm task 0 of job 7 runs {script} on {node}"
    assert lines[-1] == f"dtrun: {script} on {node} exited {code} (launch 5f3a)"


@pytest.mark.parametrize("python", [sys.executable, "/nonexistent/bin/python"])
def test_a_daemon_the_script_orphans_is_stopped_when_it_ends_where_python_is(tmp_path, python):
    """Under the reaper, a helper started with a cleared environment and a double fork stays in
    the task's process tree and is stopped at the script's end; without the nodes' python the
    script runs as before, and the daemon outlives it, as it did."""
    (tmp_path / "srun-node.sh").write_text(wrapper(_plan(), "r1", python, str(REPO / "dtrun")))
    (tmp_path / "node-0.sh").write_text(
        "env -i setsid sh -c 'sleep 600 </dev/null >/dev/null 2>&1 & echo $!'\nexit 4\n"
    )
    env = {**os.environ, "SLURMD_NODENAME": "gpu01"}
    done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    daemon = int(done.stdout.splitlines()[1])
    try:
        assert done.returncode == 4
        assert ended(daemon) is (python == sys.executable)
    finally:
        if not ended(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_a_node_named_like_a_shell_keyword_gets_its_own_script(tmp_path):
    """Slurm's node names reach srun-node.sh as case patterns: `esac` is a name Slurm takes
    (and _usable passes), and, unquoted as the first word of a pattern, it would end the case
    statement and leave the whole wrapper a syntax error on every node."""
    from dtrun.engines.slurm.allocation import _usable

    names = _usable(["esac", "in"])
    nodes = tuple(replace(node, name=name) for node, name in zip(NODES, names, strict=True))
    inventory = slurm_inventory("slurm:job 7", nodes, gpus=8, python_bin="/v/bin", code_dir="/c")
    spec = RunSpec("r1", launcher="torchrun", program=Program(ProgramKind.SCRIPT, "t.py"), nodes=2)
    plan = plan_launch(inventory, resolve_run(spec).launch, 2, What(spec.program, "run", 60))
    (tmp_path / "srun-node.sh").write_text(wrapper(plan, "r1"))
    (tmp_path / "node-0.sh").write_text("echo zero\n")
    (tmp_path / "node-1.sh").write_text("echo one\n")
    for node, said in (("esac", "zero"), ("in", "one")):
        env = {**os.environ, "SLURMD_NODENAME": node}
        done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1] == said


def test_the_wrapper_refuses_a_node_without_a_script(tmp_path):
    (tmp_path / "srun-node.sh").write_text(wrapper(_plan(), "r1"))
    env = {**os.environ, "SLURMD_NODENAME": "gpu09"}
    done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "gpu09, which has no script" in done.stderr


def test_a_slurm_inventory_is_cuda_with_gpus_and_names_its_scheduler(tmp_path):
    inventory = slurm_inventory("slurm:job 7", NODES, gpus=8, python_bin="/v/bin", code_dir="/c")
    assert inventory.accelerator == "cuda" and inventory.starter is Starter.SRUN
    assert inventory.interface == "eth0" and inventory.ssh is None
    local = slurm_inventory(
        "slurm:job 8", (Node("n1", "127.0.0.21"),), gpus=0, python_bin="/v/bin", code_dir="/c"
    )
    assert local.accelerator == "cpu" and local.interface == "lo"
    assert Path("/c") == Path(local.code_dir)


def test_a_stack_without_slurm_is_refused_with_what_to_set(tmp_path):
    from tests.conftest import run_dtrun

    v1 = TESTS / "data" / "outputs" / "v1-h100-azurefiles-generated-key.json"
    done = run_dtrun("bench", "--slurm", "--outputs", str(v1), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has no Slurm (dtrun:scheduler is none)" in done.stderr
    assert "pulumi config set dtrun:scheduler slurm" in done.stderr


def test_a_node_that_does_not_see_the_run_directory_is_a_clear_usage_error(tmp_path):
    from dtrun.engines.slurm.executor import SlurmExecutor
    from dtrun.engines.slurm.shell import SlurmShell
    from dtrun.errors import UsageError

    step = _Step(
        tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None, "5f3a"
    )
    step.line(b"1: dtrun: the run directory /home/u/runs/r1/launch is not on gpu02\n")
    step.close()
    with pytest.raises(UsageError) as raised:
        SlurmExecutor(SlurmShell(), "7")._verdict(_plan(), 97, step, False, 60)
    assert "the run directory is not on gpu02, a node of the Slurm job" in raised.value.message
    assert "pass --output a directory on a file system every node mounts" in raised.value.message


def test_nodes_with_one_gpu_each_are_gpu_nodes():
    class Sinfo:
        def check(self, command, doing):
            return "g1|10.0.0.4|16|gpu:a100:1(S:0)\ng2|10.0.0.5|16|gpu:1\n"

    nodes, gpus = slurm_nodes(Sinfo(), ["g1", "g2"])  # type: ignore[arg-type]
    assert gpus == 1 and [node.slots for node in nodes] == [1, 1]
    inventory = slurm_inventory("slurm:job 9", nodes, gpus=gpus, python_bin="/v", code_dir="/c")
    assert inventory.accelerator == "cuda"


def _ended_step(tmp_path, *exits: tuple[str, int, float]) -> _Step:
    step = _Step(
        tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None, "5f3a"
    )
    step.started = 0.0
    step.exits.update({node: (code, when) for node, code, when in exits})
    return step


def test_under_worker0_the_step_ends_at_node_0_s_exit_and_the_rest_were_stopped(tmp_path):
    plan = replace(_plan(), success=SuccessRule.WORKER0)
    # gpu02's wrapper said "exited 143" after node 0 was done: that is dtrun's scancel
    step = _ended_step(tmp_path, ("gpu01", 0, 5.0), ("gpu02", 143, 6.0))
    assert step.settled(plan).at == 5.0
    executor = SlurmExecutor(SlurmShell(), "7")
    results = executor._verdict(plan, -15, step, timed_out=False, timeout_s=60)
    assert [(r.node, r.exit_code, r.stopped_after_worker0) for r in results] == [
        ("gpu01", 0, False),
        ("gpu02", None, True),
    ]


def test_under_worker0_a_node_that_failed_before_node_0_finished_fails_the_step(tmp_path):
    plan = replace(_plan(), success=SuccessRule.WORKER0)
    step = _ended_step(tmp_path, ("gpu02", 3, 2.0), ("gpu01", 0, 5.0))
    with pytest.raises(NodeFailedError, match=r"gpu02 .* failed with exit code 3"):
        SlurmExecutor(SlurmShell(), "7")._verdict(plan, 1, step, timed_out=False, timeout_s=60)


def test_under_the_default_rule_node_0_s_exit_does_not_end_the_step(tmp_path):
    step = _ended_step(tmp_path, ("gpu01", 0, 5.0), ("gpu02", 143, 6.0))
    with pytest.raises(NodeFailedError, match=r"gpu02 .* failed with exit code 143"):
        SlurmExecutor(SlurmShell(), "7")._verdict(_plan(), 1, step, timed_out=False, timeout_s=60)


FAKE_SQUEUE = """\
#!/bin/sh
# -s: the steps of job 12; otherwise the job itself
case "$*" in
  *-s*) printf '12.0|dtrun-other\\n12.3|dtrun-abc\\n12.4|xdtrun-abc\\n' ;;
  *) echo 12 ;;
esac
"""


@pytest.mark.parametrize("end", ["closed", "dropped"])
def test_the_step_guard_cancels_only_its_own_step_and_only_when_dtrun_is_gone(
    tmp_path, monkeypatch, end
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(FAKE_SQUEUE)
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/cancelled\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    guard = step_guard(SlurmShell(), "12", "dtrun-abc")
    if end == "closed":  # what dtrun's end, a SIGKILL included, does to the guard's pipe
        assert guard.stdin is not None
        guard.stdin.close()
        assert guard.wait(timeout=20) == 0
        assert (tmp_path / "cancelled").read_text() == "12.3\n"
    else:
        drop_guard(guard)
        time.sleep(0.3)
        assert not (tmp_path / "cancelled").exists()


# srun --label prefixes slurmstepd's line with the node's first task, as its tasks' own lines
# (Slurm 22.05 here: `0: slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT ... DUE TO TIME
# LIMIT ***`), so a program could print the same; its own non-zero exit is taken first
# (executor.py _failed_itself). srun's own lines carry no label.
@pytest.mark.parametrize(
    ("lines", "lost", "cancelled", "due_to"),
    [
        (["srun: error: Node failure on n2"], ["n2"], None, ""),
        (["0: slurmstepd-n1: error: *** STEP 4.3 ON n1 CANCELLED AT 2026-11-25T17:30:00 DUE TO "
          "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"], [], "STEP 4.3", "NODE FAILURE"),
        (["0: slurmstepd-n1: error: *** JOB 4 ON n1 CANCELLED AT 2026-11-25T17:30:00 DUE TO TIME "
          "LIMIT ***"], [], "JOB 4", "TIME LIMIT"),
        (["0: slurmstepd-n1: error: *** STEP 4.2 ON n1 CANCELLED AT 2026-11-25T17:29:15 ***"], [],
         "STEP 4.2", ""),
        (["srun: error: n1: task 0: Terminated", "a program printing *** STEP"], [], None, ""),
    ],
    ids=["node-failure", "step-node-failure", "time-limit", "scancel", "neither"],
)  # fmt: skip
def test_what_slurm_says_of_a_step_it_ended_is_heard(lines, lost, cancelled, due_to):
    heard = Heard(job="4")
    for line in lines:
        heard.line(line)
    assert (heard.lost, heard.cancelled, heard.due_to) == (lost, cancelled, due_to)


def test_slurmstepds_end_of_another_job_that_a_program_prints_is_its_output(tmp_path):
    """A training script that prints an older job's output (slurm-1234.out, which ends with
    slurmstepd's time limit) and runs on: every node exits 0, and the launch succeeds, not
    "Slurm job 7 reached its time limit"."""
    plan = _plan()
    (tmp_path / "srun-node.sh").write_text(wrapper(plan, "r1"))
    (tmp_path / "slurm-1234.out").write_text(
        "epoch 3 loss 1.2\nslurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT "
        "2026-11-25T17:30:00 DUE TO TIME LIMIT ***\n"
    )
    (tmp_path / "node-0.sh").write_text("tail -n 2 slurm-1234.out\necho resumed\n")
    (tmp_path / "node-1.sh").write_text("echo resumed\n")
    step = _Step(tmp_path, {"node-0.sh": "gpu01", "node-1.sh": "gpu02"}, lambda n, line: None,
                 "5f3a", slurm=Heard(job="7"))  # fmt: skip
    for task, node in enumerate(["gpu01", "gpu02"]):
        env = {**os.environ, "SLURMD_NODENAME": node, "SLURM_PROCID": str(task)}
        done = subprocess.run(["bash", str(tmp_path / "srun-node.sh"), "5f3a"], env=env,
                              capture_output=True, check=True)  # fmt: skip
        for raw in done.stdout.splitlines(keepends=True):
            step.line(f"{task}: ".encode() + raw)
    step.close()
    results = SlurmExecutor(_Answers(job_state="RUNNING"), "7")._verdict(plan, 0, step, False, 60)
    assert [(r.node, r.exit_code) for r in results] == [("gpu01", 0), ("gpu02", 0)]


@dataclass(frozen=True)
class _Answers(SlurmShell):
    """squeue's and sinfo's lines, as Slurm gives them after a scancel or a time limit."""

    job_state: str = "CANCELLED"

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        out = f"{self.job_state}|1:00\n" if command[0] == "squeue" else "n1|allocated|none\n"
        return subprocess.CompletedProcess(list(command), 0, out, "")


@pytest.mark.parametrize(
    ("job_state", "due_to", "cause"),
    [("CANCELLED", "", "cancelled from outside dtrun (scancel)"),
     ("TIMEOUT", "TIME LIMIT", "time limit (Slurm)")],
    ids=["scancel", "time-limit"],
)  # fmt: skip
def test_a_node_that_died_of_slurms_signal_is_ended_by_slurm_too(job_state, due_to, cause):
    """CI once caught n2's task dying of the scancel's SIGTERM (exit 143) before srun ended:
    it is Slurm's doing, as a node still running is; a node that failed on its own is not."""
    heard = Heard(cancelled="STEP 4.0", due_to=due_to)
    results = tuple(
        NodeResult(node, f"127.0.0.{i}", code, f"{node}.log", 1.0)
        for i, (node, code) in enumerate([("n1", None), ("n2", 143), ("n3", 137), ("n4", 1)])
    )
    error = ended_by_slurm(_Answers(job_state=job_state), "4", heard, results)
    assert error is not None
    ended = {r.node: (r.exit_code, r.cause) for r in error.node_results}
    assert ended == {"n1": (None, cause), "n2": (143, cause), "n3": (137, cause), "n4": (1, None)}


def test_a_node_stopped_by_slurms_signal_when_another_is_lost_is_stopped_not_failed():
    """CI caught n1's task dying of the SIGKILL srun sends when the step loses n2 (exit 137,
    under --no-kill): it is recorded as stopped with the step; n2 as the node lost."""
    heard = Heard(lost=["n2"])
    results = tuple(
        NodeResult(node, f"127.0.0.{i}", code, f"{node}.log", 1.0)
        for i, (node, code) in enumerate([("n1", 137), ("n2", None), ("n3", None), ("n4", 1)])
    )
    error = ended_by_slurm(_Answers(job_state="RUNNING"), "4", heard, results)
    assert error is not None
    assert error.lost_node == "n2"
    ended = {r.node: (r.exit_code, r.cause) for r in error.node_results}
    assert ended == {
        "n1": (137, "stopped with the step: Slurm lost n2"),
        "n2": (None, "node failure (Slurm)"),
        "n3": (None, None),
        "n4": (1, None),
    }


def test_a_node_slurm_loses_is_named_before_the_failure_it_caused_on_another(tmp_path):
    """gpu02 lost: gpu01's program saw its peer go and exited 1 before srun's SIGKILL reached
    it (a race a loaded machine can lose). Slurm's loss is the cause: gpu02 is the lost node
    (a check goes on without it), not gpu01 failed (a check would retry on the lost node)."""
    step = _ended_step(tmp_path, ("gpu01", 1, 2.0))
    step.slurm.line("srun: error: Node failure on gpu02")
    executor = SlurmExecutor(_Answers(job_state="RUNNING"), "7")
    with pytest.raises(NodeLostError, match="Slurm lost node gpu02") as raised:
        executor._verdict(_plan(), 1, step, timed_out=False, timeout_s=60)
    assert raised.value.lost_node == "gpu02"
    ended = {r.node: (r.exit_code, r.cause) for r in raised.value.node_results}
    assert ended == {"gpu01": (1, None), "gpu02": (None, "node failure (Slurm)")}


def _full_disk_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """srun as a program printing a bound task's lines without end, squeue and scancel as
    stand-ins that list no step, and every node log on a disk with no room (/dev/full): the
    launch directory to run in."""
    import dtrun.engines.slurm.executor as slurm_executor
    from dtrun.workloads.files import NodeLog

    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("squeue", "scancel"):
        (tools / tool).write_text("#!/bin/sh\nexit 0\n")
        (tools / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    spew = "print('0: dtrun: slurm task 0 of job 7 runs node-0.sh on gpu01', flush=True)\n"
    spew += "while True:\n    print('0: ' + 'x' * 200, flush=True)\n"
    monkeypatch.setattr(slurm_executor, "step_command", lambda *_: [sys.executable, "-c", spew])

    class FullLog(NodeLog):
        """A log on a disk with no room: every write is ENOSPC (/dev/full)."""

        def __init__(self, path: Path, **options: object) -> None:
            super().__init__(path, **options)  # type: ignore[arg-type]
            full = os.open("/dev/full", os.O_WRONLY)
            assert self._fd is not None
            os.dup2(full, self._fd)
            os.close(full)

    monkeypatch.setattr(slurm_executor, "NodeLog", FullLog)
    return tmp_path / "runs" / "r1" / "launch"


def test_a_node_log_the_disk_cannot_hold_stops_the_step_and_is_raised(tmp_path, monkeypatch):
    """A step whose node log cannot be written (a full disk) is cancelled at once, as a failed
    node's is, and the write's error raised for the caller to say (runner/record/
    writefail.py). Before, srun ran on unseen until --timeout."""
    import errno

    workdir = _full_disk_step(tmp_path, monkeypatch)
    executor = SlurmExecutor(SlurmShell(), "7", grace_s=1.0)
    with pytest.raises(OSError) as raised:
        executor.run(_plan(), workdir, timeout_s=120, on_line=lambda *_: None)
    assert (raised.value.errno, raised.value.filename) == (
        errno.ENOSPC, str(workdir.resolve() / "gpu01.log")
    )  # fmt: skip
    # with how each node ended, for the launch's record (runs.json, run.json): all stopped
    assert isinstance(raised.value, LogCut)
    assert [(r.node, r.exit_code) for r in raised.value.node_results] == [
        ("gpu01", None),
        ("gpu02", None),
    ]


def test_a_ctrl_c_while_a_cut_log_s_step_stops_is_the_interruption_and_says_the_cut(
    tmp_path, monkeypatch
):
    """A Ctrl-C while dtrun cancels the step for a cut log: the launch is interrupted, with
    the cut as its end (records: interrupted, saying both). Before, the Ctrl-C was dropped and
    the launch raised the cut alone (failed, exit 1)."""
    import signal

    from dtrun.errors import LaunchInterrupted

    workdir = _full_disk_step(tmp_path, monkeypatch)
    executor = SlurmExecutor(SlurmShell(), "7", grace_s=1.0)
    stop = executor._stop

    def ctrl_c_meanwhile(*args: object) -> None:
        signal.raise_signal(signal.SIGINT)  # held back by the stop (sigint_deferred)
        stop(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(executor, "_stop", ctrl_c_meanwhile)
    with pytest.raises(LaunchInterrupted) as raised:
        executor.run(_plan(), workdir, timeout_s=120, on_line=lambda *_: None)
    ended = raised.value.ended
    assert ended is not None
    assert f"node log {workdir.resolve() / 'gpu01.log'} could not be written" in ended.what
    assert [r.node for r in raised.value.node_results] == ["gpu01", "gpu02"]


# srun as `dtrun exec --slurm` runs it, one task reading its script: the task's lines (labelled
# `0: ` under --label, its stderr with them), then srun's own line for a task that ended non-zero
# (`srun: error: n1: task 0: Exited with exit code 3`, srun's _task_finish), srun's exit code.
# SRUN_FAILS: srun runs no task and says why, as when Slurm refuses the step; SRUN_SAYS: a line
# of srun's own before the task's.
FAKE_SRUN = f"""#!{sys.executable}
import os, subprocess, sys
if os.environ.get("SRUN_FAILS"):
    print("srun: error: Unable to create step for job 7: Requested nodes are busy", flush=True)
    sys.exit(1)
label = "0: " if "--label" in sys.argv else ""
if os.environ.get("SRUN_SAYS"):
    print(os.environ["SRUN_SAYS"], flush=True)
done = subprocess.run(["bash", "-s"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in done.stdout.splitlines():
    print(label + line, flush=True)
if done.returncode:
    print(f"srun: error: n1: task 0: Exited with exit code {{done.returncode}}", flush=True)
sys.exit(done.returncode)
"""


@pytest.mark.parametrize(
    ("script", "output"),
    [("exit 3", ""), ("echo 'srun: error: what the command printed last' >&2; exit 3",
                      "srun: error: what the command printed last")],
    ids=["silent", "printing-srun-s-words"],
)  # fmt: skip
def test_exec_s_command_that_fails_on_its_own_answers_its_exit_code_not_srun_s_error(
    tmp_path, monkeypatch, script, output
):
    """A command srun ran that exited 3 is the command's exit 3, whatever its last line: only
    srun's own line, unlabelled, and not the one in which srun reports a task's end, says srun
    ran nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    lines: list[tuple[str, str]] = []
    answers = SlurmExecutor(SlurmShell(), "7").command(
        {"n1": script}, lambda node, line: lines.append((node, line))
    )
    assert (answers["n1"].exit_code, answers["n1"].error) == (3, None)
    assert answers["n1"].output.splitlines() == ([output] if output else [])
    assert [line for _, line in lines] == answers["n1"].output.splitlines()  # streamed unlabelled
    monkeypatch.setenv("SRUN_FAILS", "1")
    (refused,) = SlurmExecutor(SlurmShell(), "7").command({"n1": script}).values()
    assert refused.exit_code is None
    assert refused.error == "srun: error: Unable to create step for job 7: Requested nodes are busy"


def test_exec_under_slurm_streams_the_node_s_lines_and_not_srun_s_own(tmp_path, monkeypatch):
    """`dtrun exec --slurm -- sh -c 'exit 3'` showed srun's `srun: error: n1: task 0: Exited
    with exit code 3` as a line of n1's output, beside the table's exit 3. srun's own lines are
    not the node's: the task's end is dropped (its exit code is the answer's), any other line
    streams as slurm's (`[slurm] ...`, as a launch's do), and neither is in the node's answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SRUN_SAYS", "srun: Job 7 step creation temporarily disabled, retrying")
    lines: list[tuple[str, str]] = []
    answers = SlurmExecutor(SlurmShell(), "7").command(
        {"n1": "echo from n1; exit 3"}, lambda node, line: lines.append((node, line))
    )
    assert lines == [
        ("slurm", "srun: Job 7 step creation temporarily disabled, retrying"),
        ("n1", "from n1"),
    ]
    assert (answers["n1"].output, answers["n1"].exit_code) == ("from n1", 3)


@dataclass(frozen=True)
class _SlowToAnswerSbatch(SlurmShell):
    """A controller that takes dtrun's job and answers sbatch late: a Ctrl-C (or SIGTERM,
    delivered as one) reaches dtrun while sbatch runs. Records every command."""

    said: list[list[str]] = field(default_factory=list)

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        self.said.append(list(command))
        out = ""
        if command[0] == "sbatch":
            os.kill(os.getpid(), signal.SIGINT)  # the job exists; its id is on its way
            out = "42\n"
        elif command[0] == "squeue" and ["scancel", "42"] not in self.said:
            out = "RUNNING|None|n[1-2]\n"
        return subprocess.CompletedProcess(list(command), 0, out, "")


def test_a_ctrl_c_while_sbatch_answers_cancels_the_job_it_made(monkeypatch):
    """Reproduced on Slurm: a Ctrl-C while sbatch ran left the job dtrun had asked for
    holding both nodes, with no word of it, until its lease ran out after it started."""
    monkeypatch.setenv(LEASE_ENV, "0")
    shell = _SlowToAnswerSbatch()
    head = Head(shell, None, "python", None, "cpu")  # type: ignore[arg-type]  # never staged
    choice = ClusterChoice(EngineOptions(slurm=True), nodes=2)
    heard: list[str] = []
    opened = open_slurm(None, choice, heard.append, head)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt), opened:
        pytest.fail("a cluster was opened after the Ctrl-C")
    assert ["scancel", "42"] in shell.said
    assert heard[-1] == "Slurm job 42 cancelled; squeue no longer lists it"


def test_a_time_limit_s_advice_holds_for_a_command_that_is_no_sweep():
    """Reproduced on Slurm: `dtrun run --slurm --time 1` told of "the whole sweep (every point
    and repeat)" and advised `dtrun bench --dry-run`; run, exec and check have no sweep."""
    heard = Heard(cancelled="JOB 4", due_to="TIME LIMIT", job="4")
    results = (NodeResult("n1", "127.0.0.1", None, "n1.log", 1.0),)
    error = ended_by_slurm(_Answers(job_state="TIMEOUT"), "4", heard, results)
    assert error is not None
    assert "every launch of the command runs in this one job" in str(error)
    assert "for a sweep, `dtrun bench --dry-run`" in error.fix


def test_exec_s_node_that_slurm_cancelled_says_so_beside_its_exit_code(tmp_path, monkeypatch):
    """Reproduced on Slurm: a scancel of the job from outside dtrun during `dtrun exec --slurm`
    showed each node's exit 143 with an empty error column, and no word of Slurm's doing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    slurmstepd = "slurmstepd-n1: error: *** STEP 7.0 ON n1 CANCELLED AT 2026-12-07T11:30:30 ***"
    (answer,) = (
        SlurmExecutor(SlurmShell(), "7").command({"n1": f"echo '{slurmstepd}'; exit 143"}).values()
    )
    assert (answer.exit_code, answer.error) == (
        143,
        "Slurm cancelled the step 7.0: a scancel from outside dtrun",
    )
    # the same line printed by a command of another job's is the command's output
    (other,) = (
        SlurmExecutor(SlurmShell(), "8").command({"n1": f"echo '{slurmstepd}'; exit 143"}).values()
    )
    assert (other.exit_code, other.error) == (143, None)


@dataclass(frozen=True)
class _Squeue(SlurmShell):
    """squeue's answer, whatever is asked: its exit code and its standard error."""

    code: int = 1
    stderr: str = "slurm_load_jobs error: Socket timed out on send/recv operation\n"

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        code, err = (self.code, self.stderr) if command[0] == "squeue" else (0, "")
        return subprocess.CompletedProcess(list(command), code, "", err)


@pytest.mark.parametrize("target", ["24", "24.2"])
def test_a_cancel_that_squeue_cannot_confirm_is_not_said_done(target):
    """Reproduced on Slurm with slurmctld stopped (SIGSTOP): a SIGTERM'd `dtrun run --slurm`
    said "Slurm job 24 cancelled; squeue no longer lists it" and "every process dtrun started
    was stopped" while squeue answered only errors, and the job and its step were still
    there."""
    with pytest.raises(RunError, match=r"still unconfirmed \(squeue: .*Socket timed out"):
        cancel(_Squeue(), target, wait_s=0)
    cancel(_Squeue(stderr="slurm_load_jobs error: Invalid job id specified\n"), target, wait_s=0)


def test_a_job_end_squeue_cannot_confirm_as_the_cluster_closes_is_in_the_run_s_record(
    tmp_path, monkeypatch
):
    """Reproduced on Slurm with slurmctld stopped (SIGSTOP): a SIGTERM'd `dtrun run --slurm`
    exited 1 with "Slurm job 25 is still unconfirmed (squeue: ... Socket timed out ...) 60 s
    after dtrun cancelled it", while run.json said only `interrupted`, "stopped by SIGTERM":
    it was written before the cluster closed, and the failed cancel reached the terminal
    alone."""
    from dtrun.cli import session as sessions

    inventory = slurm_inventory("slurm:job 25", NODES, gpus=8, python_bin="/v/bin", code_dir="/c")
    choice = ClusterChoice(EngineOptions(slurm=True), nodes=1)

    @contextlib.contextmanager
    def slurm_job(choice_: ClusterChoice, watch: sessions.StackWatch) -> Iterator[Cluster]:
        try:  # the job dtrun asked for, cancelled as the cluster closes (job.py _end_job)
            yield Cluster(inventory, None, choice, SlurmEngine())  # type: ignore[arg-type]
        finally:
            cancel(_Squeue(), "25", wait_s=0)  # the controller does not answer

    monkeypatch.setattr(sessions, "opened", slurm_job)
    current = sessions.Session(Launching(output=tmp_path), EngineOptions(slurm=True))
    spec = RunSpec("r1", program=Program(ProgramKind.SCRIPT, "t.py"), procs_per_node=8)
    record = {"status": "interrupted", "error": "stopped by SIGTERM", "nodes": [{"n": 1}]}
    with pytest.raises(RunError, match="still unconfirmed") as raised, current.cluster(spec, 1):
        run_dir = create_run_dir(tmp_path, "r1")  # as `dtrun run` writes it, held
        run_dir.write_json(run_dir.path / "run.json", record)
        raise RunInterruptedError("dtrun stopped by SIGTERM")
    said = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert {key: said[key] for key in record} == record  # what was written stays
    assert said["cleanup"] == raised.value.message
    assert "Slurm job 25 is still unconfirmed" in said["cleanup"]
    assert "once the controller answers (`scontrol ping`)" in said["cleanup"]
    assert "`scancel 25`" in said["cleanup"]
    before = (tmp_path / "r1" / "run.json").read_bytes()

    @contextlib.contextmanager
    def no_controller(choice_: ClusterChoice, watch: sessions.StackWatch) -> Iterator[Cluster]:
        raise RunError("Slurm's controller does not answer")  # as sbatch is run
        yield  # a generator, never reached

    monkeypatch.setattr(sessions, "opened", no_controller)
    with pytest.raises(RunError, match="does not answer"), current.cluster(spec, 1):
        pytest.fail("no cluster was opened")
    assert (tmp_path / "r1" / "run.json").read_bytes() == before  # a --resume's, say: kept
    # another run's directory, which this dtrun does not hold, is never written
    release_writer()
    monkeypatch.setattr(sessions, "opened", slurm_job)
    with pytest.raises(RunError, match="still unconfirmed"), current.cluster(spec, 1):
        pass
    assert (tmp_path / "r1" / "run.json").read_bytes() == before
