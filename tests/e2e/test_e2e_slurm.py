"""dtrun on a real Slurm cluster (tests/slurmd.py: slurmctld and two slurmd, n1 and n2): a
sweep in the allocation dtrun asks for, a failing node, SIGTERM, a job stuck pending, exec,
mpirun and torchrun inside an allocation made with salloc, dry runs and refused requests."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import (
    DTRUN,
    default_signals,
    ends_within,
    launch_processes,
    launched_running,
    processes_under,
    run_dtrun,
    wait_for,
)
from tests.paths import TESTS

pytestmark = pytest.mark.e2e

QUICK = ("--steps", "6", "--warmup", "2", "--repeat", "1", "--quiet")
SLEEPER = "import time; time.sleep(600)\n"
FAIL_ON_RANK_1 = """\
import os, sys, time
if os.environ["NODE_RANK"] == "1":
    print("rank 1 gives up", flush=True)
    sys.exit(3)
time.sleep(600)
"""


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_a_sweep_runs_in_one_allocation_that_is_cancelled_at_the_end(slurm, no_leftovers):
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", *QUICK, "--output", str(out), "--run-id", "s1",
        "--port", "29630", cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "Slurm job" in said and "runs on 2 nodes: n1,n2" in said
    assert "cancelled; squeue no longer lists it" in said
    assert slurm.jobs() == []  # the allocation is gone
    run = out / "s1"
    result = json.loads((run / "n2" / "r0" / "result.json").read_text())
    assert {(r["node"], r["address"]) for r in result["ranks"]} == {
        ("n1", "127.0.0.21"),
        ("n2", "127.0.0.22"),
    }
    assert result["communication"]["params_in_sync"] is True
    # every point ran as an srun step of the same job, each node's task bound to its script
    log = (run / "n2" / "r0" / "n2.log").read_text()
    assert "runs node-1.sh on n2" in log and "node-1.sh on n2 exited 0" in log
    first = (run / "n1" / "r0" / "n1.log").read_text().split(" of job ")[1].split()[0]
    assert f"of job {first} " in log
    manifest = json.loads((run / "manifest.json").read_text())
    assert json.dumps(manifest).count(f"slurm:job {first}") >= 1
    assert (run / "report.md").exists()


def test_a_static_rendezvous_run_inside_salloc_leaves_the_allocation_to_its_owner(
    slurm, no_leftovers
):
    script = _write(no_leftovers, "hello.py", "import os; print('rank', os.environ['RANK'])\n")
    done = subprocess.run(
        ["salloc", "-N2", *DTRUN, "run", "--slurm", "--nodes", "2", "--rendezvous", "static",
         "--port", "29632", "--output", str(no_leftovers / "runs"), "--", "python", str(script)],
        cwd=no_leftovers, env=slurm.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "inside Slurm job" in done.stdout + done.stderr
    assert "[n1] rank 0" in done.stdout and "[n2] rank 1" in done.stdout
    assert "scancel" not in done.stdout + done.stderr  # salloc's job is salloc's to end


def test_mpirun_inside_the_allocation_starts_its_daemons_with_srun(slurm, no_leftovers):
    script = _write(
        no_leftovers,
        "ranks.py",
        # one write per line: both ranks' output reaches node 0's stream through mpirun, and
        # print's separate writes of each word could interleave
        "import os, socket\n"
        "env = os.environ\n"
        "line = f\"rank {env['RANK']} node {env['NODE_RANK']} {socket.gethostname()}\\n\"\n"
        "os.write(1, line.encode())\n",
    )
    done = subprocess.run(
        ["salloc", "-N2", *DTRUN, "run", "--slurm", "--launcher", "mpirun", "--nodes", "2",
         "--output", str(no_leftovers / "runs"), "--", "python", str(script)],
        cwd=no_leftovers, env=slurm.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # one script on n1 (mpirun); the rank on n2 ran on n2, started by mpirun through srun
    assert "rank 0 node 0 n1" in done.stdout and "rank 1 node 1 n2" in done.stdout
    launch = next((no_leftovers / "runs").iterdir()) / "launch"
    assert (launch / "hostfile").read_text() == "n1 slots=1\nn2 slots=1\n"


def test_a_failing_node_stops_the_step_is_named_and_the_job_is_gone(slurm, no_leftovers):
    script = _write(no_leftovers, "fail.py", FAIL_ON_RANK_1)
    # the guard that n1 was stopped, not waited for: it sleeps 600 s, far past this timeout
    done = run_dtrun(
        "run", "--slurm", "--nodes", "2", "--port", "29634", "--output",
        str(no_leftovers / "runs"), "--", "python", str(script),
        cwd=no_leftovers, env=slurm.env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    # torchrun on n2 exits 1; the message names the rank's own exit and output
    assert "n2 (127.0.0.22) failed with exit code 1" in done.stderr
    assert "rank 1 (local rank 0) exited with exit code 3" in done.stderr
    assert "rank 1 gives up" in done.stderr
    assert slurm.jobs() == []
    record = json.loads(next((no_leftovers / "runs").iterdir()).joinpath("run.json").read_text())
    exits = {node["node"]: node["exit_code"] for node in record["nodes"]}
    assert exits == {"n1": None, "n2": 1}  # n1 stopped by Slurm, n2 failed


def test_sigterm_cancels_the_step_and_the_job_and_leaves_no_process(slurm, no_leftovers):
    script = _write(no_leftovers, "sleep.py", SLEEPER)
    with (no_leftovers / "dtrun.out").open("w+") as out:
        dtrun = subprocess.Popen(
            [*DTRUN, "run", "--slurm", "--nodes", "2", "--port", "29636", "--output",
             str(no_leftovers / "runs"), "--", "python", str(script)],
            cwd=no_leftovers, env=slurm.env, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )  # fmt: skip
        wait_for(
            lambda: len(launched_running("sleep.py")) >= 2,
            timeout=60,
            what="both nodes' programs to start",
        )
        dtrun.send_signal(signal.SIGTERM)
        assert ends_within(dtrun, 60, out) == 143
        out.seek(0)
        said = out.read()
    assert "stopped by SIGTERM: stopping 2 nodes" in said, said
    assert slurm.jobs() == [] and slurm.steps() == []
    assert launch_processes() == []
    record = json.loads(next((no_leftovers / "runs").iterdir()).joinpath("run.json").read_text())
    assert record["status"] == "interrupted"


def test_a_sigkilled_dtrun_leaves_no_job_once_its_lease_runs_out(slurm, no_leftovers):
    """SIGKILL runs none of dtrun's own code: its job ends itself a lease after the last
    renewal (runner/engines/slurm/lease.py), and with it every step and program."""
    script = _write(no_leftovers, "sleep.py", SLEEPER)
    with (no_leftovers / "dtrun.out").open("w+") as out:
        dtrun = subprocess.Popen(
            [*DTRUN, "run", "--slurm", "--nodes", "2", "--port", "29638", "--output",
             str(no_leftovers / "runs"), "--", "python", str(script)],
            cwd=no_leftovers, env={**slurm.env, "DTRUN_SLURM_LEASE_S": "10"}, stdout=out,
            stderr=subprocess.STDOUT, preexec_fn=default_signals,
        )  # fmt: skip

        def sleepers() -> int:
            return len(launched_running("sleep.py"))

        wait_for(lambda: sleepers() >= 2, timeout=60, what="both nodes' programs to start")
        time.sleep(15)  # a lease and a half: renewed while dtrun lives, the job holds
        assert len(slurm.jobs()) == 1 and sleepers() >= 2
        dtrun.kill()
        dtrun.wait(timeout=10)
        # the lease (10 s) after the script last saw a renewal (up to one 5 s poll after the
        # kill), checked every 5 s, and Slurm's teardown of the steps: about 20 s. Without the
        # lease the job holds its nodes until its --time (none asked: the partition's)
        wait_for(
            lambda: slurm.jobs() == [] and launch_processes() == [],
            timeout=120,
            what="the job and every program to end",
        )
    assert slurm.steps() == []


def test_inside_a_users_allocation_a_sigkilled_dtruns_steps_end_and_the_job_stays(
    slurm, no_leftovers
):
    """The allocation is its owner's (salloc, here with more to do after dtrun) and outlives
    dtrun: the step guard (runner/engines/slurm/executor.py) cancels dtrun's step when dtrun is
    gone."""
    script = _write(no_leftovers, "sleep.py", SLEEPER)
    dtrun_line = shlex.join(
        [*DTRUN, "run", "--slurm", "--nodes", "2", "--port", "29640", "--output",
         str(no_leftovers / "runs"), "--", "python", str(script)]
    )  # fmt: skip
    owner = subprocess.Popen(
        ["salloc", "-N2", "bash", "-c", f"{dtrun_line} & echo $! > dtrun.pid; wait; sleep 300"],
        cwd=no_leftovers, env=slurm.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:

        def sleepers() -> int:
            return len(launched_running("sleep.py"))

        wait_for(lambda: sleepers() >= 2, timeout=60, what="both nodes' programs to start")
        assert len(slurm.steps()) == 1
        os.kill(int((no_leftovers / "dtrun.pid").read_text()), signal.SIGKILL)
        wait_for(
            lambda: slurm.steps() == [] and launch_processes() == [],
            timeout=30,
            what="dtrun's step and its programs to end",
        )
        assert len(slurm.jobs()) == 1  # the owner's allocation is the owner's to end
    finally:  # the owner ends the allocation, and salloc and its shell with it
        slurm.run("scancel", "--user", "root")
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
        for proc in processes_under(no_leftovers):  # salloc's shell, in a group of its own
            proc.kill()
    wait_for(lambda: slurm.jobs() == [], timeout=30, what="the allocation to end")


def test_a_job_stuck_pending_says_why_and_gives_up_at_the_queue_timeout(slurm, no_leftovers):
    blocker = slurm.run(
        "sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"
    )
    assert blocker.returncode == 0, blocker.stderr
    # the guard that dtrun gave up at its 4 s: the blocker holds both nodes for 300 s
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "2", *QUICK, "--queue-timeout", "4", "--output",
        str(no_leftovers / "runs"), cwd=no_leftovers, env=slurm.env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "is pending (Resources)" in said or "is pending (Priority)" in said
    assert "waited" in said and "dtrun cancelled it" in said
    assert [job.split()[0] for job in slurm.jobs()] == [blocker.stdout.strip()]


def test_exec_runs_on_every_node_of_the_allocation(slurm, no_leftovers):
    done = run_dtrun(
        "exec", "--slurm", "--", "echo on $(hostname) as $SLURMD_NODENAME",
        cwd=no_leftovers, env=slurm.env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[n1] on n1 as n1" in done.stdout and "[n2] on n2 as n2" in done.stdout
    assert slurm.jobs() == []


def test_a_dry_run_prints_the_request_and_every_srun_line_and_submits_nothing(slurm, no_leftovers):
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", "--partition", "debug", "--time", "10",
        "--dry-run", "--run-id", "dry", cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sbatch --parsable --job-name=dtrun-dry --nodes=2" in done.stdout
    assert "--partition=debug --time=10" in done.stdout
    assert done.stdout.count("srun --jobid=JOBID") == 2  # one step per point
    assert "--nodelist=n1,n2" in done.stdout and "srun-node.sh" in done.stdout
    assert slurm.jobs() == []
    assert not (no_leftovers / "runs").exists()


def test_a_dry_run_naming_a_partition_slurm_lacks_says_so(slurm, no_leftovers):
    """sinfo -p nosuch prints nothing (and exits 0): a traceback (min() of no nodes) before."""
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", "--partition", "nosuch", "--dry-run",
        cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Slurm lists no node in partition 'nosuch'" in done.stderr
    assert "Traceback" not in done.stderr and slurm.jobs() == []


@pytest.mark.parametrize("nodelist", [None, "n[1-2]"], ids=["bare", "with-nodelist"])
@pytest.mark.parametrize(
    "command",
    [("bench", "--slurm", "--nodes", "1,2", *QUICK), ("bench", "--slurm", "--dry-run"),
     ("run", "--slurm", "--nodes", "2", "--", "hostname")],
    ids=["bench", "dry-run", "run"],
)  # fmt: skip
def test_a_shell_that_outlived_its_allocation_is_refused_naming_slurm_job_id(
    slurm, no_leftovers, command, nodelist
):
    """A tmux started under salloc keeps SLURM_JOB_ID after the job ends. Before: a
    traceback (no node list), or a run directory and `srun did not run the launch` (exit 1),
    or `the program hostname cannot be run` (exit 2, a wrong cause)."""
    stale = {"SLURM_JOB_ID": "4242", **({"SLURM_JOB_NODELIST": nodelist} if nodelist else {})}
    done = run_dtrun(
        *command[:1], "--output", str(no_leftovers / "runs"), *command[1:],
        cwd=no_leftovers, env={**slurm.env, **stale},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    said = "this shell's SLURM_JOB_ID is '4242', and that Slurm job is not listed by squeue"
    assert said in done.stderr and "unset SLURM_JOB_ID" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (no_leftovers / "runs").exists() and slurm.jobs() == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--partition", "nosuch"), "Slurm refused dtrun's request for 2 nodes"),
        (("--time", "soon"), "Slurm refused dtrun's request"),
        (("--nodelist", "n9"), "Slurm refused dtrun's request"),
    ],
)
def test_a_request_slurm_refuses_is_one_clear_error(slurm, no_leftovers, args, said):
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", *QUICK, *args, "--output",
        str(no_leftovers / "runs"), cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert slurm.jobs() == []


def test_drain_failing_drains_the_nodes_below_the_mark_with_the_reason(slurm, no_leftovers):
    # one CPU per node cannot reach 1000 GB/s: both nodes fail the gate
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", "-p", "2", "--health-threshold", "1000",
        "--drain-failing", *QUICK, "--run-id", "gate", "--output", str(no_leftovers / "runs"),
        cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--drain-failing drained n1, n2 in Slurm" in done.stderr
    states = slurm.run("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout.splitlines()
    for line in states:
        _, state, reason = line.split("|")
        assert state.startswith("drain"), line
        assert reason.startswith("dtrun health gate, run gate: all-reduce"), line
    health = json.loads((no_leftovers / "runs" / "gate" / "health.json").read_text())
    assert health["status"] == "failed" and "drained n1, n2" in health["note"]
    assert slurm.jobs() == []


def test_a_stacks_own_slurm_is_driven_through_its_head(slurm, no_leftovers, tmp_path_factory):
    """--outputs (or --stack) with --slurm: Slurm's commands run on the head over ssh (an sshd
    on 127.0.0.30 whose sessions see the test cluster's SLURM_CONF, as a head's see
    /etc/slurm), launch directories go to the shared storage and come back."""
    from tests import sshd

    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    head = sshd.start_cluster(
        tmp_path_factory.mktemp("head"), 1, first=30,
        settings={"127.0.0.30": f"SetEnv SLURM_CONF={slurm.conf}\n"},
    )  # fmt: skip
    try:
        shared = no_leftovers / "shared"
        outputs = json.loads(
            TESTS.joinpath("data/outputs/v2-h100-azurefiles-slurm.json").read_text()
        )
        outputs.update(
            head_public_address="127.0.0.30", ssh_port=sshd.PORT, ssh_user=head.user,
            ssh_private_key=head.key.read_text(), known_hosts=[head.hosts[0].known_hosts_line],
            mount_path=str(shared), python_bin=str(Path(DTRUN[0]).parent),
            vm_size="Standard_HB176rs_v4", gpus_per_node=0, slurm_partition="debug",
        )  # fmt: skip
        file = no_leftovers / "outputs.json"
        file.write_text(json.dumps(outputs))
        out = no_leftovers / "runs"
        done = run_dtrun(
            "bench", "--outputs", str(file), "--slurm", "--nodes", "1,2", *QUICK,
            "--no-health-gate", "--port", "29640", "--output", str(out), "--run-id", "head",
            cwd=no_leftovers, env={**slurm.env, "SLURM_CONF": "/nonexistent"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        # the launch ran in the shared storage, and its result came back here
        assert (shared / ".dtrun" / "runs" / "head" / "n2" / "r0" / "node-1.sh").is_file()
        assert (shared / ".dtrun" / "code" / "dtrun" / "workloads" / "train.py").is_file()
        result = json.loads((out / "head" / "n2" / "r0" / "result.json").read_text())
        assert {r["node"] for r in result["ranks"]} == {"n1", "n2"}
        assert (out / "head" / "report.md").is_file()
        assert slurm.jobs() == []
    finally:
        head.close()


def test_deepspeed_runs_on_every_node_without_ssh_under_slurm(slurm, no_leftovers):
    pytest.importorskip("deepspeed")
    script = _write(
        no_leftovers,
        "ds.py",
        "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n",
    )
    done = run_dtrun(
        "run", "--slurm", "--launcher", "deepspeed", "--nodes", "2", "--port", "29642",
        "--output", str(no_leftovers / "runs"), "--", "python", str(script),
        cwd=no_leftovers, env=slurm.env, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[n1] rank 0 of 2" in done.stdout and "[n2] rank 1 of 2" in done.stdout
    assert slurm.jobs() == []


def test_a_launch_past_its_timeout_is_cancelled_in_slurm(slurm, no_leftovers):
    script = _write(no_leftovers, "sleep.py", SLEEPER)
    done = run_dtrun(
        "run", "--slurm", "--nodes", "2", "--timeout", "4", "--port", "29644", "--output",
        str(no_leftovers / "runs"), "--", "python", str(script),
        cwd=no_leftovers, env=slurm.env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not finish within 4 s" in done.stderr
    assert "still running when its Slurm step was cancelled: n1, n2" in done.stderr
    assert slurm.jobs() == [] and slurm.steps() == []


def test_horovodrun_trains_with_horovod_through_srun(slurm, no_leftovers):
    """horovodrun on n1 reaches each node with horovod-ssh.sh, a one-task srun step there."""
    from tests.e2e.test_e2e_launchers import require_horovod

    require_horovod()
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--slurm", "--launcher", "horovodrun", "--nodes", "2", *QUICK,
        "--no-health-gate", "--output", str(out), "--run-id", "hvd", "--port", "29646",
        cwd=no_leftovers, env=slurm.env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "hvd" / "n2" / "r0" / "result.json").read_text())
    assert result["engine"] == "horovod" and result["communication"]["ok"] is True
    assert {(r["node"], r["hostname"]) for r in result["ranks"]} == {("n1", "n1"), ("n2", "n2")}
    assert slurm.jobs() == [] and slurm.steps() == []


def test_sigterm_stops_horovodrun_and_its_srun_steps(slurm, no_leftovers):
    from tests.e2e.test_e2e_launchers import require_horovod

    require_horovod()
    script = _write(no_leftovers, "sleep.py", SLEEPER)
    with (no_leftovers / "dtrun.out").open("w+") as out:
        dtrun = subprocess.Popen(
            [*DTRUN, "run", "--slurm", "--launcher", "horovodrun", "--nodes", "2", "--port",
             "29648", "--output", str(no_leftovers / "runs"), "--", "python", str(script)],
            cwd=no_leftovers, env=slurm.env, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )  # fmt: skip
        wait_for(
            lambda: len(launched_running("sleep.py")) >= 2,
            timeout=90,
            what="both nodes' programs to start",
        )
        dtrun.send_signal(signal.SIGTERM)
        assert ends_within(dtrun, 60, out) == 143
        out.seek(0)
        said = out.read()
    assert "stopped by SIGTERM" in said, said
    wait_for(lambda: slurm.steps() == [] and slurm.jobs() == [], timeout=30, what="no step")
    assert launched_running("") == []


def _start_sleepers(slurm, where: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """dtrun running a 2-node sleeper in its own allocation, both programs up; and the job."""
    script = _write(where, "sleep.py", SLEEPER)
    out = (where / "dtrun.out").open("w+")
    dtrun = subprocess.Popen(
        [*DTRUN, "run", "--slurm", "--nodes", "2", *extra, "--output", str(where / "runs"),
         "--run-id", "f", "--", "python", str(script)],
        cwd=where, env=slurm.env, stdout=out, stderr=subprocess.STDOUT, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    wait_for(
        lambda: len(launched_running("sleep.py")) >= 2,
        timeout=60,
        what="both nodes' programs to start",
    )
    return dtrun, slurm.jobs()[0].split()[0]


def _ended(
    dtrun: subprocess.Popen[str], where: Path, timeout: float
) -> tuple[int, str, dict[str, tuple[int | None, str | None]]]:
    code = dtrun.wait(timeout=timeout)
    said = (where / "dtrun.out").read_text()
    record = json.loads((where / "runs" / "f" / "run.json").read_text())
    return code, said, {n["node"]: (n["exit_code"], n["cause"]) for n in record["nodes"]}


@pytest.mark.parametrize("fault", ["set-down", "slurmd-killed"])
def test_a_node_slurm_loses_mid_run_is_named_and_recorded_as_lost(slurm, no_leftovers, fault):
    """`scontrol update state=down`, or n2's slurmd killed (Slurm finds it after SlurmdTimeout,
    30 s here): the error and the record name n2, and n1 is recorded as stopped."""
    dtrun, _job = _start_sleepers(slurm, no_leftovers, "--port", "29650")
    try:
        if fault == "set-down":
            slurm.run("scontrol", "update", "nodename=n2", "state=down", "reason=dtrun test")
        else:
            slurm.kill_node("n2")
        code, said, nodes = _ended(dtrun, no_leftovers, timeout=120)
    finally:
        if fault == "slurmd-killed":
            slurm.restart_node("n2")
    assert code == 1, said
    assert "error: Slurm lost node n2 (node failure)" in said, said
    assert "srun did not run the launch" not in said
    assert nodes["n2"] == (None, "node failure (Slurm)")
    # n1 was still running when srun ended (dtrun stops it), or had died of the SIGKILL srun
    # sends the step's other tasks under --no-kill (CI caught that race): stopped either way
    assert nodes["n1"] in [(None, None), (137, "stopped with the step: Slurm lost n2")]
    wait_for(lambda: slurm.jobs() == [], timeout=30, what="the job to end")
    # n2's step outlives its slurmd: the restarted slurmd ends it, a moment after the job has
    # left squeue (CI once caught its torchrun dying, a zombie a moment later)
    wait_for(lambda: launch_processes() == [], timeout=30, what="n2's step to be ended")


def test_an_outside_scancel_is_said_and_recorded_as_not_dtruns_doing(slurm, no_leftovers):
    dtrun, job = _start_sleepers(slurm, no_leftovers, "--port", "29652")
    slurm.run("scancel", job)
    code, said, nodes = _ended(dtrun, no_leftovers, timeout=60)
    assert code == 1, said
    assert f"error: Slurm job {job} was cancelled from outside dtrun" in said, said
    assert f"Slurm job {job} had already ended (CANCELLED)" in said
    assert "squeue no longer lists it" not in said  # dtrun did not cancel it
    cause = "cancelled from outside dtrun (scancel)"
    # a node's task may die of the scancel's SIGTERM (143) before srun ends: Slurm's doing too
    assert {n: (code in (None, 143), why) for n, (code, why) in nodes.items()} == {
        "n1": (True, cause),
        "n2": (True, cause),
    }, nodes


def test_a_job_that_reaches_its_time_limit_says_so_and_what_to_set(slurm, no_leftovers):
    """--time 1 (a minute: Slurm's smallest limit); Slurm checks limits every 30 s or so."""
    dtrun, job = _start_sleepers(slurm, no_leftovers, "--port", "29654", "--time", "1")
    code, said, nodes = _ended(dtrun, no_leftovers, timeout=150)
    assert code == 1, said
    assert f"error: Slurm job {job} reached its time limit (1:00)" in said, said
    assert "next: pass a longer --time" in said
    cause = "time limit (Slurm)"  # a task dead of Slurm's SIGTERM (143) is ended by it too
    assert {n: (code in (None, 143), why) for n, (code, why) in nodes.items()} == {
        "n1": (True, cause),
        "n2": (True, cause),
    }, nodes


def test_more_nodes_than_the_partition_holds_is_bad_input_naming_its_size(slurm, no_leftovers):
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,3", *QUICK, "--output", str(no_leftovers / "runs"),
        cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Slurm partition debug has 2: its nodes: n1, n2" in done.stderr
    assert "DTRUN_SLURM_LEASE_S" not in done.stderr and "Traceback" not in done.stderr
    assert slurm.jobs() == []


def test_munge_not_answering_is_the_sites_failure_not_bad_input(slurm, no_leftovers):
    """A client whose munge socket is absent: what every Slurm command here says when munged
    is down, without stopping the munged the test cluster shares."""
    conf = no_leftovers / "slurm.conf"
    conf.write_text(
        slurm.conf.read_text().replace(
            "AuthType=auth/munge", f"AuthType=auth/munge\nAuthInfo=socket={no_leftovers}/none"
        )
    )
    for command, rest in (
        (("run", "--slurm", "--nodes", "2"), ("--", "true")),
        (("bench", "--slurm"), ()),
    ):
        done = run_dtrun(
            *command, "--output", str(no_leftovers / "runs"), *rest,
            cwd=no_leftovers, env={**slurm.env, "SLURM_CONF": str(conf)},
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert "munge, is not answering on this machine" in done.stderr
        assert "--partition" not in done.stderr and "Traceback" not in done.stderr


def test_a_user_program_is_benched_on_slurm_with_its_steps_from_both_nodes(slurm, no_leftovers):
    program = TESTS / "programs" / "ddp_loop.py"
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", "--warmup", "2", "--repeat", "1", "--quiet",
        "--output", str(out), "--run-id", "prog", "--port", "29640",
        "--", "python", str(program), "--steps", "6", "--sleep", "0.02",
        cwd=no_leftovers, env=slurm.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "prog" / "n2" / "r0" / "result.json").read_text())
    assert result["schema"] == "dtrun.program/1"
    assert result["timed_steps"] == 4
    assert {rank["node"] for rank in result["ranks"]} == {"n1", "n2"}
    assert result["proof"]["answer"] == "in sync"
    assert slurm.jobs() == []


