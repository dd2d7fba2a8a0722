"""build_plan turns an inventory, a bench spec and a node count into every node's launch."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from dtrun.errors import PlanError
from dtrun.plan.resolve import resolve_bench
from dtrun.spec.cluster import Accelerator, Inventory
from dtrun.spec.request import AllreduceSpec, BenchSpec, HealthGate, ModelSpec, ScalingMode
from tests.plans import build_plan


def test_plan_has_one_launch_per_node_with_ranks_in_inventory_order(fixed_inventory, spec):
    plan = build_plan(fixed_inventory, spec, 3)
    assert [launch.node_rank for launch in plan.launches] == [0, 1, 2]
    assert [launch.node.address for launch in plan.launches] == [
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
    ]
    assert [launch.script_name for launch in plan.launches] == [
        "node-0.sh",
        "node-1.sh",
        "node-2.sh",
    ]
    assert plan.nnodes == 3
    assert plan.master_addr == "127.0.0.2"


def test_world_size_is_nodes_times_processes_per_node(fixed_inventory, spec):
    plan = build_plan(fixed_inventory, replace(spec, procs_per_node=2), 4)
    assert plan.world_size == 8
    assert "--nproc-per-node=2" in plan.launches[0].script


def test_rendezvous_id_is_unique_per_run_and_node_count(fixed_inventory, spec):
    ids = {
        build_plan(fixed_inventory, replace(spec, run_id=run_id), nodes).rdzv_id
        for run_id in ("a", "b")
        for nodes in (1, 2)
    }
    assert len(ids) == 4


def test_plan_is_pure(fixed_inventory, spec):
    assert build_plan(fixed_inventory, spec, 2) == build_plan(fixed_inventory, spec, 2)


def test_weak_scaling_keeps_the_batch_per_process(fixed_inventory, spec):
    batches = {n: build_plan(fixed_inventory, spec, n).batch_per_proc for n in (1, 2, 4)}
    assert batches == {1: 8, 2: 8, 4: 8}


def test_strong_scaling_splits_a_fixed_global_batch(fixed_inventory, spec):
    strong = replace(spec, mode=ScalingMode.STRONG, node_counts=(1, 2, 4), batch=16)
    batches = {n: build_plan(fixed_inventory, strong, n).batch_per_proc for n in (1, 2, 4)}
    assert batches == {1: 16, 2: 8, 4: 4}
    assert "--batch 4" in build_plan(fixed_inventory, strong, 4).launches[0].script


def test_strong_scaling_rejects_a_global_batch_that_does_not_divide(fixed_inventory, spec):
    strong = replace(spec, mode=ScalingMode.STRONG, node_counts=(1, 3), global_batch=8)
    with pytest.raises(PlanError, match="cannot split a global batch of 8 over 3"):
        resolve_bench(strong)


def test_more_nodes_than_the_inventory_holds_is_refused(fixed_inventory, spec):
    with pytest.raises(PlanError, match="cannot run on 5 nodes") as caught:
        build_plan(fixed_inventory, spec, 5)
    assert "holds 4 nodes" in caught.value.message
    assert caught.value.exit_code == 2


def test_unknown_launcher_suggests_the_closest_name(fixed_inventory, spec):
    with pytest.raises(PlanError, match="unknown launcher 'torchrn'") as caught:
        build_plan(fixed_inventory, replace(spec, launcher="torchrn"), 1)
    assert "did you mean 'torchrun'" in caught.value.message


def test_unknown_workload_lists_the_known_ones(fixed_inventory, spec):
    with pytest.raises(PlanError, match="unknown workload 'resnet'") as caught:
        build_plan(fixed_inventory, replace(spec, workload="resnet"), 1)
    assert "known workloads: allreduce, train" in caught.value.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": 0}, "--steps must be at least 1"),
        ({"warmup": 60}, "--warmup must be at least 0 and less than --steps"),
        ({"repeat": 0}, "--repeat must be at least 1"),
        ({"project_tokens": 0}, "--project-tokens must be at least 1"),
        ({"target_efficiency": 1.5}, "--target-efficiency must be a fraction above 0"),
        ({"target_efficiency": -0.1}, "--target-efficiency must be a fraction above 0"),
        ({"node_counts": (0, 2)}, "--nodes needs node counts of at least 1"),
        ({"node_counts": ()}, "--nodes needs node counts of at least 1"),
        ({"model": ModelSpec(d_model=130, heads=4)}, "--d-model must be a multiple of --heads"),
        ({"env": (("1BAD", "x"),)}, "--env '1BAD' is not a valid variable name"),
        ({"env": (("A;rm -rf /", "x"),)}, "is not a valid variable name"),
        ({"rdzv_port": 70000}, "--port must be at least 1 and at most 65,534"),
        ({"allreduce": AllreduceSpec(sizes="4X:1M")}, "--sizes '4X:1M' is not a list of"),
        ({"allreduce": AllreduceSpec(sizes="1M:4K")}, "the first size must be positive and not"),
        ({"allreduce": AllreduceSpec(dtype="int8")}, "--ar-dtype 'int8' is not a type"),
        ({"allreduce": AllreduceSpec(iters=0)}, "--ar-iters must be at least 1"),
        ({"allreduce": AllreduceSpec(warmup=-1)}, "--ar-warmup must be at least 0 and at most"),
        ({"health": HealthGate(threshold_gbs=0)}, "--health-threshold must be above 0 and at most"),
        ({"health": HealthGate(size="1M:4M")}, "--health-size '1M:4M' is not one message size"),
        ({"health": HealthGate(size="lots")}, "--health-size 'lots' is not one message size"),
    ],
)
def test_bad_bench_specs_are_refused_with_the_flag_named(spec, change, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_bench(replace(spec, **change))


def test_user_env_comes_last_and_replaces_dtrun_defaults(fixed_inventory, spec):
    user = replace(spec, env=(("OMP_NUM_THREADS", "3"), ("NCCL_DEBUG", "INFO")))
    script = build_plan(fixed_inventory, user, 1).launches[0].script
    assert script.count("export OMP_NUM_THREADS=") == 1
    assert script.index("export OMP_NUM_THREADS=3") < script.index("export NCCL_DEBUG=INFO")


def test_threads_per_process_share_the_node_cores(fixed_inventory, spec):
    # 8 cores over 4 simulated nodes: 2 per node, 1 per process with 2 processes per node
    one = build_plan(fixed_inventory, spec, 2).launches[0].script
    two = build_plan(fixed_inventory, replace(spec, procs_per_node=2), 2).launches[0].script
    assert "export OMP_NUM_THREADS=2" in one
    assert "export OMP_NUM_THREADS=1" in two


def test_only_node_zero_hosts_the_rendezvous(fixed_inventory: Inventory, spec: BenchSpec):
    plan = build_plan(fixed_inventory, spec, 3)
    hosts = ["is_host=1" in launch.script for launch in plan.launches]
    assert hosts == [True, False, False]
    for launch in plan.launches:
        assert "--rdzv-endpoint=127.0.0.2:29400" in launch.script
        assert f"--local-addr={launch.node.address}" in launch.script


def test_gpu_inventories_train_in_bf16_and_report_mfu_against_the_catalog_peak(
    fixed_inventory, spec
):
    gpu = replace(fixed_inventory, accelerator=Accelerator.CUDA, size="Standard_ND96isr_H100_v5")
    script = build_plan(gpu, spec, 2).launches[0].script
    assert "--device cuda" in script
    assert "--dtype bfloat16" in script
    assert "--peak-tflops 989.0" in script


def test_cpu_inventories_have_no_peak_and_stay_in_float32(fixed_inventory, spec):
    script = build_plan(fixed_inventory, spec, 1).launches[0].script
    assert "--peak-tflops" not in script
    assert "--dtype" not in script


def test_the_allreduce_workload_runs_the_same_module_under_every_pytorch_launcher(
    fixed_inventory, spec
):
    bench = replace(spec, workload="allreduce", allreduce=AllreduceSpec(sizes="1M,16M", iters=7))
    for launcher in ("torchrun", "deepspeed", "mpirun"):
        plan = build_plan(fixed_inventory, replace(bench, launcher=launcher), 2)
        scripts = "".join(launch.script for launch in plan.launches)
        scripts += "".join(file.content for file in plan.files)  # mpirun's launch-env.sh
        assert re.search(r"(-m|--module) dtrun\.workloads\.allreduce", scripts)
        assert "--sizes 1M,16M --dtype float32 --warmup 5 --iters 7 --device cpu" in scripts
        assert "--deepspeed-config" not in scripts  # no engine: no DeepSpeed config
        assert all(f.name != "ds_config.json" for f in plan.files)
        assert plan.batch_per_proc is None


def test_allreduce_sizes_default_to_the_accelerator_s_range(fixed_inventory, spec):
    assert AllreduceSpec().sizes_for(Accelerator.CPU) == "4K:16M"
    assert AllreduceSpec().sizes_for(Accelerator.CUDA) == "4K:1G"
    plan = build_plan(fixed_inventory, replace(spec, workload="allreduce"), 1)
    assert "--sizes 4K:16M" in plan.launches[0].script


def test_training_launches_probe_busbw_unless_told_not_to(fixed_inventory, spec):
    on = build_plan(fixed_inventory, spec, 2).launches[0].script
    off = build_plan(fixed_inventory, replace(spec, busbw=False), 2).launches[0].script
    assert "--busbw-iters 20" in on
    assert "--busbw-iters" not in off


def test_resolving_names_the_launcher_framework_and_every_point_once(spec):
    from dtrun.plan.strategies import STRATEGIES
    from dtrun.spec.request import Framework, LauncherName

    strong = replace(
        spec, launcher="deepspeed", mode=ScalingMode.STRONG, node_counts=(1, 2, 4), batch=8
    )
    resolved = resolve_bench(strong)
    assert resolved.launch.name is LauncherName.DEEPSPEED
    assert resolved.strategy is STRATEGIES["zero2"]  # the deepspeed launcher's own way to train
    assert resolved.framework is Framework.DEEPSPEED
    assert resolved.module == "dtrun.workloads.train_deepspeed"
    assert [(p.nodes, p.world_size, p.batch_per_replica) for p in resolved.points] == [
        (1, 1, 8), (2, 2, 4), (4, 4, 2),
    ]  # fmt: skip
    assert resolved.packages == ("deepspeed",)


def test_a_sweep_plan_holds_every_launch_in_the_order_it_runs(fixed_inventory, spec):
    from tests.plans import sweep_plan

    plan = sweep_plan(fixed_inventory, replace(spec, node_counts=(1, 2), repeat=3))
    assert [p.nnodes for p in plan.points] == [1, 2]
    assert [launch.workdir for launch in plan.launches] == [
        "n1/r0", "n1/r1", "n1/r2", "n2/r0", "n2/r1", "n2/r2",
    ]  # fmt: skip
    assert all(launch.plan is plan.points[launch.plan.nnodes - 1] for launch in plan.launches)
    assert isinstance(plan.gate, str)  # no pass mark for this machine: a reason, not launches
    assert plan.gate_launches == ()
    assert {var.key for var in plan.environment} >= {"OMP_NUM_THREADS", "PYTHONUNBUFFERED"}


def test_a_sweep_larger_than_the_inventory_is_refused_when_planned(fixed_inventory, spec):
    from tests.plans import sweep_plan

    too_many = len(fixed_inventory.nodes) + 1
    with pytest.raises(PlanError, match=f"cannot run on {too_many} nodes"):
        sweep_plan(fixed_inventory, replace(spec, node_counts=(1, too_many)))
