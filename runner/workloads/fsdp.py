"""PyTorch FSDP (FSDP2, ``fully_shard``): parameters, gradients and optimizer state sharded.

Each transformer block is its own FSDP unit, gathered for its forward and backward only; the
root holds the embeddings, the final norm and the tied LM head. The parameters stay float32 and
bf16 comes from autocast, as under DDP, so the two strategies compute the same arithmetic and
the proof's reference gradient matches the engine's (FSDP's MixedPrecisionPolicy would gather
bf16 parameters instead: less traffic, different numbers).

FSDP2 does not broadcast rank 0's weights as DDP does: each rank keeps its shard of the weights
it initialised, and the full model is put together from every rank's shard.

Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from dtrun.workloads.engine import LEARNING_RATE, DataParallelEngine, precision, replica_model
from dtrun.workloads.gpt import lm_loss


class FsdpEngine(DataParallelEngine):
    name = "fsdp"
    strategy = "fsdp"

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        model, self.initial = replica_model(args, device)
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        self.precision = precision(args, device)
        self.replicas = dist.get_world_size()
        self.data_rank = dist.get_rank()

    def _backward(self, batch: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.precision():
            loss = lm_loss(self.model(batch[:, :-1]), batch[:, 1:])
        torch.autograd.backward(loss)  # reduce-scatters the gradients into each rank's shard
        return loss

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        loss = self._backward(batch)
        self.optimizer.step()
        return loss

    @contextlib.contextmanager
    def full_parameters(self) -> Iterator[list[tuple[str, torch.Tensor]]]:
        # full_tensor() all-gathers a parameter's shards: a collective every rank calls in order.
        with torch.no_grad():
            full = [(name, _full(p)) for name, p in self.model.named_parameters()]
        yield full

    def reduced_gradients(self, batch: torch.Tensor) -> list[torch.Tensor]:
        self._backward(batch)
        grads = []
        for p in self.model.parameters():
            if p.grad is None:
                raise RuntimeError("a parameter received no gradient")
            grads.append(_full(p.grad))
        return grads

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        return "FSDP's forward all-gathers each block's parameters from every rank"


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
