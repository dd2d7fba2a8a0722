"""What each piece of the GPT costs, and how a pipeline's stages split its blocks.

Counted from the model's shape (docs/workloads.md "Stage split" has the formulas and their
sources): per token, a block's forward pass takes 24·d² + 4·T·d FLOPs (Narayanan et al. 2021,
"Efficient large-scale language model training on GPU clusters", section 5.1: QKV, the
attention scores and their weighted sum, the projection and the 4x MLP), the LM head 2·d·V, the
embedding lookups none; training is three times the forward (the backward pass computes twice
its FLOPs), the 6N + 12·L·H·Q·T per token of runner/workloads/gpt.py. Parameters are counted
as runner/workloads/gpt.py's ``param_counts`` counts them, with the tied embedding's two copies
(the first stage's token embedding, the last stage's head) each on its own stage.

``--stage-split even`` cuts the blocks as evenly as the layers allow (the embedding and the head
land on the end stages on top); ``balanced`` picks the contiguous split whose slowest stage is
the cheapest, weighing the pieces by what they cost: counted training FLOPs, or seconds measured
on the device (the workload measures them: on CPUs, and at small widths, a block's small matrix
multiplies and element-wise work take longer per FLOP than the head's one large one). The
standard library only: the workload, the plan and the report all use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

TRAINING_PASSES = 3  # forward + backward, the backward pass being twice the forward's FLOPs


@dataclass(frozen=True)
class Shape:
    """The GPT's shape, as the workload's arguments give it."""

    layers: int
    d_model: int
    seq_len: int
    vocab: int


@dataclass(frozen=True)
class Cost:
    """Training FLOPs per token and parameters of one piece of the model, or of a stage."""

    flops: int
    params: int

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.params + other.params)


def block_cost(shape: Shape) -> Cost:
    """One transformer block: 24·d² + 4·T·d forward FLOPs per token; 12·d² + 13·d parameters."""
    d, t = shape.d_model, shape.seq_len
    forward = 24 * d * d + 4 * t * d
    return Cost(TRAINING_PASSES * forward, 12 * d * d + 13 * d)


def embedding_cost(shape: Shape) -> Cost:
    """The first stage's token and position embeddings: lookups (no FLOPs), (V + T)·d weights."""
    return Cost(0, (shape.vocab + shape.seq_len) * shape.d_model)


def head_cost(shape: Shape) -> Cost:
    """The last stage's final norm and LM head: 2·d·V forward FLOPs per token; the head's copy
    of the tied embedding (V·d) and the norm (2·d)."""
    d, v = shape.d_model, shape.vocab
    return Cost(TRAINING_PASSES * 2 * d * v, v * d + 2 * d)


@dataclass(frozen=True)
class Pieces:
    """What a split weighs, in any one unit (FLOPs, or seconds measured): one block, the first
    stage's embeddings, the last stage's final norm, head and loss."""

    block: float
    embedding: float
    head: float


def counted(shape: Shape) -> Pieces:
    """The pieces by training FLOPs per token."""
    return Pieces(block_cost(shape).flops, embedding_cost(shape).flops, head_cost(shape).flops)


def stage_costs(shape: Shape, blocks: list[int]) -> list[Cost]:
    """Each stage's cost, given how many blocks each stage holds (in order)."""
    block, costs = block_cost(shape), []
    for index, count in enumerate(blocks):
        cost = Cost(block.flops * count, block.params * count)
        if index == 0:
            cost += embedding_cost(shape)
        if index == len(blocks) - 1:
            cost += head_cost(shape)
        costs.append(cost)
    return costs


