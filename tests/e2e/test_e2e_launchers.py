"""Real launches of every launcher that runs here, on the embedded cluster.

torchrun (static rendezvous; c10d is in test_e2e.py), DeepSpeed (ZeRO 2, --no_ssh on each node)
and OpenMPI's mpirun (local remote-shell agent) train the built-in workload on 2 nodes, and
`dtrun run` runs a user program through each of them. Horovod runs only where it is installed.
Each test has ports of its own (29640-29699).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dtrun

pytestmark = pytest.mark.e2e

QUICK = ("--steps", "6", "--warmup", "2", "--repeat", "1", "--quiet")
NASTY = ("it's", "$(touch pwned)", "a  b", "", "--nodes", "x;y")
SECRET = ("--hf-token", "s3cr3t-Value")  # the program gets it; run.json does not show it

# A user program: records what each process sees, in a file of its own per rank.
PROGRAM = """
import json, os, sys
keys = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "NODE_RANK", "DTRUN_NODE_NAME", "CLUSTER_NUM_PROCS")
seen = {key: os.environ.get(key) for key in keys}
seen["argv"] = sys.argv[1:]
with open(f"rank-{os.environ['RANK']}.json", "w") as out:
    json.dump(seen, out)
"""


def bench(
    launcher: str, port: int, cwd: Path, *extra: str, env: dict[str, str] | None = None
) -> dict[str, object]:
    out = cwd / "runs"
    done = run_dtrun(
        "bench", "--launcher", launcher, "--nodes", "2", *QUICK, "--port", str(port),
        "--output", str(out), "--run-id", launcher, *extra, cwd=cwd, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(
        (out / launcher / "n2" / "r0" / "result.json").read_text()
    )
    return result


def assert_trained_together(result: dict[str, object]) -> None:
    comm = result["communication"]
    assert isinstance(comm, dict)
    assert result["world_size"] == 2
    assert comm["allreduce_ok"] is True
    assert comm["initial_params_differed"] is True
    assert comm["params_in_sync"] is True
    ranks = result["ranks"]
    assert isinstance(ranks, list)
    assert [(r["rank"], r["node"], r["address"]) for r in ranks] == [
        (0, "node-0", "127.0.0.2"),
        (1, "node-1", "127.0.0.3"),
    ]


def test_torchrun_with_a_static_rendezvous_trains_on_two_nodes(no_leftovers):
    result = bench("torchrun", 29640, no_leftovers, "--rendezvous", "static")
    assert_trained_together(result)
    assert result["engine"] == "ddp"


def test_deepspeed_trains_with_zero_2_on_two_nodes_and_builds_no_op(no_leftovers):
    # DeepSpeed's CPU accelerator would build its shared-memory op into an empty extension
    # directory (18-37 s here); the training never calls it, so nothing is built.
    extensions = no_leftovers / "torch-extensions"
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions))
    result = bench("deepspeed", 29645, no_leftovers, "--zero-stage", "2", env=env)
    assert not extensions.exists() or not any(extensions.iterdir())
    assert_trained_together(result)
    assert (result["engine"], result["zero_stage"]) == ("deepspeed", 2)
    config = json.loads((no_leftovers / "runs/deepspeed/n2/r0/ds_config.json").read_text())
    assert config["zero_optimization"] == {"stage": 2}
    report = (no_leftovers / "runs/deepspeed/report.md").read_text()
    assert "| Strategy | zero2 (DeepSpeed ZeRO stage 2) |" in report


def test_mpirun_trains_on_two_nodes_and_cleans_up_its_session_dirs(no_leftovers, monkeypatch):
    tmp = no_leftovers / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    result = bench("mpirun", 29650, no_leftovers)
    assert_trained_together(result)
    assert list(tmp.glob("dtrun-ompi.*")) == []  # local-rsh.sh's OpenMPI session directories


@pytest.mark.parametrize(
    ("launcher", "port", "argv_prefix"),
    [
        ("torchrun", 29660, []),
        ("mpirun", 29665, []),
        ("deepspeed", 29670, ["--local_rank=0"]),  # DeepSpeed's convention, kept for its users
    ],
)
def test_run_gives_a_user_program_the_contract_and_its_arguments_unchanged(
    no_leftovers, launcher, port, argv_prefix
):
    script = no_leftovers / "my_train.py"
    script.write_text(PROGRAM)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--launcher", launcher, "--nodes", "2", "--port", str(port), "--cluster-env",
        "--output", str(out), "--run-id", "mine", "--", "python", str(script), *NASTY, *SECRET,
        cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    launch = out / "mine" / "launch"
    # the console folds a long path where the terminal ends: compared without the whitespace
    assert f"logsandoutputsin{launch}" in "".join(done.stdout.split())
    for rank in (0, 1):
        seen = json.loads((launch / f"rank-{rank}.json").read_text())
        assert seen["argv"] == [*argv_prefix, *NASTY, *SECRET]
        assert seen["RANK"] == str(rank)
        assert seen["LOCAL_RANK"] == "0"
        assert seen["WORLD_SIZE"] == "2"
        assert seen["LOCAL_WORLD_SIZE"] == "1"
        assert seen["NODE_RANK"] == str(rank)
        assert seen["DTRUN_NODE_NAME"] == f"node-{rank}"
        assert seen["MASTER_ADDR"] == "127.0.0.2"
        assert seen["MASTER_PORT"]  # torchrun's c10d rendezvous picks its own port
        assert seen["CLUSTER_NUM_PROCS"] == "2"
    assert not (launch / "pwned").exists()
    record = json.loads((out / "mine" / "run.json").read_text())
    assert record["status"] == "ok"
    assert record["spec"]["program"]["args"] == [*NASTY, "--hf-token", "<redacted>"]
    assert SECRET[1] not in (out / "mine" / "run.json").read_text()
    assert [node["exit_code"] for node in record["nodes"]] == [0] * len(record["nodes"])


def test_a_failing_user_program_fails_the_run_and_names_the_node(no_leftovers):
    script = no_leftovers / "crash.py"
    script.write_text("import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit('boom')\n")
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--nodes", "2", "--port", "29675", "--output", str(out), "--run-id", "crash",
        "--", "python", str(script), cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "node-1 (127.0.0.3) failed" in done.stderr
    assert "crash.py FAILED" in done.stderr  # the last lines of the failed node's log
    assert "boom" in (out / "crash" / "launch" / "node-1.log").read_text()
    record = json.loads((out / "crash" / "run.json").read_text())
    assert record["status"] == "failed"


def require_horovod() -> None:
    """Horovod is part of the test setup (./dev builds it): missing, these tests fail."""
    if importlib.util.find_spec("horovod") is None:
        pytest.fail("Horovod is not installed in this Python: run ./dev setup, which builds it")


def horovod_results(run_dir: Path, nodes: int) -> list[dict[str, Any]]:
    return [
        json.loads(path.read_text())
        for path in sorted((run_dir / f"n{nodes}").glob("r*/result.json"))
    ]


def test_horovodrun_trains_with_horovod_on_the_embedded_cluster(no_leftovers):
    """No sshd: horovod-ssh.sh runs each node's command here; the workload trains with Horovod's
    DistributedOptimizer and times hvd.allreduce, and the proof holds on ranks of two nodes."""
    require_horovod()
    done = run_dtrun(
        "bench", "--launcher", "horovodrun", "--nodes", "1,2", "--steps", "4", "--warmup", "1",
        "--repeat", "1", "--no-health-gate", "--port", "29694",
        "--output", str(no_leftovers / "runs"), "--run-id", "hvd", "--quiet", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = horovod_results(no_leftovers / "runs" / "hvd", 2)
    assert (result["engine"], result["strategy"]) == ("horovod", "horovod")
    assert result["horovod"] == {"version": "0.28.1", "controller": "gloo"}
    assert [rank["node"] for rank in result["ranks"]] == ["node-0", "node-1"]
    checks = {check["name"]: check["ok"] for check in result["communication"]["checks"]}
    assert checks == {"weights": True, "gradients": True}
    assert result["communication"]["initial_params_differed"] is True
    assert result["busbw"]["rows"] and all(
        r["in_place"]["wrong"] == 0 for r in result["busbw"]["rows"]
    )
    log = (no_leftovers / "runs" / "hvd" / "n2" / "r0" / "node-0.log").read_text()
    assert "[1]<stdout>" in log or "[1]<stderr>" in log or "[0]<stdout>" in log  # horovodrun's tags


def test_the_allreduce_workload_under_horovodrun_times_horovods_allreduce(no_leftovers):
    require_horovod()
    done = run_dtrun(
        "bench", "--launcher", "horovodrun", "--workload", "allreduce", "--nodes", "2",
        "--sizes", "4K:64K", "--ar-iters", "3", "--repeat", "1", "--no-health-gate",
        "--port", "29696", "--output", str(no_leftovers / "runs"), "--run-id", "hvdar",
        "--quiet", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = horovod_results(no_leftovers / "runs" / "hvdar", 2)
    assert result["library"] == "horovod" and result["world_size"] == 2
    assert result["communication"]["wrong"] == 0 and len(result["rows"]) == 5


def test_horovodrun_trains_on_two_nodes_over_real_ssh(sshd_cluster, no_leftovers):
    """horovodrun reaches the other node through horovod-ssh.sh: OpenSSH to the loopback sshd
    with the hosts file's key and known_hosts, host keys checked (Horovod's own line would
    accept any)."""
    from tests.e2e.test_ssh import hosts_file_text

    require_horovod()
    hosts = no_leftovers / "hosts.yaml"
    hosts.write_text(hosts_file_text(sshd_cluster, no_leftovers, count=2))
    done = run_dtrun(
        "bench", "--hosts", str(hosts), "--launcher", "horovodrun", "--nodes", "2", "--steps",
        "3", "--warmup", "1", "--repeat", "1", "--port", "29690",
        "--output", str(no_leftovers / "runs"),
        "--run-id", "horovod", "--quiet", cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = horovod_results(no_leftovers / "runs" / "horovod", 2)
    assert result["engine"] == "horovod"
    assert result["communication"]["params_in_sync"] is True
    assert [rank["node"] for rank in result["ranks"]] == ["node-0", "node-1"]


# A TensorFlow-shaped program without TensorFlow: it reads TF_CONFIG as tf.distribute would;
# workers and parameter servers then serve forever (server.join()), the chief "trains" and ends.
TF_PROGRAM = """
import json, os, time
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
with open(f"{task['type']}-{task['index']}.json", "w") as out:
    json.dump({"config": config, "node": os.environ["DTRUN_NODE_NAME"]}, out)
