"""`dtrun bench` and `dtrun exec` on a hosts file of real sshd instances (127.0.0.2-5:2222)."""

from __future__ import annotations

import json
import threading

import pytest

from tests.conftest import launched_running, run_dtrun, wait_for
from tests.e2e.test_ssh import hosts_file_text
from tests.paths import TESTS

pytestmark = pytest.mark.e2e


def write_hosts(cluster, tmp, **fields):
    path = tmp / "hosts.yaml"
    path.write_text(hosts_file_text(cluster, tmp, **fields))
    return path


def test_bench_over_ssh_from_a_hosts_file_at_2_and_4_nodes(sshd_cluster, no_leftovers):
    hosts = write_hosts(sshd_cluster, no_leftovers)
    done = run_dtrun(
        "bench", "--hosts", str(hosts), "--nodes", "2,4", "--steps", "4", "--warmup", "1",
        "--repeat", "1",
        "--port", "29740", "--output", str(no_leftovers / "runs"), "--run-id", "ssh", "--quiet",
        "--check", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = no_leftovers / "runs" / "ssh"
    summary = json.loads((run / "summary.json").read_text())
    assert [(row["nodes"], row["in_sync"]) for row in summary["rows"]] == [(2, True), (4, True)]
    four = json.loads((run / "n4" / "r0" / "result.json").read_text())
    assert sorted(rank["address"] for rank in four["ranks"]) == [
        "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5",
    ]  # fmt: skip
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["inventory"]["source"] == f"hosts:{hosts}"
    assert "hosts:" in (run / "report.md").read_text()


@pytest.mark.parametrize(("launcher", "port"), [("mpirun", 29750), ("deepspeed", 29760)])
def test_head_only_launchers_start_the_other_nodes_ranks_over_real_ssh(
    sshd_cluster, no_leftovers, launcher, port
):
    hosts = write_hosts(sshd_cluster, no_leftovers, count=2)
    done = run_dtrun(
        "bench", "--hosts", str(hosts), "--launcher", launcher, "--nodes", "2", "--steps", "3",
        "--warmup", "1", "--repeat", "1", "--port", str(port),
        "--output", str(no_leftovers / "runs"),
        "--run-id", launcher, "--quiet", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(
        (no_leftovers / "runs" / launcher / "n2" / "r0" / "result.json").read_text()
    )
    assert {rank["node"] for rank in result["ranks"]} == {"node-0", "node-1"}
    assert result["communication"]["params_in_sync"] is True
    # only node 0 ran a script: the launcher itself reached node 1 over ssh
    assert not (no_leftovers / "runs" / launcher / "n2" / "r0" / "node-1.log").exists()


# each rank lists its node's OpenMPI daemons' session directories: TMPDIR/ompi.HOST.UID/jf.JOB/0/
# VPID
DAEMON_DIRS = 'echo "daemons $NODE_RANK" $(ls "${TMPDIR:-/tmp}"/ompi.*/jf.*/0)'


def test_mpirun_s_daemon_on_each_node_keeps_its_session_directory_while_the_job_runs(
    sshd_cluster, no_leftovers
):
    """The test nodes share this machine's host name, which names OpenMPI's session directory;
    each orted's start-up clears its job's tree there. With one /tmp for all, the second daemon
    removed the first one's directory, and a start in the middle of the first's mkdir failed it,
    "File exists" (test_login_shells, ksh, 2026-12-07). Each node has its own TMPDIR (tests/
    sshd.py), as a machine has its own /tmp."""
    hosts = write_hosts(sshd_cluster, no_leftovers, count=2)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--hosts", str(hosts), "--launcher", "mpirun", "--nodes", "2", "--port", "29770",
        "--timeout", "120", "--output", str(out), "--run-id", "mpi",
        "--", "sh", "-c", DAEMON_DIRS, cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    log = (out / "mpi" / "launch" / "node-0.log").read_text()
    seen = sorted(line.split()[1:] for line in log.splitlines() if line.startswith("daemons "))
    assert [node for node, *_ in seen] == ["0", "1"], log
    assert [len(dirs) for _, *dirs in seen] == [1, 1] and seen[0][1] != seen[1][1], log


def test_exec_runs_on_every_host_and_fails_when_one_fails(sshd_cluster, tmp_path):
    hosts = write_hosts(sshd_cluster, tmp_path)
    ok = run_dtrun("exec", "--hosts", str(hosts), "--", "echo from $SSH_CONNECTION", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    for address in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"):
        assert f"{address} 2222" in ok.stdout
    failing = run_dtrun(
        "exec", "--hosts", str(hosts), "--nodes", "1,3", "--", "test", "$(hostname)", "=", "x",
        cwd=tmp_path,
    )  # fmt: skip
    assert failing.returncode == 1
    assert "2 of 2 nodes failed" in failing.stderr


def test_an_unknown_host_key_stops_the_command_with_the_way_to_accept_it(sshd_cluster, tmp_path):
    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    hosts = write_hosts(sshd_cluster, tmp_path, count=2, known_hosts=known)
    refused = run_dtrun("exec", "--hosts", str(hosts), "--", "true", cwd=tmp_path)
    assert refused.returncode == 2
    assert "is not known" in refused.stderr and "--accept-new-host-keys" in refused.stderr
    assert "Traceback" not in refused.stderr
    accepted = run_dtrun(
        "exec", "--hosts", str(hosts), "--accept-new-host-keys", "--", "true", cwd=tmp_path
    )
    assert accepted.returncode == 0, accepted.stderr
    assert "recorded the new host key of node-0" in accepted.stdout
    assert len(known.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("stop", "code"),
    # Ctrl-C, then SIGTERM while dtrun stops the nodes: the same stop, its record whole
    [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT,SIGTERM", 130)],
    ids=["ctrl-c", "sigterm", "sighup", "ctrl-c-then-sigterm"],
)
def test_a_signal_over_ssh_stops_every_remote_process(sshd_cluster, no_leftovers, stop, code):
    import contextlib
    import signal
    import subprocess
    import time

    import psutil

    from tests.conftest import DTRUN, default_signals, launch_processes, wait_for

    hosts = write_hosts(sshd_cluster, no_leftovers, count=2)
    proc = subprocess.Popen(
        [*DTRUN, "bench", "--hosts", str(hosts), "--nodes", "2", "--steps", "100000",
         "--warmup", "1", "--repeat", "1", "--port", str(29780 + code % 10 + 5 * stop.count(",")),
         "--output", str(no_leftovers / "runs"),
         "--run-id", "sigint", "--quiet"],
        cwd=no_leftovers, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip

    def training() -> bool:
        workers = []
        for p in launch_processes():
            with contextlib.suppress(psutil.Error):  # a process that just ended
                if "RANK" in p.environ():
                    workers.append(p)
        return len(workers) == 2

    try:
        wait_for(training, timeout=120, what="both remote ranks to have started")
    except BaseException:
        proc.kill()
        raise
    first, *then = stop.split(",")
    proc.send_signal(getattr(signal, first))
    for one in then:
        time.sleep(0.3)  # dtrun is stopping the nodes
        proc.send_signal(getattr(signal, one))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stdout + stderr
    said = "interrupted by the user (Ctrl-C)" if first == "SIGINT" else f"stopped by {stop}"
    assert said in stderr
    assert f"dtrun: {said}: stopping 2 nodes..." in stdout + stderr
    assert "Traceback" not in stderr
    assert launch_processes() == []
    runs = json.loads((no_leftovers / "runs" / "sigint" / "runs.json").read_text())
    assert runs["status"] == "interrupted"
    # each node as the stop left it: none had exited, so both are null, not missing
    (stopped,) = runs["runs"]
    assert [(n["node"], n["exit_code"]) for n in stopped["node_results"]] == [
        ("node-0", None),
        ("node-1", None),
    ]


def test_a_script_missing_on_the_nodes_is_refused_over_ssh_naming_them(sshd_cluster, tmp_path):
    hosts = write_hosts(sshd_cluster, tmp_path, count=2)
    out = tmp_path / "runs"
    done = run_dtrun(
        "run", "--hosts", str(hosts), "--nodes", "2", "--output", str(out), "--",
        "python", "/nonexistent/train.py", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "error: the script /nonexistent/train.py cannot be run: on node-0 and node-1 it does "
        "not exist" in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_a_user_program_is_benched_over_ssh_with_every_node_s_step_records(
    sshd_cluster, no_leftovers
):
    program = TESTS / "programs" / "ddp_loop.py"
    hosts = write_hosts(sshd_cluster, no_leftovers, count=2)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--hosts", str(hosts), "--nodes", "1,2", "--warmup", "2", "--repeat", "1",
        "--port", "29790", "--output", str(out), "--run-id", "prog", "--quiet",
        "--", "python", str(program), "--steps", "6", "--sleep", "0.02", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    point = out / "prog" / "n2" / "r0"
    assert sorted(p.name for p in (point / "dtrun-steps").iterdir()) == [
        "rank-0.json",
        "rank-1.json",
    ]  # copied back from the nodes
    result = json.loads((point / "result.json").read_text())
    assert (result["timed_steps"], result["proof"]["answer"]) == (4, "in sync")
    assert {rank["node"] for rank in result["ranks"]} == {"node-0", "node-1"}


def test_a_node_that_never_answered_fails_readiness_not_as_an_eviction(sshd_cluster, tmp_path):
    text = hosts_file_text(sshd_cluster, tmp_path, count=1).replace(
        "hosts: [127.0.0.2]", "hosts: [127.0.0.2, 127.0.0.99]"
    )
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    done = run_dtrun(
        "bench", "--hosts", str(hosts), "--nodes", "1,2", "--steps", "2", "--warmup", "1",
        "--repeat", "1", "--port", "29790", "--connect-timeout", "6",
        "--output", str(tmp_path / "runs"), "--run-id", "never", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "evicted" not in said and "vanished" not in said, said
    assert "node-1 (127.0.0.99)" in said and "not ready within --connect-timeout 6 s" in said, said
    assert said.count("next:") == 1 and "--resume" not in said, said


def test_a_node_that_answered_the_program_check_and_then_went_away_vanished(
    sshd_cluster, no_leftovers
):
    """node-1 answers the program check, then its sshd goes away while the 1-node point runs
    (a spot VM taken back): it was there, so the 2-node point's failure is an eviction with
    --resume (it read as a node that never answered: "not ready", fix the node)."""
    program = TESTS / "programs" / "ddp_loop.py"
    hosts = write_hosts(sshd_cluster, no_leftovers, count=2)
    out = no_leftovers / "runs"

    def go_away() -> None:
        wait_for(lambda: launched_running("ddp_loop.py") != [], timeout=200,
                 what="the 1-node point to start")  # fmt: skip
        sshd_cluster.stop("127.0.0.3")

    stopper = threading.Thread(target=go_away, daemon=True)
    stopper.start()
    try:
        done = run_dtrun(
            "bench", "--hosts", str(hosts), "--nodes", "1,2", "--warmup", "2", "--repeat", "1",
            "--port", "29794", "--output", str(out), "--run-id", "gone", "--quiet",
            "--connect-timeout", "6",
            "--", "python", str(program), "--steps", "6", "--sleep", "0.5", cwd=no_leftovers,
        )  # fmt: skip
        stopper.join(timeout=60)
    finally:
        if "127.0.0.3" not in sshd_cluster.processes:
            sshd_cluster.start(sshd_cluster.hosts[1])
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "evicted: node-1 (127.0.0.3) vanished" in said, said
    assert f"dtrun bench --resume {out / 'gone'}" in " ".join(said.split()), said
    runs = json.loads((out / "gone" / "runs.json").read_text())
    assert [(r["nodes"], r["status"]) for r in runs["runs"]] == [(1, "ok"), (2, "evicted")], runs
