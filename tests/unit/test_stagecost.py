"""The pipeline's cost model and its stage splits (runner/workloads/stagecost.py; docs/workloads.md
"Stage split"): counted figures against hand-computed ones and the real model, the balanced split
against every possible split."""

from __future__ import annotations

import argparse
import itertools
import random

import pytest
import torch

from dtrun.workloads import gpt
from dtrun.workloads.pipeline_stage import GPTStage
from dtrun.workloads.stagecost import (
    Cost,
    Pieces,
    Shape,
    balanced_split,
    block_cost,
    embedding_cost,
    even_split,
    head_cost,
    shares,
    split,
    stage_costs,
)

TINY = Shape(layers=2, d_model=128, seq_len=64, vocab=1024)
LARGE_VOCAB = Shape(layers=8, d_model=128, seq_len=64, vocab=8000)


def slowest(shape: Shape, blocks: list[int]) -> int:
    return max(cost.flops for cost in stage_costs(shape, blocks))


def every_split(layers: int, stages: int) -> list[list[int]]:
    """Every way to cut ``layers`` blocks into ``stages`` contiguous stages of at least one."""
    cuts = itertools.combinations(range(1, layers), stages - 1)
    return [[b - a for a, b in zip((0, *c), (*c, layers), strict=True)] for c in cuts]


# The cost of each piece, by hand


def test_a_block_costs_three_times_24d2_plus_4td_flops_per_token():
    # d = 128, T = 64: forward 24 * 128^2 + 4 * 64 * 128 = 393,216 + 32,768 = 425,984.
    assert block_cost(TINY) == Cost(flops=3 * 425_984, params=12 * 128**2 + 13 * 128)


def test_the_head_costs_2dv_forward_flops_per_token_and_the_embedding_none():
    assert head_cost(TINY) == Cost(flops=3 * 2 * 128 * 1024, params=128 * 1024 + 2 * 128)
    assert embedding_cost(TINY) == Cost(flops=0, params=(1024 + 64) * 128)


def test_a_block_and_the_end_pieces_hold_the_parameters_the_real_modules_hold():
    block = gpt.Block(TINY.d_model, heads=4)
    assert block_cost(TINY).params == sum(p.numel() for p in block.parameters())
    model = gpt.GPT(TINY.vocab, TINY.seq_len, TINY.layers, TINY.d_model, heads=4)
    counted = sum(cost.params for cost in stage_costs(TINY, [1, 1]))
    tied = TINY.vocab * TINY.d_model  # two copies in a pipeline, one in the whole model
    assert counted == sum(p.numel() for p in model.parameters()) + tied


