"""Each pipeline stage's compute, timed alone: what the slowest stage of a split really costs.

After training, each rank in turn (one position of the pipelines at a time) runs one step's
forward and backward passes (every micro-batch) through each of its stages with nothing sent or
received: random tokens or activations of the
shapes the stage receives, random gradients of the shape it sends back (the loss on the last
stage). The median over a few such steps is the stage's time; the gradients are dropped after,
so training state is unchanged.

Before the stages are built, ``--stage-split balanced`` weighs the model's pieces by their time
on the device (``profile``): a block, the embeddings, and the final norm with the head and the
loss, each a micro-batch's forward and backward, built apart and thrown away after. Torch, the
standard library and sibling modules only.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from dtrun.workloads.engine import Precision
from dtrun.workloads.gpt import Block, init_weights, lm_loss
from dtrun.workloads.stagecost import Pieces

PROBE_SEED = 20_250_415  # the probe's own random inputs, apart from training's


@dataclass(frozen=True)
class StageInput:
    """What one stage receives per micro-batch: tokens (the first stage) or activations."""

    micro: int  # sequences per micro-batch
    micro_batches: int
    seq_len: int
    d_model: int
    vocab: int


def time_stage(
    module: nn.Module, first: bool, last: bool, shape: StageInput, device: torch.device, steps: int
) -> float:
    """Median seconds of ``steps`` steps' forward and backward passes through ``module`` alone."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    micro, seq = shape.micro, shape.seq_len

    def tokens() -> torch.Tensor:
        return torch.randint(0, shape.vocab, (micro, seq), generator=generator).to(device)

    def activations() -> torch.Tensor:
        return torch.randn(micro, seq, shape.d_model, generator=generator).to(device)

    inputs = [
        tokens() if first else activations().requires_grad_() for _ in range(shape.micro_batches)
    ]
    targets = [tokens() for _ in inputs] if last else []
    grads = [] if last else [activations() for _ in inputs]
    times = []
    for _ in range(steps):
        _synchronize(device)
        start = time.perf_counter()
        for i, x in enumerate(inputs):
            out = module(x)
            if last:
                torch.autograd.backward(lm_loss(out, targets[i]))
            else:
                torch.autograd.backward(out, grads[i])
        _synchronize(device)
        times.append(time.perf_counter() - start)
        module.zero_grad(set_to_none=True)
        for x in inputs:
            x.grad = None
    return statistics.median(times)


class _Embeddings(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        return out


class _Head(nn.Module):
    def __init__(self, vocab: int, d: int, precision: Precision) -> None:
        super().__init__()
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.precision = precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.precision():
            out: torch.Tensor = self.head(self.ln_f(x))
        return out


class _Timed(nn.Module):
    def __init__(self, inner: nn.Module, precision: Precision) -> None:
        super().__init__()
        self.inner, self.precision = inner, precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.precision():
            out: torch.Tensor = self.inner(x)
        return out


def profile(
    shape: StageInput, heads: int, precision: Precision, device: torch.device, steps: int = 5
) -> Pieces:
    """Seconds of one micro-batch's forward and backward through each piece, this rank's
    median over ``steps`` after one untimed; the pieces' medians over every rank, so that
    every rank splits alike. Every rank calls it."""
    one = StageInput(shape.micro, 1, shape.seq_len, shape.d_model, shape.vocab)
    d = shape.d_model
    parts: list[tuple[nn.Module, bool, bool]] = [
        (_Timed(Block(d, heads), precision), False, False),
        (_Timed(_Embeddings(shape.vocab, shape.seq_len, d), precision), True, False),
        (_Head(shape.vocab, d, precision), False, True),
    ]
    mine = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(PROBE_SEED)
        for module, first, last in parts:
            module.apply(init_weights)
            module.to(device)
            time_stage(module, first, last, one, device, 1)  # allocations, kernels' first use
            mine.append(time_stage(module, first, last, one, device, steps))
    every: list[list[float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    block, embedding, head = (statistics.median(t[i] for t in every if t) for i in range(3))
    return Pieces(block, embedding, head)


def gather_stage_times(mine: dict[int, float], stages: int) -> list[float]:
    """Every rank's {stage: seconds} -> seconds by stage (the median over a stage's replicas).
    Every rank calls it."""
    every: list[dict[int, float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    by_stage: dict[int, list[float]] = {}
    for times in every:
        for stage, seconds in (times or {}).items():
            by_stage.setdefault(stage, []).append(seconds)
    return [statistics.median(by_stage[stage]) for stage in range(stages)]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
