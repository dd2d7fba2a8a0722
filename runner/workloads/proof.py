"""Proof that the ranks of a launch really communicated, for every training strategy.

Every strategy starts each rank from different random weights (a pipeline: each replica) and
trains it on different tokens; what a strategy must then show depends on what it keeps where
(docs/workloads.md "Training strategies"):

- data parallel (DDP, FSDP, ZeRO 1-3): every rank sees the same full parameters at the end
  (gathered where they are sharded), and on a probe batch the engine's reduced gradient equals
  the mean of every rank's own gradient, computed apart from the engine;
- pipeline: every activation and gradient a stage sent arrived bit for bit at the next stage,
  the tied embedding's copies on the first and last stage agree, and so do a stage's replicas.

Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call

from dtrun.workloads.gpt import GPT, fingerprint_tensors, lm_loss

# Relative difference of parameter fingerprints still called "equal". Gloo's all-reduce is not
# bit-identical across ranks at every world size (4 ranks on CPU differ in the last bits), and
# float32 rounding accumulates over the steps; ranks that never communicated differ by ~1e-2.
SYNC_TOLERANCE = 1e-6
# How far the reduced gradient may sit from the mean of the ranks' own gradients, element by
# element (an L2 norm), as a share of how far the ranks' own gradients sit from that mean. A
# reduction that ignored the other ranks misses by about 1; one that dropped one rank of W, by
# about 1 / (W - 1): in float32 this catches that up to about 100 ranks, and leaves rounding
# (about 1e-7 here) far below it. Gradients reduced in bf16 (DeepSpeed's bf16 mode) round every
# element to 8 bits: measured 2e-3 on 2 ranks on CPU, so their tolerance is 5e-2 (about 20 ranks).
GRADIENT_TOLERANCE = {torch.float32: 1e-2, torch.bfloat16: 5e-2}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Proof:
    """What a strategy showed, in the result's ``communication`` fields."""

    kind: str  # "data parallel", "pipeline" or "single process"
    checks: tuple[Check, ...]
    params_in_sync: bool  # every copy of a parameter kept on more than one rank agrees
    max_divergence: float  # the largest relative difference between such copies
    initial_params_differed: bool | None  # None: nothing to compare (one process or replica)
    initial_divergence: float | None
    initial_fingerprints: list[float] = field(default_factory=list)  # by rank
    final_fingerprints: list[float] = field(default_factory=list)  # by rank

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


def gather_floats(value: float, device: torch.device) -> list[float]:
    mine = torch.tensor([value], dtype=torch.float64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [float(t.item()) for t in every]


def divergence(values: Sequence[float]) -> float:
    """Largest relative difference from the first value (1.0 floors the scale near zero)."""
    return max(abs(v - values[0]) / max(1.0, abs(values[0])) for v in values)


def single_process(fingerprints: list[float]) -> Proof:
    return Proof("single process", (), True, 0.0, None, None, fingerprints, fingerprints)


class FullView(Protocol):
    """What the data-parallel proof needs from an engine."""

    def full_parameters(self) -> contextlib.AbstractContextManager[list[tuple[str, torch.Tensor]]]:
        """Every parameter of the whole model by name, gathered where it is sharded."""
        ...

    def reduced_gradients(self, batch: torch.Tensor) -> list[torch.Tensor]:
        """Forward and backward on ``batch`` through the engine, no optimizer step: the whole
        reduced gradient of every parameter, in ``full_parameters`` order."""
        ...


def prove_data_parallel(
    view: FullView,
    args: Any,
    probe: torch.Tensor,
    initial: list[float],
    device: torch.device,
    precision: Callable[[], contextlib.AbstractContextManager[Any]],
) -> Proof:
    """Weights in sync, and a gradient reduction that averaged every rank's gradient."""
    world = dist.get_world_size()
    with view.full_parameters() as named:
        final = gather_floats(fingerprint_tensors(t for _, t in named), device)
        if world == 1:
            return single_process(final)
        dtype = next(t.dtype for _, t in named)
        own = _own_gradient(named, args, probe, precision)
    reduced = view.reduced_gradients(probe)

    weights_off = divergence(final)
    weights = Check(
        "weights",
        weights_off <= SYNC_TOLERANCE,
        f"the full parameters agree on {world} ranks within {weights_off:.2g} "
        f"(tolerance {SYNC_TOLERANCE:g}); each rank started from its own",
    )
    gradient_off = _gradient_off(own, reduced, device)
    tolerance = GRADIENT_TOLERANCE.get(dtype, GRADIENT_TOLERANCE[torch.float32])
    gradients = Check(
        "gradients",
        gradient_off <= tolerance,
        f"the reduced gradient is the mean of the {world} ranks' own gradients to "
        f"{gradient_off:.2g} of their spread (tolerance {tolerance:g})",
    )
    initial_off = divergence(initial)
    return Proof(
        kind="data parallel",
        checks=(weights, gradients),
        params_in_sync=weights.ok,
        max_divergence=weights_off,
        initial_params_differed=len(set(initial)) == world,
        initial_divergence=initial_off,
        initial_fingerprints=initial,
        final_fingerprints=final,
    )


def _gradient_off(
    own: Sequence[torch.Tensor], reduced: Sequence[torch.Tensor], device: torch.device
) -> float:
    """||reduced - mean|| / ||own - mean||, the largest of any rank, where mean is the mean of
    every rank's own gradient (all-reduced here, one parameter at a time, apart from the
    engine's reduction)."""
    off_sq = spread_sq = 0.0
    for mine, theirs in zip(own, reduced, strict=True):
        mean = mine.detach().float().clone()
        dist.all_reduce(mean)
        mean /= dist.get_world_size()
        off_sq += float((theirs.detach().float() - mean).double().square().sum())
        spread_sq += float((mine.detach().float() - mean).double().square().sum())
    offs = gather_floats(off_sq, device)
    spreads = gather_floats(spread_sq, device)
    return math.sqrt(max(offs)) / max(math.sqrt(max(spreads)), 1e-30)


def _own_gradient(
    named: list[tuple[str, torch.Tensor]],
    args: Any,
    probe: torch.Tensor,
    precision: Callable[[], contextlib.AbstractContextManager[Any]],
) -> tuple[torch.Tensor, ...]:
    """This rank's gradient on its probe batch, computed without the engine.

    The full parameters drive a GPT skeleton on the meta device (no memory of its own), so no
    collective can take part; torch.func keeps the embedding and the LM head tied.
    """
    with torch.device("meta"):
        skeleton: nn.Module = GPT(args.vocab, args.seq_len, args.layers, args.d_model, args.heads)
    leaves = {name: tensor.detach().requires_grad_() for name, tensor in named}
    with precision():
        logits = functional_call(skeleton, leaves, (probe[:, :-1],))
    loss = lm_loss(logits, probe[:, 1:])
    return torch.autograd.grad(loss, list(leaves.values()))


@contextlib.contextmanager
def named_parameters(module: nn.Module) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``full_parameters`` of an engine whose every rank holds the whole model."""
    yield list(module.named_parameters())