def test_the_stages_flops_add_up_to_6n_plus_12lht_without_the_biases_and_norms():
    """gpt.flops_per_token counts every matmul parameter 6 times, biases and norms included
    (13·d per block, 2·d for the final norm); the cost model counts only the matrix multiplies."""
    shape = LARGE_VOCAB
    d, layers = shape.d_model, shape.layers
    _, matmul = gpt.param_counts(shape.vocab, shape.seq_len, layers, d)
    palm = gpt.flops_per_token(matmul, layers, heads=4, head_dim=d // 4, seq_len=shape.seq_len)
    total = sum(cost.flops for cost in stage_costs(shape, even_split(shape, 2)))
    assert total == palm - 6 * (13 * d * layers + 2 * d)


def test_shares_sum_to_one():
    flops, params = shares(stage_costs(LARGE_VOCAB, [6, 2]))
    assert sum(flops) == pytest.approx(1) and sum(params) == pytest.approx(1)


# The splits


def test_the_even_split_is_the_one_the_pipeline_always_used():
    assert even_split(Shape(7, 64, 16, 100), 3) == [2, 2, 3]  # i·L // S boundaries
    assert even_split(Shape(8, 64, 16, 100), 4) == [2, 2, 2, 2]


def test_with_a_large_vocabulary_balanced_moves_blocks_off_the_head_stage():
    # Block 1,277,952 FLOPs, head 6,144,000: even [4, 4] puts 11.3M on the last stage;
    # [6, 2] has 7.7M and 8.7M; [7, 1] has 8.9M on the first.
    blocks = balanced_split(LARGE_VOCAB, 2)
    assert blocks == [6, 2]
    assert slowest(LARGE_VOCAB, blocks) == 2 * 1_277_952 + 6_144_000
    assert slowest(LARGE_VOCAB, blocks) < 0.78 * slowest(LARGE_VOCAB, [4, 4])


def test_balanced_keeps_the_even_split_where_nothing_is_gained():
    # A small vocabulary: the head is cheaper than the block a move would add to stage 0.
    assert balanced_split(Shape(12, 128, 64, 1024), 3) == [4, 4, 4]
    assert balanced_split(TINY, 2) == [1, 1]
    assert balanced_split(Shape(5, 64, 16, 100), 5) == [1, 1, 1, 1, 1]


def test_interleaved_stages_are_split_over_every_stage_of_the_pipeline():
    # 2 ranks x 2 stages per rank = 4 stages over 8 blocks; the head stage keeps one block.
    blocks = split("balanced", Shape(8, 128, 64, 32_000), 4)
    assert len(blocks) == 4 and sum(blocks) == 8 and blocks[-1] == 1
    assert slowest(Shape(8, 128, 64, 32_000), blocks) < slowest(
        Shape(8, 128, 64, 32_000), [2, 2, 2, 2]
    )


def test_balanced_is_the_best_contiguous_split_and_never_worse_than_even():
    rng = random.Random(15)
    for _ in range(300):
        layers = rng.randint(1, 10)
        stages = rng.randint(1, min(layers, 5))
        shape = Shape(
            layers,
            rng.choice([32, 64, 128, 512]),
            rng.choice([16, 64, 1024]),
            rng.choice([50, 1024, 8000, 32_000, 128_000]),
        )
        blocks = balanced_split(shape, stages)
        assert len(blocks) == stages and sum(blocks) == layers and min(blocks) >= 1
        best = min(slowest(shape, b) for b in every_split(layers, stages))
        assert slowest(shape, blocks) == best, (shape, stages, blocks)
        assert slowest(shape, blocks) <= slowest(shape, even_split(shape, stages))


def test_measured_pieces_weigh_the_split_instead_of_the_counted_flops():
    # A head that takes as long as 4 blocks: 8 blocks and 4 with the head, 8 units each.
    measured = Pieces(block=0.01, embedding=0.0, head=0.04)
    assert split("balanced", Shape(12, 128, 64, 16_000), 2, measured) == [8, 4]
    assert split("balanced", Shape(12, 128, 64, 16_000), 2) == [11, 1]  # counted: 9.6 blocks
    assert split("even", Shape(12, 128, 64, 16_000), 2, measured) == [6, 6]


def test_balanced_is_the_best_split_for_any_measured_weights():
    rng = random.Random(4)
    for _ in range(200):
        layers, pieces = rng.randint(2, 9), Pieces(rng.random(), rng.random(), 5 * rng.random())
        stages = rng.randint(2, min(layers, 4))
        shape = Shape(layers, 64, 16, 100)
        blocks = split("balanced", shape, stages, pieces)
        best = min(weighed(pieces, b) for b in every_split(layers, stages))
        assert weighed(pieces, blocks) == best


def weighed(pieces: Pieces, blocks: list[int]) -> float:
    """The slowest stage of ``blocks`` by ``pieces``."""
    costs = [n * pieces.block for n in blocks]
    costs[0] += pieces.embedding
    costs[-1] += pieces.head
    return max(costs)


def test_more_stages_than_layers_are_refused():
    with pytest.raises(ValueError, match="3 stages need 1 to 2 of the model's layers"):
        split("balanced", TINY, 3)


# The workload builds the stages it was given


def test_both_splits_build_the_same_blocks_only_cut_differently():
    args = argparse.Namespace(d_model=32, heads=2, vocab=100, seq_len=8)
    device = torch.device("cpu")

    def blocks_of(counts: list[int]) -> list[torch.Tensor]:
        starts = [sum(counts[:i]) for i in range(len(counts) + 1)]
        stages = [
            GPTStage(args, i, len(counts), range(starts[i], starts[i + 1]), 7, device, _fp32)
            for i in range(len(counts))
        ]
        return [p for stage in stages for block in stage.blocks for p in block.parameters()]

    even, balanced = blocks_of([2, 2]), blocks_of([3, 1])
    assert len(even) == len(balanced)
    assert all(torch.equal(a, b) for a, b in zip(even, balanced, strict=True))


def _fp32() -> torch.autocast:
    return torch.autocast("cpu", enabled=False)
