"""Training strategies and model presets in the plan: what each point runs, and what is refused
before anything starts (docs/workloads.md "Training strategies")."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
import torch

from dtrun.errors import PlanError
from dtrun.plan.presets import PRESETS, describe, matmul_param_count, param_count, resolve_model
from dtrun.plan.resolve import resolve_bench
from dtrun.spec.cluster import Accelerator, Inventory
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import (
    BenchSpec,
    LauncherOptions,
    ModelSpec,
    PipelineSchedule,
    ScalingMode,
    StageSplit,
    StrategySpec,
    TrainDtype,
)
from dtrun.workloads import gpt
from tests.conftest import CLUSTERS
from tests.plans import build_plan


def pipeline(**fields: object) -> StrategySpec:
    return StrategySpec("pipeline", **fields)  # type: ignore[arg-type]


def bench(strategy: StrategySpec, **fields: object) -> BenchSpec:
    return replace(BenchSpec("t", node_counts=(1, 2)), strategy=strategy, **fields)  # type: ignore[arg-type]


def program(plan: LaunchPlan) -> tuple[str, dict[str, str]]:
    """(module, its --name value pairs), read from node 0's launch script."""
    line = next(line for line in plan.launches[0].script.splitlines() if " -m dtrun." in line)
    words = shlex.split(line)
    words = words[words.index("-m") + 1 :]
    return words[0], dict(zip(words[1::2], words[2::2], strict=True))


def train_args(plan: LaunchPlan) -> dict[str, str]:
    return program(plan)[1]


# Presets: counted from the shape, checked against the real model


@pytest.mark.parametrize("name", ["tiny", "mini"])
def test_preset_parameter_count_matches_the_model_built_from_it(name):
    shape = PRESETS[name]
    model = gpt.GPT(shape.vocab, shape.seq_len, shape.layers, shape.d_model, shape.heads)
    assert param_count(shape) == sum(p.numel() for p in model.parameters())
    assert matmul_param_count(shape) == param_count(shape) - model.pos.weight.numel()
    assert gpt.param_counts(shape.vocab, shape.seq_len, shape.layers, shape.d_model) == (
        param_count(shape),
        matmul_param_count(shape),
    )


@pytest.mark.parametrize("name", ["125m", "350m", "760m", "1.3b"])
def test_large_presets_count_the_same_on_a_model_that_takes_no_memory(name):
    shape = PRESETS[name]
    with torch.device("meta"):
        model = gpt.GPT(shape.vocab, shape.seq_len, shape.layers, shape.d_model, shape.heads)
    assert param_count(shape) == sum(p.numel() for p in model.parameters())


def test_presets_grow_from_a_toy_to_about_a_billion_parameters():
    counts = [param_count(shape) for shape in PRESETS.values()]
    assert counts == sorted(counts)
    assert counts[0] < 1e6 and 1.2e9 < counts[-1] < 1.5e9
    # Within 10% of the GPT-3 paper's names (the tied embedding makes them a little smaller).
    for name, nominal in (("125m", 125e6), ("350m", 350e6), ("760m", 760e6), ("1.3b", 1.3e9)):
        assert abs(param_count(PRESETS[name]) / nominal - 1) < 0.1, name
    assert describe("1.3b") == f"1.3b ({param_count(PRESETS['1.3b']) / 1e9:.2f}B parameters)"


def test_a_preset_field_given_on_the_command_line_replaces_the_presets():
    model = resolve_model("125m", layers=2)
    # no longer the preset's shape, so not recorded under its name
    assert (model.layers, model.d_model, model.preset) == (2, 768, None)
    assert resolve_model("125m", layers=12).preset == "125m"  # the preset's own value


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(PlanError, match="unknown preset '2b'") as caught:
        resolve_model("2b")
    assert "tiny" in caught.value.why and "1.3b" in caught.value.why


# What each strategy puts on the command line of the workload


@pytest.mark.parametrize(
    ("strategy", "module", "args"),
    [
        ("ddp", "dtrun.workloads.train", {}),
        ("fsdp", "dtrun.workloads.train", {"--strategy": "fsdp"}),
        ("zero3", "dtrun.workloads.train_deepspeed", {"--deepspeed-config": "ds_config.json"}),
    ],
)
def test_data_parallel_strategies_pick_their_program(
    fixed_inventory: Inventory, strategy, module, args
):
    target, given = program(build_plan(fixed_inventory, bench(StrategySpec(strategy)), 2))
    assert target == module
    assert {k: given[k] for k in args} == args
    assert "--schedule" not in given


def test_a_pipeline_spans_every_rank_of_a_point_unless_pp_size_says_otherwise(
    fixed_inventory: Inventory,
):
    spec = bench(pipeline(micro_batches=4), node_counts=(1, 2, 4), model=ModelSpec(layers=4))
    args = {n: train_args(build_plan(fixed_inventory, spec, n)) for n in (1, 2, 4)}
    assert [args[n]["--pp-size"] for n in (1, 2, 4)] == ["1", "2", "4"]
    assert args[4]["--schedule"] == "1f1b" and args[4]["--stages-per-rank"] == "1"
    two_pipelines = replace(spec, node_counts=(2, 4), strategy=pipeline(micro_batches=2, pp_size=2))
    assert train_args(build_plan(fixed_inventory, two_pipelines, 4))["--pp-size"] == "2"


def test_strong_scaling_splits_the_global_batch_over_pipelines_not_processes(
    fixed_inventory: Inventory,
):
    spec = bench(
        pipeline(micro_batches=2, pp_size=2),
        node_counts=(2, 4),
        mode=ScalingMode.STRONG,
        global_batch=16,
    )
    assert build_plan(fixed_inventory, spec, 2).batch_per_proc == 16  # one pipeline
    assert build_plan(fixed_inventory, spec, 4).batch_per_proc == 8  # two pipelines


