"""The report's pipeline stages table (runner/report/stages.py), from hand-made results."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from dtrun.errors import ResultError
from dtrun.report.build import build_report
from dtrun.report.results import parse_train_result
from dtrun.spec.request import BenchSpec, ModelSpec, StageSplit, StrategySpec
from dtrun.workloads.stagecost import Shape, shares, stage_costs
from tests.factories import fake_run_dir, result_data

MODEL = ModelSpec(layers=8, d_model=128, heads=4, seq_len=64, vocab=8000)
SHAPE = Shape(MODEL.layers, MODEL.d_model, MODEL.seq_len, MODEL.vocab)


def pipeline_fields(blocks: list[int], kind: str, times: list[float] | None) -> dict[str, Any]:
    """What the pipeline workload adds to a result (PipelineEngine.describe)."""
    cost, params = shares(stage_costs(SHAPE, blocks))
    return {
        "strategy": "pipeline",
        "schedule": "1f1b",
        "micro_batches": 4,
        "stages": len(blocks),
        "stages_per_rank": 1,
        "pp_size": len(blocks),
        "stage_split": kind,
        "stage_blocks": blocks,
        "stage_cost_share": cost,
        "stage_param_share": params,
        "stage_time_s": times,
    }


def build(tmp_path, inventory, kind: str, blocks: list[int], times: list[float] | None):
    strategy = StrategySpec("pipeline", stage_split=StageSplit(kind))
    bench = replace(BenchSpec(run_id="s", node_counts=(1, 2)), model=MODEL, strategy=strategy)
    run_dir = fake_run_dir(tmp_path / "s", bench, inventory, {1: [1000.0], 2: [1500.0]})
    for nodes, split in ((1, [8]), (2, blocks)):
        path = run_dir.point(nodes, 0) / "result.json"
        data = json.loads(path.read_text())
        data.update(pipeline_fields(split, kind, times if nodes == 2 else [0.1]))
        path.write_text(json.dumps(data))
    build_report(run_dir)
    text = run_dir.report.read_text()
    return text[text.index("### Pipeline stages") : text.index("## Noise")]


def test_a_balanced_pipeline_shows_each_stage_share_and_what_an_even_split_would_hold(
    tmp_path, fixed_inventory
):
    section = build(tmp_path, fixed_inventory, "balanced", [6, 2], [0.0921, 0.0795])
    # Counted: block 1,277,952 FLOPs, head 6,144,000; [6, 2]: 46.8% and 53.2%; [4, 4]: 68.8%.
    assert (
        "At 2 nodes, `--stage-split balanced`: the slowest stage holds 53.2% of the FLOPs; "
        "split evenly, 68.8%; measured, the slowest stage computes for 92.1 ms a step."
    ) in section
    assert "| 0 | 0 | embedding, blocks 0-5 | 46.8% | 61.0% | 92.1 ms | 53.7% |" in section
    assert "| 1 | 1 | blocks 6-7, LM head | 53.2% | 39.0% | 79.5 ms | 46.3% |" in section
    assert "At 1 node" not in section  # one stage: nothing to split


def test_an_even_pipeline_says_what_balanced_would_make_of_its_slowest_stage(
    tmp_path, fixed_inventory
):
    section = build(tmp_path, fixed_inventory, "even", [4, 4], None)
    assert "the slowest stage holds 68.8% of the FLOPs; split by counted FLOPs, 53.2%." in section
    assert "| 1 | 1 | blocks 4-7, LM head | 68.8% | 49.9% | - | - |" in section


def test_a_stage_list_that_does_not_match_the_blocks_is_refused():
    data = result_data(world=2, tokens_per_s=1000.0) | pipeline_fields([6, 2], "balanced", None)
    data["stage_cost_share"] = [1.0]
    with pytest.raises(ResultError, match="'stage_cost_share' has 1 stages, 'stage_blocks' 2"):
        parse_train_result(data, "r.json")


def test_the_strategy_names_a_balanced_split_and_leaves_an_even_one_as_it_was():
    base = result_data(world=2, tokens_per_s=1000.0)
    balanced = parse_train_result({**base, **pipeline_fields([6, 2], "balanced", None)}, "r")
    even = parse_train_result({**base, **pipeline_fields([4, 4], "even", None)}, "r")
    assert balanced.strategy_text == "pipeline (1f1b, 4 micro-batches, balanced stages)"
    assert even.strategy_text == "pipeline (1f1b, 4 micro-batches)"
