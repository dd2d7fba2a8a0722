"""Each pipeline stage's compute, timed alone: what the slowest stage of a split really costs.

After training, every rank runs one step's forward and backward passes (every micro-batch)
through each of its stages with nothing sent or received: random tokens or activations of the
shapes the stage receives, random gradients of the shape it sends back (the loss on the last
stage). The median over a few such steps is the stage's time; the gradients are dropped after,
so training state is unchanged. Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from runner.workloads.gpt import lm_loss

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
