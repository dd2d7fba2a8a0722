"""Rendered scripts run for real against stub launchers that record their arguments.

Per-node launchers (torchrun, deepspeed without ssh, tensorflow) are checked on what each node's
script hands its launcher. Head-only launchers (mpirun, horovodrun, deepspeed over pdsh) are
then played (tests/stubs.py): launch-env.sh runs once per rank with what that launcher sets, and
the stub python records what each process finally sees: the environment contract, and the
program's arguments exactly as given, however nasty.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dtrun.engines.embedded.inventory import local_cluster
from dtrun.spec.cluster import Inventory, SshAccess
from dtrun.spec.request import (
    HorovodController,
    LauncherOptions,
    Program,
    ProgramKind,
    Rendezvous,
    RunSpec,
    TfStrategy,
)
from tests.plans import build_run_plan
from tests.stubs import (
    Player,
    StubCluster,
    play_deepspeed_pdsh,
    play_horovodrun,
    play_mpirun,
)

NASTY = ("it's", "$(touch pwned)", "`touch pwned2`", "a  b", "", "x;y", "new\nline", "*", "-m")
PROGRAM = Program(ProgramKind.SCRIPT, "train.py", NASTY)
SSH = SshAccess(port=2222, identity_file="/keys/id_ed25519")


@pytest.fixture
def stubs(tmp_path):
    return StubCluster(tmp_path)


def inventory(stubs: StubCluster, ssh: SshAccess | None) -> Inventory:
    cluster = local_cluster(2, python_bin=str(stubs.bin), code_dir="/opt/dtrun", cpu_count=4)
    return replace(cluster, ssh=ssh)


def run_spec(launcher: str, options: LauncherOptions | None = None, procs: int = 2) -> RunSpec:
    return RunSpec(
        "stub",
        PROGRAM,
        nodes=2,
        procs_per_node=procs,
        launcher=launcher,
        env=(("WANDB_PROJECT", "it's a test"),),  # DeepSpeed's .deepspeed_env refuses $ and `
        launch=options or LauncherOptions(),
    )


def assert_contract(env: dict[str, str], *, rank: int, procs: int, world: int) -> None:
    node = rank // procs
    assert env["RANK"] == str(rank)
    assert env["LOCAL_RANK"] == str(rank % procs)
    assert env["WORLD_SIZE"] == str(world)
    assert env["LOCAL_WORLD_SIZE"] == str(procs)
    assert env["NODE_RANK"] == str(node)
    assert env["MASTER_ADDR"] == "127.0.0.2"
    assert env["MASTER_PORT"] == "29401"
    assert env["DTRUN_NODE_NAME"] == f"node-{node}"
    assert env["DTRUN_NODE_ADDR"] == f"127.0.0.{node + 2}"
    assert env["WANDB_PROJECT"] == "it's a test"
    assert env["PYTHONPATH"].split(":")[0] == "/opt/dtrun"


HEAD_ONLY: dict[str, tuple[str, LauncherOptions, SshAccess | None, Player, tuple[str, ...]]] = {
    # case: (launcher, options, ssh, player, what the launcher puts before the program's args)
    "mpirun-embedded": ("mpirun", LauncherOptions(), None, play_mpirun, ()),
    "mpirun-ssh": ("mpirun", LauncherOptions(), SSH, play_mpirun, ()),
    "horovodrun-gloo": ("horovodrun", LauncherOptions(), SSH, play_horovodrun, ()),
    "horovodrun-mpi": (
        "horovodrun",
        LauncherOptions(horovod_controller=HorovodController.MPI),
        None,
        play_horovodrun,
        (),
    ),
    "deepspeed-pdsh": ("deepspeed", LauncherOptions(), SSH, play_deepspeed_pdsh, ("local_rank",)),
}


@pytest.mark.parametrize("case", list(HEAD_ONLY))
def test_head_only_launchers_give_every_process_the_contract_and_exact_arguments(stubs, case):
    launcher, options, ssh, play, extra = HEAD_ONLY[case]
    plan = build_run_plan(inventory(stubs, ssh), run_spec(launcher, options))
    stubs.run_scripts(plan)

    [head] = stubs.calls(launcher)  # one launcher, on the head node, for both nodes
    assert head.cwd == str(stubs.workdir)
    for argv, env in play(head, plan):
        stubs.run_wrapper(argv, env)

    processes = stubs.calls("python")
    assert len(processes) == plan.world_size == 4
    seen = set()
    for process in processes:
        rank = int(process.env["RANK"])
        seen.add(rank)
        assert_contract(process.env, rank=rank, procs=2, world=4)
        local_rank = [f"--local_rank={rank % 2}"] if extra else []
        assert process.argv == ["train.py", *local_rank, *NASTY]
    assert seen == {0, 1, 2, 3}
    assert not (stubs.workdir / "pwned").exists()
    assert not (stubs.workdir / "pwned2").exists()


PER_NODE: dict[str, tuple[str, LauncherOptions, tuple[str, ...]]] = {
    # case: (launcher, options, the contract variables the launcher itself sets)
    "torchrun-c10d": ("torchrun", LauncherOptions(), ("RANK", "LOCAL_RANK")),
    "torchrun-static": (
        "torchrun",
        LauncherOptions(rendezvous=Rendezvous.STATIC),
        ("RANK", "LOCAL_RANK"),
    ),
    "deepspeed-no-ssh": ("deepspeed", LauncherOptions(), ("RANK", "LOCAL_RANK")),
}


@pytest.mark.parametrize("case", list(PER_NODE))
def test_per_node_launchers_get_the_node_half_of_the_contract_and_exact_arguments(stubs, case):
    launcher, options, _ = PER_NODE[case]
    plan = build_run_plan(inventory(stubs, None), run_spec(launcher, options))
    stubs.run_scripts(plan)

    calls = sorted(stubs.calls(launcher), key=lambda call: call.env["NODE_RANK"])
    assert len(calls) == 2  # one launcher per node
    for node_rank, call in enumerate(calls):
        env = call.env
        assert env["NODE_RANK"] == str(node_rank)
        assert env["LOCAL_WORLD_SIZE"] == "2"
        assert env["WORLD_SIZE"] == "4"
        assert env["MASTER_ADDR"] == "127.0.0.2"
        assert env["MASTER_PORT"] == "29401"
        assert env["DTRUN_NODE_NAME"] == f"node-{node_rank}"
        assert env["WANDB_PROJECT"] == "it's a test"
        assert call.argv[-len(NASTY) - 1 :] == ["train.py", *NASTY]
    assert not (stubs.workdir / "pwned").exists()


def test_torchrun_is_called_with_a_c10d_rendezvous_on_node_zero(stubs):
    plan = build_run_plan(inventory(stubs, None), run_spec("torchrun"))
    stubs.run_scripts(plan)
    argv = sorted(stubs.calls("torchrun"), key=lambda c: c.env["NODE_RANK"])[1].argv
    assert argv == [
        "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.2:29400", "--rdzv-id=dtrun-stub-n2",
        "--rdzv-conf=is_host=0,join_timeout=600", "--local-addr=127.0.0.3", "--max-restarts=0",
        "--log-dir=torchelastic", "train.py", *NASTY,
    ]  # fmt: skip


def test_torchrun_static_gives_each_node_its_rank_and_the_master(stubs):
    options = LauncherOptions(rendezvous=Rendezvous.STATIC)
    plan = build_run_plan(inventory(stubs, None), run_spec("torchrun", options))
    stubs.run_scripts(plan)
    argv = sorted(stubs.calls("torchrun"), key=lambda c: c.env["NODE_RANK"])[1].argv
    assert argv[:7] == [
        "--nnodes=2", "--nproc-per-node=2", "--node-rank=1", "--master-addr=127.0.0.2",
        "--master-port=29401", "--local-addr=127.0.0.3", "--max-restarts=0",
    ]  # fmt: skip


def test_deepspeed_without_ssh_runs_on_every_node_with_its_node_rank(stubs):
    plan = build_run_plan(inventory(stubs, None), run_spec("deepspeed"))
    stubs.run_scripts(plan)
    argv = sorted(stubs.calls("deepspeed"), key=lambda c: c.env["NODE_RANK"])[1].argv
    assert argv == [
        "--hostfile=hostfile", "--master_addr=127.0.0.2", "--master_port=29401", "--no_ssh",
        "--node_rank=1", "train.py", *NASTY,
    ]  # fmt: skip
    assert (stubs.workdir / "hostfile").read_text() == "127.0.0.2 slots=2\n127.0.0.3 slots=2\n"


@pytest.mark.parametrize(("nodes", "forced"), [(1, True), (2, False)])
def test_deepspeed_over_ssh_starts_from_the_head_with_pdsh_and_the_cluster_key(
    stubs, nodes, forced
):
    spec = replace(run_spec("deepspeed"), nodes=nodes)
    plan = build_run_plan(inventory(stubs, SSH), spec)
    stubs.run_scripts(plan)
    [call] = stubs.calls("deepspeed")
    assert call.argv == [
        "--hostfile=hostfile", "--master_addr=127.0.0.2", "--master_port=29401",
        "--launcher=pdsh", "--ssh_port=2222", "--no_ssh_check",
        *(["--force_multi"] if forced else []), "--no_python", "./launch-env.sh",
    ]  # fmt: skip
    assert call.env["PDSH_SSH_ARGS_APPEND"] == "-i /keys/id_ed25519"
    deepspeed_env = (stubs.workdir / ".deepspeed_env").read_text().splitlines()
    assert deepspeed_env == ["OMP_NUM_THREADS=1", "PYTHONUNBUFFERED=1", "WANDB_PROJECT=it's a test"]
    assert (stubs.workdir / ".deepspeed_env").stat().st_mode & 0o777 == 0o600


def test_horovodrun_gets_slots_ssh_and_the_network_interface(stubs):
    plan = build_run_plan(inventory(stubs, SSH), run_spec("horovodrun"))
    stubs.run_scripts(plan)
    [call] = stubs.calls("horovodrun")
    assert call.argv == [
        "-np", "4", "-H", "127.0.0.2:2,127.0.0.3:2", "--gloo", "--network-interfaces", "lo",
        "--start-timeout", "600", "./launch-env.sh",
    ]  # fmt: skip
    # Its ssh is dtrun's, first on PATH: OpenSSH with the cluster's port and key, host keys checked.
    shim = Path(call.env["PATH"].split(":")[0]) / "ssh"
    assert shim.resolve() == (stubs.workdir / "horovod-ssh.sh").resolve()
    text = shim.read_text().split("\nexec ")[1]  # the command, after the comments
    assert "-o StrictHostKeyChecking=yes" in text and "StrictHostKeyChecking=no" not in text
    assert "-i /keys/id_ed25519 -o IdentitiesOnly=yes" in text and "-p 2222" in text
    assert call.env["DTRUN_REAL_SSH"].endswith("/ssh")


def test_mpirun_places_ranks_node_by_node_and_forwards_every_variable(stubs):
    plan = build_run_plan(inventory(stubs, SSH), run_spec("mpirun"))
    stubs.run_scripts(plan)
    [call] = stubs.calls("mpirun")
    argv = call.argv
    assert argv[:6] == ["--hostfile", "hostfile", "-np", "4", "--map-by", "ppr:2:node"]
    assert argv[6:8] == ["--bind-to", "none"]  # no size known: do not pin simulated nodes
    assert argv[argv.index("plm_rsh_args") + 1] == "-p 2222 -i /keys/id_ed25519"
    forwarded = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-x"]
    assert forwarded[:3] == ["MASTER_ADDR", "MASTER_PORT", "PYTHONPATH"]
    assert {"OMP_NUM_THREADS", "PYTHONUNBUFFERED", "WANDB_PROJECT"} <= set(forwarded)
    assert argv[-1] == "./launch-env.sh"


def test_mpirun_on_the_embedded_cluster_starts_daemons_with_the_local_agent(stubs):
    plan = build_run_plan(inventory(stubs, None), run_spec("mpirun"))
    stubs.run_scripts(plan)
    [call] = stubs.calls("mpirun")
    joined = " ".join(call.argv)
    assert "--mca plm_rsh_agent ./local-rsh.sh --mca plm_rsh_no_tree_spawn 1" in joined
    assert "--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo" in joined
    # each simulated node gets an OpenMPI session directory of its own, removed afterwards
    tmp = call.env["DTRUN_OMPI_TMP"]
    assert "/dtrun-ompi." in tmp
    assert not Path(tmp).exists()


def test_local_rsh_runs_the_daemon_command_here_with_a_session_dir_per_host(stubs, tmp_path):
    plan = build_run_plan(inventory(stubs, None), run_spec("mpirun"))
    stubs.run_scripts(plan)
    env = {"DTRUN_OMPI_TMP": str(tmp_path / "ompi")}
    stubs.run_wrapper(
        ["./local-rsh.sh", "127.0.0.3", "python", "orted", "-mca", "ess", '"env"'], env
    )
    [call] = stubs.calls("python")
    assert call.argv == ["orted", "-mca", "ess", "env"]  # one shell string, as over ssh
    assert call.env["OMPI_MCA_orte_tmpdir_base"] == str(tmp_path / "ompi" / "127.0.0.3")
    assert (tmp_path / "ompi" / "127.0.0.3").is_dir()


def test_tensorflow_nodes_run_the_program_with_their_tf_config(stubs):
    spec = run_spec("tensorflow", procs=1)
    plan = build_run_plan(inventory(stubs, None), spec)
    stubs.run_scripts(plan)
    calls = sorted(stubs.calls("python"), key=lambda c: c.env["NODE_RANK"])
    assert len(calls) == 2
    for rank, call in enumerate(calls):
        assert call.argv == ["train.py", *NASTY]
        assert_contract(call.env, rank=rank, procs=1, world=2)
        config = json.loads(call.env["TF_CONFIG"])
        assert config["task"] == {"type": "worker", "index": rank}
        assert config["cluster"]["worker"] == ["127.0.0.2:29400", "127.0.0.3:29400"]


def test_tensorflow_parameter_server_tasks_each_get_their_own_tf_config(stubs):
    options = LauncherOptions(tf_strategy=TfStrategy.PARAMETER_SERVER, tf_ps=2)
    plan = build_run_plan(inventory(stubs, None), run_spec("tensorflow", options, procs=1))
    # Each stub lingers after recording, as a server would, so that the chief's end (which
    # stops node 0's servers) comes after every task has recorded its call.
    stubs.linger_s = 1.0
    stubs.run_scripts(plan)
    tasks = sorted(
        (config["task"]["type"], config["task"]["index"], call.env["DTRUN_NODE_NAME"])
        for call in stubs.calls("python")
        for config in [json.loads(call.env["TF_CONFIG"])]
    )
    assert tasks == [
        ("chief", 0, "node-0"),
        ("ps", 0, "node-0"),
        ("ps", 1, "node-1"),
        ("worker", 0, "node-0"),
        ("worker", 1, "node-1"),
    ]