def test_a_node_slurm_loses_between_points_is_named_by_the_next_point(slurm, no_leftovers):
    """n2 set down while the 1-node point runs on n1: under --no-kill the job keeps n1, so that
    point finishes and is kept; the 2-node point cannot start on n2 and names it lost (not
    "srun did not run the launch"), and dtrun cancels the job it still holds."""
    program = TESTS / "programs" / "ddp_loop.py"
    out = no_leftovers / "runs"

    def go_down() -> None:
        wait_for(lambda: launched_running("ddp_loop.py") != [], timeout=200,
                 what="the 1-node point to start")  # fmt: skip
        slurm.run("scontrol", "update", "nodename=n2", "state=down", "reason=dtrun test")

    stopper = threading.Thread(target=go_down, daemon=True)
    stopper.start()
    done = run_dtrun(
        "bench", "--slurm", "--nodes", "1,2", "--warmup", "2", "--repeat", "1", "--quiet",
        "--output", str(out), "--run-id", "gap", "--port", "29656",
        "--", "python", str(program), "--steps", "8", "--sleep", "1",
        cwd=no_leftovers, env=slurm.env, timeout=280,
    )  # fmt: skip
    stopper.join(timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "error: Slurm lost node n2 (node failure)" in said, said
    assert "srun did not run the launch" not in said and "Traceback" not in said, said
    runs = json.loads((out / "gap" / "runs.json").read_text())
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(1, "ok"), (2, "failed")], runs
    causes = {n["node"]: n["cause"] for n in runs["runs"][1]["node_results"]}
    assert causes["n2"] == "node failure (Slurm)", runs
    assert "cancelled; squeue no longer lists it" in said, said
    wait_for(lambda: slurm.jobs() == [] and slurm.steps() == [], timeout=30, what="no job")