def even_split(shape: Shape, stages: int) -> list[int]:
    """Blocks per stage as evenly as the layers allow, in order (stage i holds blocks
    i·L // S up to (i + 1)·L // S)."""
    layers = shape.layers
    return [(i + 1) * layers // stages - i * layers // stages for i in range(stages)]


def balanced_split(shape: Shape, stages: int, pieces: Pieces | None = None) -> list[int]:
    """Blocks per stage, contiguous and in order, every stage at least one block, whose
    slowest stage (by ``pieces``, embedding and head included; counted FLOPs without) is the
    cheapest.

    Exact, in two dynamic programmes over (stage, blocks left), O(S·L²) each for L layers: the
    first finds the cheapest slowest stage; the second, among the splits that reach it, the one
    with the smallest sum of squared stage costs (the other stages as even as they can be).
    Where the even split's slowest stage is as cheap, the even split is the answer: ``balanced``
    departs from it only where that makes the slowest stage faster.
    """
    _check(shape, stages)
    even = even_split(shape, stages)
    cost = _stage_cost(pieces or counted(shape), stages)
    slowest = _minimax(shape.layers, stages, cost)
    if max(cost(s, n) for s, n in enumerate(even)) <= slowest:
        return even
    return _smoothest(shape.layers, stages, cost, slowest)


def _stage_cost(pieces: Pieces, stages: int) -> Callable[[int, int], float]:
    block, first, last = pieces.block, pieces.embedding, pieces.head

    def cost(stage: int, count: int) -> float:
        return count * block + (first if stage == 0 else 0) + (last if stage == stages - 1 else 0)

    return cost


def _minimax(layers: int, stages: int, cost: Callable[[int, int], float]) -> float:
    """The cheapest slowest stage over every split with at least one block per stage."""
    # best[n]: the cheapest slowest stage of stages s.. holding the last n blocks
    best: list[float] = [0.0] + [_NEVER] * layers  # no stages left: only 0 blocks fit
    for s in range(stages - 1, -1, -1):
        left = stages - s  # stages s.. each need one block
        best = [
            min(
                (max(cost(s, count), best[n - count]) for count in range(1, n - left + 2)),
                default=_NEVER,
            )
            if n >= left
            else _NEVER
            for n in range(layers + 1)
        ]
    return best[layers]


def _smoothest(
    layers: int, stages: int, cost: Callable[[int, int], float], ceiling: float
) -> list[int]:
    """The split with no stage above ``ceiling`` and the smallest sum of squared costs."""
    # best[s][n], take[s][n]: stages s.. holding the last n blocks: the sum, the first's blocks
    best: list[list[float]] = [[_NEVER] * (layers + 1) for _ in range(stages + 1)]
    take = [[0] * (layers + 1) for _ in range(stages + 1)]
    best[stages][0] = 0
    for s in range(stages - 1, -1, -1):
        for n in range(1, layers + 1):
            for count in range(1, n + 1):
                here = cost(s, count)
                rest = best[s + 1][n - count]
                if here <= ceiling and rest < _NEVER and here * here + rest < best[s][n]:
                    best[s][n], take[s][n] = here * here + rest, count
    blocks, n = [], layers
    for s in range(stages):
        blocks.append(take[s][n])
        n -= take[s][n]
    return blocks


_NEVER = float("inf")  # above any stage's cost, or sum of their squares

# --schedule's choices, whose classes pipeline_parallel.SCHEDULES gives: named here, where the
# workload's options can read them without importing torch.distributed.pipelining
SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved-1f1b")

SPLITS: dict[str, Callable[[Shape, int, Pieces | None], list[int]]] = {
    "even": lambda shape, stages, _: even_split(shape, stages),
    "balanced": balanced_split,
}


def split(kind: str, shape: Shape, stages: int, pieces: Pieces | None = None) -> list[int]:
    """``--stage-split``'s blocks per stage (``pieces``: what balanced weighs; counted FLOPs
    without)."""
    _check(shape, stages)
    return SPLITS[kind](shape, stages, pieces)


def shares(costs: list[Cost]) -> tuple[list[float], list[float]]:
    """Each stage's share of the training FLOPs and of the parameters (each summing to 1)."""
    flops = sum(c.flops for c in costs) or 1
    params = sum(c.params for c in costs) or 1
    return [c.flops / flops for c in costs], [c.params / params for c in costs]


def _check(shape: Shape, stages: int) -> None:
    if not 1 <= stages <= shape.layers:
        raise ValueError(f"{stages} stages need 1 to {shape.layers} of the model's layers")