def test_interleaving_puts_two_stages_on_each_rank_by_default(fixed_inventory: Inventory):
    spec = bench(
        pipeline(schedule=PipelineSchedule.INTERLEAVED_1F1B, micro_batches=2),
        model=ModelSpec(layers=4),
    )
    assert train_args(build_plan(fixed_inventory, spec, 2))["--stages-per-rank"] == "2"


def test_the_stage_split_reaches_the_workload_even_unless_balanced_is_asked(
    fixed_inventory: Inventory,
):
    spec = bench(pipeline(micro_batches=2), model=ModelSpec(layers=4))
    assert train_args(build_plan(fixed_inventory, spec, 2))["--stage-split"] == "even"
    balanced = replace(spec, strategy=pipeline(micro_batches=2, stage_split=StageSplit.BALANCED))
    assert train_args(build_plan(fixed_inventory, balanced, 2))["--stage-split"] == "balanced"


def test_zero_stage_is_short_for_the_zero_strategy():
    spec = replace(BenchSpec("t"), launch=LauncherOptions(zero_stage=3))
    assert resolve_bench(spec).packages == ("deepspeed",)
    resolve_bench(spec)
    assert resolve_bench(BenchSpec("t")).packages == ()
    assert resolve_bench(BenchSpec("t", launcher="deepspeed")).packages == ("deepspeed",)


# Refused before anything starts, each with one message


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (bench(StrategySpec("zer3")), "unknown strategy 'zer3'"),
        (bench(StrategySpec("ddp", micro_batches=4)), "--micro-batches only apply to the pipeline"),
        (
            bench(StrategySpec("zero2", stage_split=StageSplit.BALANCED)),
            "--stage-split only apply to the pipeline",
        ),
        (
            bench(StrategySpec("fsdp", schedule=PipelineSchedule.GPIPE)),
            "--schedule only apply to the pipeline",
        ),
        (
            bench(pipeline(pp_size=3), node_counts=(4,), model=ModelSpec(layers=4)),
            "--pp-size 3 does not divide the 4 processes",
        ),
        (bench(pipeline(micro_batches=0)), "--micro-batches must be at least 1"),
        (bench(pipeline(micro_batches=3)), "--micro-batches 3 does not divide the batch"),
        (
            bench(pipeline(micro_batches=1), node_counts=(2,)),
            "1f1b needs at least as many micro-batches as stages \\(2\\)",
        ),
        (
            bench(pipeline(micro_batches=2), node_counts=(4,)),
            "a pipeline of 4 stages needs at least 4 layers",
        ),
        (
            bench(pipeline(schedule=PipelineSchedule.INTERLEAVED_1F1B, stages_per_rank=1)),
            "interleaved-1f1b needs at least 2 stages per rank",
        ),
        (
            bench(pipeline(schedule=PipelineSchedule.GPIPE, stages_per_rank=2)),
            "gpipe runs one stage per rank",
        ),
        (
            # 7 micro-batches over 3 ranks: torch runs 7 // 3 = 2 rounds, and 7 is odd.
            bench(
                pipeline(schedule=PipelineSchedule.INTERLEAVED_1F1B, micro_batches=7, pp_size=3),
                node_counts=(3,),
                batch=7,
                model=ModelSpec(layers=6),
            ),
            "interleaved-1f1b runs 2 rounds",
        ),
        (
            replace(bench(StrategySpec("zero3")), launch=LauncherOptions(zero_stage=2)),
            "--zero-stage 2 contradicts --strategy zero3",
        ),
        (
            replace(bench(StrategySpec("fsdp")), workload="allreduce"),
            "the allreduce workload trains no model",
        ),
    ],
)
def test_points_a_strategy_cannot_run_are_refused_by_the_plan(spec: BenchSpec, message: str):
    with pytest.raises(PlanError, match=message):
        resolve_bench(spec)


def test_every_point_of_the_sweep_is_checked_not_only_the_first():
    # 2 micro-batches suit the 1- and 2-rank pipelines; the 4-rank one needs 4 for 1f1b.
    spec = bench(pipeline(micro_batches=2), node_counts=(1, 2, 4), model=ModelSpec(layers=4))
    with pytest.raises(PlanError, match="at least as many micro-batches as stages \\(4\\)"):
        resolve_bench(spec)


# bf16: by default on GPUs, asked for on CPUs


@pytest.mark.parametrize(
    ("cluster", "dtype", "bf16"),
    [
        ("embedded", TrainDtype.AUTO, False),
        ("embedded", TrainDtype.BFLOAT16, True),
        ("h100", TrainDtype.AUTO, True),
        ("h100", TrainDtype.FLOAT32, False),
    ],
)
def test_bf16_is_the_default_on_gpus_and_asked_for_elsewhere(cluster, dtype, bf16):
    inventory = CLUSTERS[cluster]
    procs = 8 if inventory.accelerator is Accelerator.CUDA else 1
    for strategy in ("ddp", "zero3"):
        spec = replace(
            BenchSpec("t", node_counts=(2,), procs_per_node=procs),
            strategy=StrategySpec(strategy),
            dtype=dtype,
        )
        plan = build_plan(inventory, spec, 2)
        assert (train_args(plan).get("--dtype") == "bfloat16") is bf16
        if strategy == "zero3":
            config = json.loads(next(f.content for f in plan.files if f.name == "ds_config.json"))
            assert config["bf16"] == {"enabled": bf16}