def test_exec_s_command_failing_on_one_node_answers_its_exit_code(slurm, no_leftovers):
    """srun says `srun: error: n2: task 0: Exited with exit code 3` for a task that fails on
    its own: that is the command's exit code, not srun failing to start the step, and not a
    line of n2's output (before, it streamed as `[n2] srun: error: ...`)."""
    done = run_dtrun(
        "exec", "--slurm", "--", 'echo on $SLURMD_NODENAME; [ "$SLURMD_NODENAME" != n2 ] || exit 3',
        cwd=no_leftovers, env=slurm.env, timeout=60,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "[n1] on n1" in done.stdout and "[n2] on n2" in done.stdout, said
    rows = {row.split()[1]: row.split("│")[3:5] for row in done.stdout.splitlines()
            if row.startswith("│ n")}  # fmt: skip
    assert [cell.strip() for cell in rows["n2"]] == ["3", ""], said  # before: "-", srun's line
    # srun's line for the task's end is not n2's output: the table's exit 3 says it
    assert "Exited with exit code" not in said, said
    assert slurm.jobs() == []


def test_a_sigterm_whose_job_cancel_the_frozen_controller_cannot_confirm_exits_143(
    slurm, no_leftovers
):
    """slurmctld stopped (SIGSTOP), then dtrun SIGTERMed: squeue cannot confirm the cancel.
    dtrun exited 1, as a failed launch does; the signal stopped it, so 143, with the error
    and run.json's `cleanup` saying what to run once the controller answers."""
    dtrun, job = _start_sleepers(slurm, no_leftovers, "--port", "29658")
    controller = slurm.processes[0].pid
    os.kill(controller, signal.SIGSTOP)
    try:
        dtrun.send_signal(signal.SIGTERM)
        code, said, _nodes = _ended(dtrun, no_leftovers, timeout=300)
    finally:
        os.kill(controller, signal.SIGCONT)
    assert code == 143, said
    assert f"error: Slurm job {job} is still unconfirmed (squeue: " in said, said
    assert f"`scancel {job}`" in said
    record = json.loads((no_leftovers / "runs" / "f" / "run.json").read_text())
    assert record["status"] == "interrupted"
    assert f"Slurm job {job} is still unconfirmed" in record["cleanup"]
    slurm.run("scancel", job)  # what the message says to run, once the controller answers
    wait_for(lambda: slurm.jobs() == [], timeout=60, what="the job to end")
    wait_for(lambda: launch_processes() == [], timeout=30, what="the step's processes to end")
