"""Every launcher's rendered files for 1, 2 and 4 nodes of three clusters: golden, bash, shellcheck.

The clusters are the embedded one (CPU, no sshd) and two Azure sizes reached over ssh (A100 v4
on port 2222 with ssh's default key, H100 v5 with a key file), so each launcher shows both its
embedded and its real-cluster form. TensorFlow runs a user program (`dtrun run`); the others the
built-in training workload (`dtrun bench`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from functools import cache

import pytest

from dtrun.spec.cluster import Accelerator
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import (
    BenchSpec,
    HorovodController,
    LauncherOptions,
    ModelSpec,
    PipelineSchedule,
    Program,
    ProgramKind,
    Rendezvous,
    RunSpec,
    StrategySpec,
    TfStrategy,
)
from tests.conftest import CLUSTERS, require_tool
from tests.plans import build_plan, build_run_plan

TF_PROGRAM = Program(ProgramKind.SCRIPT, "train_tf.py", ("--epochs", "1"))

# case -> (launcher, its options); the first five are the launchers as they come by default.
CASES: dict[str, tuple[str, LauncherOptions]] = {
    "torchrun": ("torchrun", LauncherOptions()),
    "deepspeed": ("deepspeed", LauncherOptions()),
    "horovodrun": ("horovodrun", LauncherOptions()),
    "mpirun": ("mpirun", LauncherOptions()),
    "tensorflow": ("tensorflow", LauncherOptions()),
    "torchrun-static": ("torchrun", LauncherOptions(rendezvous=Rendezvous.STATIC)),
    "deepspeed-zero3": ("deepspeed", LauncherOptions(zero_stage=3)),
    "horovodrun-mpi": ("horovodrun", LauncherOptions(horovod_controller=HorovodController.MPI)),
    "tensorflow-ps": (
        "tensorflow",
        LauncherOptions(tf_strategy=TfStrategy.PARAMETER_SERVER, tf_ps=2),
    ),
    **{case: ("torchrun", LauncherOptions()) for case in ("torchrun-fsdp", "torchrun-zero3")},
    "torchrun-pipeline": ("torchrun", LauncherOptions()),
}
NODE_COUNTS = (1, 2, 4)
# case -> how the built-in workload trains (docs/workloads.md), under torchrun.
# The pipeline spans every rank of a point (up to 32 on the GPU clusters), one layer per stage.
STRATEGY_CASES: dict[str, StrategySpec] = {
    "torchrun-fsdp": StrategySpec("fsdp"),
    "torchrun-zero3": StrategySpec("zero3"),
    "torchrun-pipeline": StrategySpec("pipeline", PipelineSchedule.GPIPE, micro_batches=8),
}


@cache
def plan(case: str, cluster: str, nodes: int) -> LaunchPlan:
    launcher, options = CASES[case]
    inventory = CLUSTERS[cluster]
    if launcher == "tensorflow":  # not a built-in workload launcher: plan a user program
        run = RunSpec("golden", TF_PROGRAM, nodes=nodes, launcher=launcher, launch=options)
        return build_run_plan(inventory, run)
    gpus = 8 if inventory.accelerator is Accelerator.CUDA else 1
    bench = BenchSpec("golden", launcher=launcher, procs_per_node=gpus, launch=options)
    if case in STRATEGY_CASES:
        bench = replace(bench, strategy=STRATEGY_CASES[case], model=ModelSpec(layers=32))
    return build_plan(inventory, bench, nodes)


def artifacts() -> Iterator[tuple[str, str, str]]:
    """(golden name, file name, content) of every script and launch file of every case."""
    for case in CASES:
        for cluster in CLUSTERS:
            for nodes in NODE_COUNTS:
                prefix = f"launchers/{case}/{cluster}/n{nodes}"
                p = plan(case, cluster, nodes)
                for launch in p.launches:
                    yield f"{prefix}/{launch.script_name}", launch.script_name, launch.script
                for file in p.files:
                    yield f"{prefix}/{file.name}", file.name, file.content


def shell_artifacts() -> Iterator[tuple[str, str]]:
    for name, file_name, content in artifacts():
        if file_name.endswith(".sh"):
            yield name, content


def test_every_launch_file_matches_its_golden_file(golden):
    for name, _, content in artifacts():
        golden(name, content)


def test_every_rendered_shell_file_parses_with_bash():
    for name, content in shell_artifacts():
        checked = subprocess.run(["bash", "-n"], input=content, text=True, capture_output=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"


def test_every_rendered_shell_file_passes_shellcheck(tmp_path):
    shellcheck = require_tool("shellcheck")
    files = []
    for index, (name, content) in enumerate(shell_artifacts()):
        path = tmp_path / f"{index:03d}-{name.replace('/', '_')}"
        path.write_text(content)
        files.append(str(path))
    assert len(files) > 100  # every case, cluster and node count
    checked = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=style", *files], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout


def test_every_json_launch_file_parses():
    names = [name for name, file_name, _ in artifacts() if file_name.endswith(".json")]
    assert any("ds_config" in name for name in names)
    assert any("tf-config" in name for name in names)
    for name, file_name, content in artifacts():
        if file_name.endswith(".json"):
            assert isinstance(json.loads(content), dict), name


@pytest.mark.parametrize("cluster", list(CLUSTERS))
@pytest.mark.parametrize("nodes", NODE_COUNTS)
def test_each_worker_gets_a_tf_config_naming_every_worker_and_itself(cluster, nodes):
    p = plan("tensorflow", cluster, nodes)
    configs = {f.name: json.loads(f.content) for f in p.files}
    addresses = [f"{node.address}:29400" for node in CLUSTERS[cluster].nodes[:nodes]]
    assert sorted(configs) == sorted(f"tf-config-worker-{i}.json" for i in range(nodes))
    for index in range(nodes):
        config = configs[f"tf-config-worker-{index}.json"]
        assert config == {
            "cluster": {"worker": addresses},
            "task": {"type": "worker", "index": index},
        }
        script = p.launches[index].script
        assert f'TF_CONFIG="$(<tf-config-worker-{index}.json)"' in script
        assert f"export RANK={index}" in script
        assert "exec /shared/dtrun/venv/bin/python train_tf.py --epochs 1" in script or (
            "exec /opt/dtrun/venv/bin/python train_tf.py --epochs 1" in script
        )


@pytest.mark.parametrize("nodes", NODE_COUNTS)
@pytest.mark.parametrize("servers", [1, 2, 5])
def test_parameter_server_configs_place_chief_workers_and_servers(nodes, servers):
    options = LauncherOptions(tf_strategy=TfStrategy.PARAMETER_SERVER, tf_ps=servers)
    run = RunSpec("golden", TF_PROGRAM, nodes=nodes, launcher="tensorflow", launch=options)
    p = build_run_plan(CLUSTERS["h100"], run)
    configs = [json.loads(f.content) for f in p.files]
    cluster = configs[0]["cluster"]
    assert all(config["cluster"] == cluster for config in configs)
    assert cluster["chief"] == ["10.2.0.4:29400"]
    assert len(cluster["worker"]) == nodes
    assert len(cluster["ps"]) == servers
    # every task has an address of its own, and each task's file says which one it is
    every = [addr for addrs in cluster.values() for addr in addrs]
    assert len(set(every)) == len(every)
    tasks = sorted((c["task"]["type"], c["task"]["index"]) for c in configs)
    expected = [("chief", 0)] + [("ps", i) for i in range(servers)]
    expected += [("worker", i) for i in range(nodes)]
    assert tasks == sorted(expected)
    # each task's own entry in its list is the address of the node whose script starts it
    for f in p.files:
        task = json.loads(f.content)["task"]
        host = cluster[task["type"]][task["index"]].split(":")[0]
        [launch] = [launch for launch in p.launches if f'"$(<{f.name})"' in launch.script]
        assert launch.node.address == host, f.name
    # the chief runs in the foreground of node 0; the other nodes only serve
    assert [launch.service for launch in p.launches] == [False] + [True] * (nodes - 1)
    assert 'TF_CONFIG="$(<tf-config-chief-0.json)" /shared' in p.launches[0].script


def test_every_tf_config_is_written_as_json_dumps_writes_it_beyond_the_golden_node_counts():
    """A TF_CONFIG's text is json.dumps(indent=2) of what it holds, on more nodes and servers
    than the golden files have: the cluster, the same in every file, is encoded once and
    nested (tensorflow.py, tf_configs)."""
    base = CLUSTERS["h100"]
    nodes = tuple(
        replace(base.nodes[0], name=f"node-{i}", address=f"10.9.0.{i + 1}") for i in range(7)
    )
    options = LauncherOptions(tf_strategy=TfStrategy.PARAMETER_SERVER, tf_ps=9)
    run = RunSpec("golden", TF_PROGRAM, nodes=7, launcher="tensorflow", launch=options)
    p = build_run_plan(replace(base, nodes=nodes), run)
    assert len(p.files) == 1 + 7 + 9
    for f in p.files:
        config = json.loads(f.content)
        assert f.content == json.dumps(config, indent=2) + "\n", f.name
        assert len(config["cluster"]["ps"]) == 9 and len(config["cluster"]["worker"]) == 7


def test_a_program_is_not_timed_from_a_code_folder_whose_path_splits_pythonpath():
    """The step hook reaches every process through PYTHONPATH, from under the code folder
    (this checkout on the embedded, Ray, Spark engines and inside a Slurm allocation): a ':'
    in that folder's path splits PYTHONPATH, the hook is never imported, and the launch would
    run and find no step. Hosts files and stack outputs refuse such a path where they are read."""
    from dtrun.engines.embedded.inventory import local_cluster
    from dtrun.errors import PlanError
    from dtrun.plan.resolve import resolve_bench
    from dtrun.plan.sweep import plan_sweep
    from dtrun.spec.request import BenchSpec, Program, ProgramKind

    cluster = local_cluster(2, python_bin="/v/bin", code_dir="/home/u/ml:v2", cpu_count=4)
    program = Program(ProgramKind.SCRIPT, "/w/train.py")
    bench = BenchSpec("r1", launcher="torchrun", node_counts=(2,), program=program)
    with pytest.raises(PlanError, match="/home/u/ml:v2 holds ':'") as refused:
        plan_sweep(resolve_bench(bench), cluster)
    assert refused.value.exit_code == 2
    assert "PYTHONPATH" in str(refused.value)