if task["type"] == "chief":  # as a real chief, it is done only once every task has joined
    others = [f"{kind}-{i}.json" for kind, hosts in config["cluster"].items()
              for i in range(len(hosts)) if kind != "chief"]
    deadline = time.monotonic() + 60
    while not all(os.path.exists(name) for name in others) and time.monotonic() < deadline:
        time.sleep(0.05)
if task["type"] in ("worker", "ps") and "chief" in config["cluster"]:
    time.sleep(600)
"""


@pytest.mark.parametrize(
    ("strategy", "tasks"),
    [
        ("multi-worker-mirrored", {"worker-0": "node-0", "worker-1": "node-1"}),
        (
            "parameter-server",
            {"chief-0": "node-0", "worker-0": "node-0", "worker-1": "node-1", "ps-0": "node-0"},
        ),
    ],
)
def test_tensorflow_tasks_run_with_their_tf_config_and_servers_stop_with_the_chief(
    no_leftovers, strategy, tasks
):
    script = no_leftovers / "tf_train.py"
    script.write_text(TF_PROGRAM)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--launcher", "tensorflow", "--tf-strategy", strategy, "--nodes", "2",
        "--port", "29680", "--timeout", "120", "--output", str(out), "--run-id", "tf",
        "--", "python", str(script), cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    launch = out / "tf" / "launch"
    for task, node in tasks.items():
        seen = json.loads((launch / f"{task}.json").read_text())
        assert seen["node"] == node
        assert f"{seen['config']['task']['type']}-{seen['config']['task']['index']}" == task
    record = json.loads((out / "tf" / "run.json").read_text())
    assert record["status"] == "ok"
    # with a chief, node 1 only serves: dtrun stopped it once the chief was done
    exits = [node["exit_code"] for node in record["nodes"]]
    assert exits == ([0, None] if strategy == "parameter-server" else [0, 0])


# Node 1 never ends on its own; node 0 ends once node 1 has started, saying what it saw.
WORKER0_PROGRAM = """
import json, os, pathlib, time
if os.environ["NODE_RANK"] == "1":
    pathlib.Path("node-1-started").touch()
    time.sleep(3600)
