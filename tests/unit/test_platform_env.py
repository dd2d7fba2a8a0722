"""--platform-env: each platform's own variables on every node, golden for every platform.

The golden files are what `dtrun run --dry-run --platform-env P` prints for a user program:
every node's script and every launch file, on the embedded cluster and on an H100 cluster
reached over ssh, under torchrun (a script on every node) and mpirun (one on the head; every
rank gets its node's values from launch-env.sh). The rest runs the rendered files for real.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from functools import cache

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import PlatformEnv, Program, ProgramKind, RunSpec
from tests.conftest import CLUSTERS, require_tool
from tests.plans import build_run_plan
from tests.unit.test_launchers import exports

PROGRAM = Program(ProgramKind.SCRIPT, "train.py", ("--epochs", "1"))
CASES: dict[str, tuple[PlatformEnv, ...]] = {
    **{platform.value: (platform,) for platform in PlatformEnv},
    "all": tuple(PlatformEnv),
}
LAUNCHERS = ("torchrun", "mpirun")
GOLDEN_CLUSTERS = ("embedded", "h100")


@cache
def plan(case: str, launcher: str, cluster: str, nodes: int = 2, **extra: object) -> LaunchPlan:
    inventory = CLUSTERS[cluster]
    procs = 8 if cluster == "h100" else 1
    run = RunSpec(
        "golden", PROGRAM, nodes=nodes, launcher=launcher, procs_per_node=procs,
        platform_env=CASES[case], **extra,  # type: ignore[arg-type]
    )  # fmt: skip
    return build_run_plan(inventory, run)


def artifacts() -> Iterator[tuple[str, str, str]]:
    """(golden name, file name, content) of every script and launch file of every case."""
    for case in CASES:
        for launcher in LAUNCHERS:
            for cluster in GOLDEN_CLUSTERS:
                p = plan(case, launcher, cluster)
                prefix = f"platform-env/{case}/{launcher}/{cluster}"
                for launch in p.launches:
                    yield f"{prefix}/{launch.script_name}", launch.script_name, launch.script
                for file in p.files:
                    yield f"{prefix}/{file.name}", file.name, file.content


def test_every_platform_s_dry_run_matches_its_golden_files(golden):
    for name, _, content in artifacts():
        golden(name, content)


def test_every_rendered_shell_file_parses_and_passes_shellcheck(tmp_path):
    shellcheck = require_tool("shellcheck")
    files = []
    for index, (name, file_name, content) in enumerate(artifacts()):
        if file_name.endswith(".sh"):
            checked = subprocess.run(["bash", "-n"], input=content, text=True, capture_output=True)
            assert checked.returncode == 0, f"{name}: {checked.stderr}"
            path = tmp_path / f"{index:03d}.sh"
            path.write_text(content)
            files.append(str(path))
    checked = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=style", *files], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout


def node_values(script: str) -> dict[str, str]:
    """Every exported variable of a node script, as bash sees it."""
    probe = script[: script.index("\n\n", script.index("export PYTHONUNBUFFERED"))]
    names = " ".join(exports(script))
    out = subprocess.run(
        ["bash", "-c", f"{probe}\nfor k in {names}; do printf '%s=%s\\0' \"$k\" \"${{!k}}\"; done"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(item.split("=", 1) for item in out.stdout.split("\0") if item)


def test_each_node_of_a_volcano_launch_sees_its_own_index_and_every_worker():
    p = plan("volcano", "torchrun", "h100", nodes=4)
    for rank, launch in enumerate(p.launches):
        seen = node_values(launch.script)
        assert seen["MLP_ROLE_INDEX"] == seen["MLP_WORKER_RACK_RANK_INDEX"] == str(rank)
        assert seen["MLP_HOST"] == launch.node.address
        assert seen["MLP_WORKER_NUM"] == "4" and seen["MLP_WORKER_GPU"] == "8"
        assert seen["MLP_MPI_NP"] == "32"
        assert seen["MLP_MPI_HOSTS"] == "10.2.0.4:8,10.2.0.5:8,10.2.0.6:8,10.2.0.7:8"
        assert seen["MLP_MPI_RACK_HOSTS"] == seen["MLP_MPI_HOSTS"]
        assert seen["MLP_WORKER_0_HOST"] == "10.2.0.4" and seen["MLP_WORKER_3_HOST"] == "10.2.0.7"
        assert seen["MLP_WORKER_0_PORT"] == str(p.master_port)
        assert seen["MLP_MPI_HOSTFILE"] == "hostfile"
    hostfile = next(f for f in p.files if f.name == "hostfile")
    assert hostfile.content.splitlines()[0] == "10.2.0.4 slots=8"


def test_each_sagemaker_node_gets_its_own_resourceconfig_and_current_host():
    p = plan("sagemaker", "torchrun", "h100", nodes=2)
    files = {f.name: f.content for f in p.files}
    for rank, launch in enumerate(p.launches):
        seen = node_values(launch.script)
        config = json.loads(files[f"{seen['SAGEMAKER_BASE_DIR']}/input/config/resourceconfig.json"])
        assert config == json.loads(seen["SM_RESOURCE_CONFIG"])
        assert config == {
            "current_host": launch.node.address,
            "hosts": ["10.2.0.4", "10.2.0.5"],
            "network_interface_name": "eth0",
        }
        assert seen["SM_CURRENT_HOST"] == launch.node.address
        assert json.loads(seen["SM_HOSTS"]) == ["10.2.0.4", "10.2.0.5"]
        assert (seen["SM_NUM_GPUS"], seen["SM_NUM_CPUS"]) == ("8", "96")
        assert seen["SAGEMAKER_BASE_DIR"] == f"sagemaker/node-{rank}"


def test_cpu_nodes_tell_sagemaker_programs_they_have_no_gpus():
    seen = node_values(plan("sagemaker", "torchrun", "embedded").launches[1].script)
    assert seen["SM_NUM_GPUS"] == "0"
    assert seen["SM_CURRENT_HOST"] == "127.0.0.3"


def test_azureml_names_node_0_as_the_master_with_and_without_its_port():
    p = plan("azureml", "torchrun", "h100")
    for launch in p.launches:
        seen = node_values(launch.script)
        assert seen["AZ_BATCH_MASTER_NODE"] == f"10.2.0.4:{p.master_port}"
        assert seen["AZ_BATCHAI_MPI_MASTER_NODE"] == "10.2.0.4"


def test_every_rank_of_a_head_only_launcher_gets_its_own_node_s_values(tmp_path):
    """mpirun starts every rank from node 0; launch-env.sh picks each node's values."""
    printenv = RunSpec(
        "r", Program(ProgramKind.EXECUTABLE, "env"), nodes=2, launcher="mpirun",
        procs_per_node=2, platform_env=tuple(PlatformEnv),
    )  # fmt: skip
    p = build_run_plan(CLUSTERS["embedded"], printenv)
    script = next(f for f in p.files if f.name == "launch-env.sh")
    (tmp_path / "launch-env.sh").write_text(script.content)
    for rank, node_rank in ((0, 0), (1, 0), (2, 1), (3, 1)):
        mpi = {
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % 2),
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "PATH": "/usr/bin:/bin",
        }
        out = subprocess.run(
            ["bash", "launch-env.sh"], cwd=tmp_path, env=mpi, capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        seen = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        address = f"127.0.0.{node_rank + 2}"
        assert seen["SM_CURRENT_HOST"] == seen["MLP_HOST"] == address
        assert seen["MLP_ROLE_INDEX"] == str(node_rank)
        assert seen["SAGEMAKER_BASE_DIR"] == f"sagemaker/node-{node_rank}"
        assert json.loads(seen["SM_RESOURCE_CONFIG"])["current_host"] == address
        assert seen["MLP_MPI_NP"] == "4"


def test_the_user_s_env_wins_over_a_platform_variable():
    p = plan("volcano", "torchrun", "embedded", env=(("MLP_WORKER_GPU", "4"),))
    seen = node_values(p.launches[0].script)
    assert seen["MLP_WORKER_GPU"] == "4"
    assert exports(p.launches[0].script)["MLP_WORKER_GPU"] == "4"  # once, not twice


def test_json_values_do_not_pass_through_deepspeed_s_env_file():
    """.deepspeed_env cannot carry quotes: platform variables are set by launch-env.sh."""
    p = plan("sagemaker", "deepspeed", "h100")
    ds_env = next(f for f in p.files if f.name == ".deepspeed_env")
    assert "SM_" not in ds_env.content
    assert "SM_HOSTS=" in next(f for f in p.files if f.name == "launch-env.sh").content


def test_without_platform_env_nothing_is_added():
    p = build_run_plan(CLUSTERS["embedded"], RunSpec("r", PROGRAM, nodes=2))
    assert not any(key.startswith(("MLP_", "SM_", "AZ_")) for key in exports(p.launches[0].script))
    assert [f.name for f in p.files] == []


@pytest.mark.parametrize("given", ["volcano,sagmaker", "aws"])
def test_an_unknown_platform_is_exit_2_naming_the_valid_ones(tmp_path, given):
    args = ["--output", str(tmp_path), "--platform-env", given, "python", "t.py"]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["run", "--dry-run", *args])
    assert result.exit_code == 2, result.output
    assert "is not a platform dtrun knows" in result.output
    assert "azureml, volcano, sagemaker" in result.output
    assert "Traceback" not in result.output


def test_the_dry_run_prints_the_platform_variables_and_files(tmp_path):
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["run", "--dry-run", "--output", str(tmp_path), "--nodes", "2",
              "--platform-env", "sagemaker", "--platform-env", "volcano", "python", "t.py"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "export SM_CURRENT_HOST=127.0.0.3" in result.output
    assert "export MLP_ROLE_INDEX=1" in result.output
    assert "launch file sagemaker/node-1/input/config/resourceconfig.json" in result.output
    assert "launch file hostfile" in result.output
