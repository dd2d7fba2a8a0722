"""One pipeline stage of runner/workloads/gpt.py's GPT, and what it records for the proof.

The first stage holds the token and position embeddings, the last the final norm and the LM
head (the tied embedding's second copy); each holds the blocks ``--stage-split`` gave it
(runner/workloads/stagecost.py). Every part is built from its own seed, so the ranks of one
pipeline build one consistent model without any rank building all of it. On the probe step a
stage fingerprints each activation and gradient that crosses it (pipeline_proof).

Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from dtrun.workloads.engine import Precision
from dtrun.workloads.gpt import Block, fingerprint_tensors, init_weights
from dtrun.workloads.pipeline_proof import (
    ACTIVATIONS_RECEIVED,
    ACTIVATIONS_SENT,
    GRADIENTS_RECEIVED,
    GRADIENTS_SENT,
)


@dataclass
class Record:
    """What one stage saw on the probe step, one fingerprint per micro-batch."""

    taps: dict[str, list[float]] = field(
        default_factory=lambda: {
            name: []
            for name in (ACTIVATIONS_RECEIVED, ACTIVATIONS_SENT, GRADIENTS_RECEIVED, GRADIENTS_SENT)
        }
    )


class Tap(torch.autograd.Function):
    """Identity; its backward fingerprints the gradient passing through (when recording)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, record: Record | None, name: str) -> torch.Tensor:
        ctx.record, ctx.name = record, name
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        if ctx.record is not None:
            ctx.record.taps[ctx.name].append(fingerprint_tensors([grad]))
        return grad, None, None


M = TypeVar("M", bound=nn.Module)


def _tap(x: torch.Tensor, record: Record | None, name: str) -> torch.Tensor:
    out: torch.Tensor = Tap.apply(x, record, name)  # type: ignore[no-untyped-call]
    return out


def _seeded(seed: int, make: Callable[[], M], device: torch.device) -> M:
    """A part built and initialised from its own seed: the same on every rank that builds it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = make()
        module.apply(init_weights)
    return module.to(device)


class GPTStage(nn.Module):
    """Stage ``index`` of ``count`` of runner/workloads/gpt.py's GPT, holding blocks ``layers``:
    the same parts, split."""

    def __init__(
        self,
        args: argparse.Namespace,
        index: int,
        count: int,
        layers: range,
        seed: int,
        device: torch.device,
        precision: Precision,
    ) -> None:
        super().__init__()
        self.first, self.last = index == 0, index == count - 1
        self.precision = precision
        self.record: Record | None = None  # set for the probe step
        d, vocab = args.d_model, args.vocab
        # Every part's seed: the pipeline's, then a number per part; the token embedding and the
        # LM head share theirs, so the tied weight's two copies start equal.
        embedding_seed, position_seed, final_seed = seed, seed + 1, seed + 2
        if self.first:
            self.tok = _seeded(embedding_seed, lambda: nn.Embedding(vocab, d), device)
            self.pos = _seeded(position_seed, lambda: nn.Embedding(args.seq_len, d), device)
        self.blocks = nn.ModuleList(
            _seeded(seed + 3 + i, lambda: Block(d, args.heads), device) for i in layers
        )
        if self.last:
            self.ln_f = _seeded(final_seed, lambda: nn.LayerNorm(d), device)
            self.head = nn.Linear(d, vocab, bias=False, device=device)
            with torch.no_grad():
                tied = _seeded(embedding_seed, lambda: nn.Embedding(vocab, d), device)
                self.head.weight.copy_(tied.weight)

    def tied_weight(self) -> torch.Tensor | None:
        """This stage's copy of the tied embedding (the first stage's, else the last's)."""
        weight: torch.Tensor | None = None
        if self.first:
            weight = self.tok.weight
        elif self.last:
            weight = self.head.weight
        return weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        record = self.record
        with self.precision():
            if self.first:
                positions = torch.arange(x.shape[1], device=x.device)
                x = self.tok(x) + self.pos(positions)
            else:
                if record is not None:
                    record.taps[ACTIVATIONS_RECEIVED].append(fingerprint_tensors([x]))
                x = _tap(x, record, GRADIENTS_SENT)
            for block in self.blocks:
                x = block(x)
            if self.last:
                logits: torch.Tensor = self.head(self.ln_f(x))
                return logits
            if record is not None:
                record.taps[ACTIVATIONS_SENT].append(fingerprint_tensors([x]))
            return _tap(x, record, GRADIENTS_RECEIVED)
