"""The training workload under Horovod: the same model, loop, proof and result as ``train``.

Horovod owns the data parallelism here: ``hvd.broadcast_parameters`` gives every rank rank 0's
weights, ``hvd.DistributedOptimizer`` averages the gradients with Horovod's own all-reduce
(Gloo on CPU, NCCL where Horovod was built with it), and the all-reduce probe (``--busbw-iters``)
times ``hvd.allreduce`` and ``hvd.allreduce_``. Rank and size come from Horovod
(``hvd.rank()``), which horovodrun and horovod.spark set.

A torch.distributed gloo group is opened beside Horovod's, from the environment contract
(docs/launchers.md), for the harness's bookkeeping only: gathering each rank's record, timings
and fingerprints for rank 0's result, and the proof's comparisons. No gradient and no timed
all-reduce goes through it, so what result.json measures is Horovod's (engine ``horovod``).

Imports only torch, horovod, the standard library and its sibling modules.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
from typing import Any

import horovod
import horovod.torch as hvd
import torch
import torch.distributed as dist

from dtrun.workloads import train
from dtrun.workloads.allreduce import probe as probe_allreduce
from dtrun.workloads.engine import LEARNING_RATE, DataParallelEngine, precision, replica_model
from dtrun.workloads.gpt import GPT, lm_loss
from dtrun.workloads.proof import named_parameters
from dtrun.workloads.result import exit_now


def _out_of_place(tensor: torch.Tensor) -> torch.Tensor:
    result: torch.Tensor = hvd.allreduce(tensor, op=hvd.Sum)
    return result


def _in_place(tensor: torch.Tensor) -> torch.Tensor:
    result: torch.Tensor = hvd.allreduce_(tensor, op=hvd.Sum)
    return result


# The all-reduce probe's two modes, through Horovod (dtrun.workloads.allreduce.MODES: torch's).
HOROVOD_MODES = {"out_of_place": _out_of_place, "in_place": _in_place}


class HorovodEngine(DataParallelEngine):
    """Data parallelism with Horovod's DistributedOptimizer around AdamW; bf16 by autocast."""

    name = "horovod"
    strategy = "horovod"

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self.model, self.initial = replica_model(args, device)
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        self.optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=self.model.named_parameters(), op=hvd.Average
        )
        hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        self.precision = precision(args, device)
        self.replicas = hvd.size()
        self.data_rank = hvd.rank()
        self._alone: GPT | None = None

    def _backward(self, batch: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad()  # Horovod 0.28.1 takes no set_to_none
        with self.precision():
            loss = lm_loss(self.model(batch[:, :-1]), batch[:, 1:])
        torch.autograd.backward(loss)  # Horovod's hooks start each gradient's all-reduce
        return loss

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        loss = self._backward(batch)
        self.optimizer.step()  # waits for the all-reduces, then steps on the averages
        return loss

    def full_parameters(self) -> Any:
        return named_parameters(self.model)

    def reduced_gradients(self, batch: torch.Tensor) -> list[torch.Tensor]:
        self._backward(batch)
        self.optimizer.synchronize()  # the averaged gradients, in place; no optimizer step
        grads = []
        for p in self.model.parameters():
            if p.grad is None:
                raise RuntimeError("a parameter received no gradient")
            grads.append(p.grad.clone())
        self.optimizer.zero_grad()  # Horovod 0.28.1 takes no set_to_none
        return grads

    def describe(self) -> dict[str, Any]:
        return {"horovod": {"version": horovod.__version__, "controller": _controller()}}

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        # Horovod's hooks sit on the model's own parameters and all-reduce whatever backward
        # accumulates there: a copy of the model (no hooks) computes the same pass alone.
        if self._alone is None:
            self._alone = copy.deepcopy(self.model)
        with self.precision():
            loss = lm_loss(self._alone(batch[:, :-1]), batch[:, 1:])
        torch.autograd.backward(loss)
        self._alone.zero_grad(set_to_none=True)
        return None

    def allreduce_probe(self, gradient_bytes: int, warmup: int, iters: int) -> dict[str, Any]:
        return probe_allreduce(gradient_bytes, warmup, iters, self.device, HOROVOD_MODES)


def _controller() -> str:
    return "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else "unknown"


def init_horovod(args: argparse.Namespace, backend: str) -> None:
    hvd.init()
    # The bookkeeping group (module docstring): the contract's RANK and WORLD_SIZE are
    # Horovod's own (launch-env.sh maps them), so both numberings agree; checked here.
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    if (dist.get_rank(), dist.get_world_size()) != (hvd.rank(), hvd.size()):
        raise RuntimeError(
            f"torch.distributed rank {dist.get_rank()}/{dist.get_world_size()} is not Horovod's "
            f"{hvd.rank()}/{hvd.size()} (RANK={os.environ.get('RANK')})"
        )


def main(argv: list[str] | None = None) -> int:
    return train.train(train.parse_args(argv), HorovodEngine, init_horovod)


if __name__ == "__main__":
    exit_now(main())
