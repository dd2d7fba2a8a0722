"""What every training engine offers the loop in ``train``, and the pieces engines share: the
data-parallel engines' defaults (DataParallelEngine), the precision, the replica model.

An engine is one library's way of training the GPT (docs/workloads.md "Training strategies"):
DDP, FSDP, a pipeline, or DeepSpeed's ZeRO. Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import argparse
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist

from dtrun.workloads.gpt import GPT, fingerprint
from dtrun.workloads.proof import Proof, gather_floats, prove_data_parallel

LEARNING_RATE = 1e-3

Precision = Callable[[], contextlib.AbstractContextManager[Any]]


class Engine(Protocol):
    """One strategy's way of training the model, one step at a time."""

    name: str  # the library that trains: ddp, fsdp, pipeline, deepspeed
    strategy: str  # ddp, fsdp, pipeline, zero1, zero2, zero3
    zero_stage: int | None  # DeepSpeed's ZeRO stage
    replicas: int  # data-parallel replicas of the model, which split the global batch
    data_rank: int  # which replica's tokens this rank trains on

    def step(self, batch: torch.Tensor) -> torch.Tensor | None:
        """Forward, backward and optimizer step on one batch of token rows (this replica's).

        Returns the loss where this rank computes it (every rank but a pipeline's inner ones),
        without waiting for it: the loop reads it after the step's timing.
        """
        ...

    def prove(self, probe: torch.Tensor) -> Proof:
        """After training: show that the ranks communicated. Every rank calls it."""
        ...

    def describe(self) -> dict[str, Any]:
        """This strategy's own result fields (a pipeline's schedule and stages)."""
        ...

    def probe_stages(self, steps: int) -> None:
        """After training, every rank calls it: time the parts of the model that differ by
        design, alone (a pipeline's stages), for ``describe`` to report; nothing for the data-
        parallel strategies, whose ranks all compute the same model."""
        ...

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        """For the straggler probe: one forward and backward on this rank alone, without
        communicating, its gradients dropped after (training state unchanged). Returns None
        when done; else, having done nothing, why this strategy cannot compute without the
        other ranks."""
        ...


EngineFactory = Callable[[argparse.Namespace, torch.device], Engine]


class DataParallelEngine(ABC):
    """What the data-parallel engines (DDP, FSDP, DeepSpeed's ZeRO, Horovod) share: every rank
    computes the whole model on its own tokens, so the proof is the data-parallel one, there are
    no stages to time alone, and no result fields of its own unless an engine adds some. An
    engine sets the attributes below in its constructor and says how it steps, gathers its
    parameters, reduces a gradient and computes alone."""

    name: str
    strategy: str
    zero_stage: int | None = None
    replicas: int
    data_rank: int
    args: argparse.Namespace
    device: torch.device
    initial: list[float]  # every rank's fingerprint of its weights before training (by rank)
    precision: Precision  # the arithmetic the proof's own gradient repeats

    @abstractmethod
    def step(self, batch: torch.Tensor) -> torch.Tensor | None: ...

    @abstractmethod
    def full_parameters(self) -> contextlib.AbstractContextManager[list[tuple[str, torch.Tensor]]]:
        """Every parameter of the whole model by name, gathered where it is sharded."""

    @abstractmethod
    def reduced_gradients(self, batch: torch.Tensor) -> list[torch.Tensor]:
        """The whole reduced gradient of every parameter, no optimizer step (proof.FullView)."""

    @abstractmethod
    def compute_alone(self, batch: torch.Tensor) -> str | None: ...

    def prove(self, probe: torch.Tensor) -> Proof:
        return prove_data_parallel(
            self, self.args, probe, self.initial, self.device, self.precision
        )

    def describe(self) -> dict[str, Any]:
        return {}

    def probe_stages(self, steps: int) -> None:
        return None  # one model on every rank: nothing differs between ranks by design


def precision(args: argparse.Namespace, device: torch.device) -> Precision:
    """bf16 autocast when asked (GPUs, for MFU against the bf16 peak), else float32."""

    def enter() -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")

    return enter


def replica_model(args: argparse.Namespace, device: torch.device) -> tuple[GPT, list[float]]:
    """The whole GPT, from a different seed on every rank, and every rank's fingerprint of it.

    Different on purpose: weights that end up equal (or consistent) can only have got so
    through the engine's communication.
    """
    torch.manual_seed(args.seed + dist.get_rank())
    model = GPT(args.vocab, args.seq_len, args.layers, args.d_model, args.heads).to(device)
    return model, gather_floats(fingerprint(model), device)