while not pathlib.Path("node-1-started").exists():
    time.sleep(0.05)
config = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "input/config/resourceconfig.json")
seen = {key: os.environ.get(key) for key in ("MLP_ROLE_INDEX", "MLP_MPI_NP", "SM_CURRENT_HOST")}
seen["resourceconfig"] = json.loads(config.read_text())
pathlib.Path("node-0.json").write_text(json.dumps(seen))
"""


def test_under_worker0_the_run_succeeds_when_node_0_does_and_node_1_is_stopped(no_leftovers):
    """Volcano's rule: node 0 exits 0 while node 1 still runs. The tensorflow launcher runs the
    program directly on each node (torchrun's agents would wait for each other at exit)."""
    script = no_leftovers / "worker0.py"
    script.write_text(WORKER0_PROGRAM)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--launcher", "tensorflow", "--nodes", "2", "--port", "29700", "--timeout", "120",
        "--success", "worker0", "--platform-env", "volcano,sagemaker", "--output", str(out),
        "--run-id", "w0", "--", "python", str(script), cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node 0 exited 0, 1 node stopped after it" in " ".join(done.stdout.split())
    launch = out / "w0" / "launch"
    seen = json.loads((launch / "node-0.json").read_text())
    assert seen["MLP_ROLE_INDEX"] == "0" and seen["MLP_MPI_NP"] == "2"
    assert seen["SM_CURRENT_HOST"] == "127.0.0.2"
    assert seen["resourceconfig"]["hosts"] == ["127.0.0.2", "127.0.0.3"]
    record = json.loads((out / "w0" / "run.json").read_text())
    assert record["status"] == "ok"
    assert record["spec"]["success"] == "worker0"
    assert record["spec"]["platform_env"] == ["volcano", "sagemaker"]
    ended = [(n["node"], n["exit_code"], n["stopped_after_worker0"]) for n in record["nodes"]]
    assert ended == [("node-0", 0, False), ("node-1", None, True)]
