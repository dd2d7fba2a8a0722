"""PyTorch DistributedDataParallel: every rank holds the whole model and averages gradients.

Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from dtrun.workloads.engine import LEARNING_RATE, DataParallelEngine, precision, replica_model
from dtrun.workloads.gpt import lm_loss
from dtrun.workloads.proof import named_parameters


class DdpEngine(DataParallelEngine):
    """DDP with AdamW; bf16 through autocast when asked."""

    name = "ddp"
    strategy = "ddp"

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self.model, self.initial = replica_model(args, device)
        self.ddp = DistributedDataParallel(self.model)  # broadcasts rank 0's weights to every rank
        self.optimizer = torch.optim.AdamW(self.ddp.parameters(), lr=LEARNING_RATE)
        self.precision = precision(args, device)
        self.replicas = dist.get_world_size()
        self.data_rank = dist.get_rank()

    def _backward(self, batch: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.precision():
            loss = lm_loss(self.ddp(batch[:, :-1]), batch[:, 1:])
        torch.autograd.backward(loss)
        return loss

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        loss = self._backward(batch)
        self.optimizer.step()
        return loss

    def full_parameters(self) -> contextlib.AbstractContextManager[list[tuple[str, torch.Tensor]]]:
        return named_parameters(self.model)

    def reduced_gradients(self, batch: torch.Tensor) -> list[torch.Tensor]:
        self._backward(batch)  # DDP all-reduces the gradients during backward
        return [_grad(p) for p in self.model.parameters()]

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        # Under no_sync the backward all-reduces nothing (the model has no buffers for the
        # forward to broadcast); the gradients it leaves are dropped before the next step.
        with self.ddp.no_sync():
            with self.precision():
                loss = lm_loss(self.ddp(batch[:, :-1]), batch[:, 1:])
            torch.autograd.backward(loss)
        self.optimizer.zero_grad(set_to_none=True)
        return None


def _grad(parameter: torch.Tensor) -> torch.Tensor:
    # Every parameter takes part in the loss; a missing gradient would be a bug worth a crash.
    if parameter.grad is None:
        raise RuntimeError("a parameter received no gradient")
    return parameter.grad
