"""What each launcher plans, and the settings every plan carries whatever the launcher."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dtrun.azure.catalog import SIZES
from dtrun.errors import PlanError
from dtrun.plan.launchers import LAUNCHERS
from dtrun.spec.cluster import SshAccess
from dtrun.spec.request import (
    BenchSpec,
    LauncherOptions,
    Program,
    ProgramKind,
    RunSpec,
    TfStrategy,
)
from tests.conftest import CLUSTERS
from tests.plans import build_plan, build_run_plan

H100 = CLUSTERS["h100"]
EMBEDDED = CLUSTERS["embedded"]
USER_PROGRAM = Program(ProgramKind.SCRIPT, "train.py")


def exports(script: str) -> dict[str, str]:
    """KEY -> the quoted value of every `export KEY=...` line of a script."""
    found = {}
    for line in script.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            found[key] = value
    return found


def test_the_registry_holds_one_launcher_per_name():
    from dtrun.plan.launchers import BUILT_IN

    assert sorted(BUILT_IN) == [  # and each engine's own, once the engine registry is imported
        "deepspeed", "horovod-spark", "horovodrun", "mpirun", "tensorflow", "torchdistributor",
        "torchrun",
    ]  # fmt: skip
    for name, launcher in LAUNCHERS.items():
        assert launcher.name == name


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed", "horovodrun", "mpirun"])
def test_every_launcher_exports_the_size_settings_with_a_reason_each(launcher):
    bench = BenchSpec("t", launcher=launcher, procs_per_node=8)
    script = build_plan(H100, bench, 2).launches[0].script
    for var in SIZES["Standard_ND96isr_H100_v5"].env:
        assert f"# {var.why}\nexport {var.key}={var.value}\n" in script


def test_the_embedded_cluster_gets_no_nccl_settings():
    script = build_plan(EMBEDDED, BenchSpec("t"), 2).launches[0].script
    assert not [key for key in exports(script) if key.startswith(("NCCL_", "UCX_"))]


def test_user_env_wins_over_the_catalog_and_over_nccl_debug():
    bench = BenchSpec(
        "t",
        procs_per_node=8,
        nccl_debug=True,
        env=(("NCCL_MIN_NCHANNELS", "16"), ("NCCL_DEBUG", "WARN")),
    )
    env = exports(build_plan(H100, bench, 2).launches[0].script)
    assert env["NCCL_MIN_NCHANNELS"] == "16"
    assert env["NCCL_DEBUG"] == "WARN"


def test_nccl_debug_turns_on_nccl_info_logging():
    on = exports(build_plan(EMBEDDED, BenchSpec("t", nccl_debug=True), 1).launches[0].script)
    off = exports(build_plan(EMBEDDED, BenchSpec("t"), 1).launches[0].script)
    assert on["NCCL_DEBUG"] == "INFO"
    assert "NCCL_DEBUG" not in off


def test_cluster_env_exports_the_mpi_style_variables_and_renders_a_hostfile():
    plan = build_plan(H100, BenchSpec("t", procs_per_node=8, cluster_env=True), 2)
    env = exports(plan.launches[1].script)
    assert env["CLUSTER_NUM_WORKERS"] == "2"
    assert env["CLUSTER_GPUS_PER_WORKER"] == "8"
    assert env["CLUSTER_HOST_SLOTS"] == "10.2.0.4:8,10.2.0.5:8"
    assert env["CLUSTER_HOSTFILE"] == "hostfile"
    assert env["CLUSTER_NUM_PROCS"] == "16"
    [hostfile] = [f for f in plan.files if f.name == "hostfile"]
    assert hostfile.content == "10.2.0.4 slots=8\n10.2.0.5 slots=8\n"


def test_without_cluster_env_torchrun_needs_no_launch_files():
    assert build_plan(EMBEDDED, BenchSpec("t"), 2).files == ()


@pytest.mark.parametrize(
    ("launcher", "ssh", "scripts"),
    [
        ("torchrun", None, 4),
        ("torchrun", SshAccess(), 4),
        ("deepspeed", None, 4),  # --no_ssh on every node
        ("deepspeed", SshAccess(), 1),  # the head, over pdsh
        ("mpirun", None, 1),
        ("mpirun", SshAccess(), 1),
        ("horovodrun", SshAccess(), 1),
    ],
)
def test_head_only_launchers_run_one_script_and_the_others_one_per_node(launcher, ssh, scripts):
    inventory = replace(EMBEDDED, ssh=ssh)
    plan = build_plan(inventory, BenchSpec("t", launcher=launcher), 4)
    assert [launch.node_rank for launch in plan.launches] == list(range(scripts))
    assert len(plan.nodes) == 4  # every node of the point, scripted or not


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_trains_with_the_zero_stage_asked_and_no_optimizer_block(stage):
    bench = BenchSpec("t", launcher="deepspeed", launch=LauncherOptions(zero_stage=stage))
    plan = build_plan(EMBEDDED, bench, 2)
    [config] = [json.loads(f.content) for f in plan.files if f.name == "ds_config.json"]
    assert config["zero_optimization"] == {"stage": stage}
    assert "optimizer" not in config  # fused Adam would compile for ~45 s on CPU
    assert config["train_batch_size"] == 8 * 2
    assert config["train_micro_batch_size_per_gpu"] == 8
    assert config["bf16"] == {"enabled": False}
    script = plan.launches[0].script
    assert "--module dtrun.workloads.train_deepspeed" in script
    assert "--deepspeed-config ds_config.json" in script


def test_deepspeed_trains_in_bf16_on_gpus():
    bench = BenchSpec("t", launcher="deepspeed", procs_per_node=8)
    plan = build_plan(H100, bench, 2)
    [config] = [json.loads(f.content) for f in plan.files if f.name == "ds_config.json"]
    assert config["bf16"] == {"enabled": True}
    assert config["train_batch_size"] == 8 * 16


@pytest.mark.parametrize("value", ["$(id)", "`id`", 'say "hi"', "a\\b", "one\ntwo", " padded"])
def test_deepspeed_over_pdsh_refuses_values_its_env_file_cannot_carry(value):
    bench = BenchSpec("t", launcher="deepspeed", procs_per_node=8, env=(("TAG", value),))
    with pytest.raises(PlanError, match="cannot reach the other nodes through DeepSpeed") as err:
        build_plan(H100, bench, 2)
    assert "TAG" in err.value.message


def test_deepspeed_without_ssh_exports_any_value_itself():
    bench = BenchSpec("t", launcher="deepspeed", env=(("TAG", "$(id) `id`"),))
    plan = build_plan(EMBEDDED, bench, 2)
    assert ".deepspeed_env" not in [f.name for f in plan.files]
    assert "export TAG='$(id) `id`'" in plan.launches[1].script


def test_deepspeed_env_file_holds_every_exported_setting_in_order():
    bench = BenchSpec("t", launcher="deepspeed", procs_per_node=8, env=(("WANDB_MODE", "off"),))
    plan = build_plan(H100, bench, 2)
    [env_file] = [f for f in plan.files if f.name == ".deepspeed_env"]
    lines = env_file.content.splitlines()
    assert lines[0] == "OMP_NUM_THREADS=12"
    assert "NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml" in lines
    assert lines[-1] == "WANDB_MODE=off"
    assert not [line for line in lines if line.startswith("#") or not line]  # DeepSpeed's parser
    assert env_file.mode == 0o600


def test_a_users_pythonpath_reaches_deepspeeds_nodes_after_the_step_hooks_directory():
    # DeepSpeed exports .deepspeed_env after the head's PYTHONPATH: the user's value alone
    # there replaced the hook's directory on every node, and no step was timed
    bench = BenchSpec(
        "t", launcher="deepspeed", procs_per_node=8, program=USER_PROGRAM,
        env=(("PYTHONPATH", "/home/me/lib"),),
    )  # fmt: skip
    plan = build_plan(H100, bench, 2)
    [env_file] = [f for f in plan.files if f.name == ".deepspeed_env"]
    hook = f"{H100.code_dir}/dtrun/workloads/stephook"
    assert f"PYTHONPATH={hook}:/home/me/lib" in env_file.content.splitlines()
    head = plan.launches[0].script  # the head's own: the same path
    assert exports(head)["PYTHONPATH"] == f'{hook}:"${{PYTHONPATH}}"'
    assert "export PYTHONPATH=/home/me/lib\n" in head


def test_mpirun_binds_per_size_family():
    for inventory, expected in (
        (H100, "--bind-to numa\n"),
        (CLUSTERS["a100"], "--bind-to numa\n"),
        (EMBEDDED, "--bind-to none\n"),
    ):
        bench = BenchSpec("t", launcher="mpirun")
        script = build_plan(inventory, bench, 2).launches[0].script
        assert expected in script
    assert "--mca coll_hcoll_enable 0" in build_plan(H100, bench, 2).launches[0].script


def test_the_launch_env_wrapper_is_executable_and_runs_the_program_last():
    plan = build_plan(H100, BenchSpec("t", launcher="mpirun", procs_per_node=8), 2)
    [wrapper] = [f for f in plan.files if f.name == "launch-env.sh"]
    assert wrapper.mode == 0o755
    last = wrapper.content.rstrip().splitlines()[-1]
    assert last.startswith('exec /shared/dtrun/venv/bin/python -m dtrun.workloads.train "$@" ')


def test_bench_refuses_the_tensorflow_launcher_and_points_to_dtrun_run():
    with pytest.raises(PlanError) as caught:
        build_plan(EMBEDDED, BenchSpec("t", launcher="tensorflow"), 1)
    message = caught.value.message
    assert "cannot run dtrun's built-in workloads" in message
    assert "dtrun run --launcher tensorflow" in message
    assert caught.value.exit_code == 2


def test_tensorflow_runs_one_worker_per_node():
    run = RunSpec("t", USER_PROGRAM, nodes=2, procs_per_node=2, launcher="tensorflow")
    with pytest.raises(PlanError, match="one worker per node"):
        build_run_plan(EMBEDDED, run)


def test_tensorflow_parameter_servers_wrap_around_the_nodes():
    options = LauncherOptions(tf_strategy=TfStrategy.PARAMETER_SERVER, tf_ps=3)
    run = RunSpec("t", USER_PROGRAM, nodes=2, launcher="tensorflow", launch=options)
    configs = [json.loads(f.content) for f in build_run_plan(EMBEDDED, run).files]
    assert configs[0]["cluster"] == {
        "chief": ["127.0.0.2:29400"],
        "worker": ["127.0.0.2:29401", "127.0.0.3:29400"],
        "ps": ["127.0.0.2:29402", "127.0.0.3:29401", "127.0.0.2:29403"],
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (LauncherOptions(zero_stage=4), "--zero-stage must be 1, 2 or 3"),
        (LauncherOptions(tf_ps=0), "--tf-ps must be at least 1"),
    ],
)
def test_bad_launcher_options_are_refused(options, message):
    with pytest.raises(PlanError, match=message):
        build_plan(EMBEDDED, BenchSpec("t", launch=options), 1)


MODULE = Program(ProgramKind.MODULE, "pkg.train", ("--x",))
SCRIPT = Program(ProgramKind.SCRIPT, "train.py", ("--x",))
EXECUTABLE = Program(ProgramKind.EXECUTABLE, "./train.sh", ("--x",))


@pytest.mark.parametrize(
    ("program", "torchrun", "deepspeed"),
    [
        (MODULE, "-m pkg.train --x", "--module pkg.train --x"),
        (SCRIPT, "train.py --x", "train.py --x"),
        (EXECUTABLE, "--no-python ./train.sh --x", "--no_python ./train.sh --x"),
    ],
)
def test_each_launcher_places_a_program_in_its_own_syntax(program, torchrun, deepspeed):
    def last_line(launcher: str) -> str:
        run = RunSpec("t", program, nodes=2, launcher=launcher)
        return build_run_plan(EMBEDDED, run).launches[0].script.rstrip().splitlines()[-1]

    assert last_line("torchrun") == f"  {torchrun}"
    assert last_line("deepspeed") == f"  {deepspeed}"
