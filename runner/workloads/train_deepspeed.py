"""The training workload under DeepSpeed: the same model, loop and result as ``train``.

DeepSpeed owns data parallelism here: ``deepspeed.initialize`` wraps the model with the ZeRO
stage of the generated config (``--deepspeed-config``, rendered by dtrun into the launch
directory). The optimizer is a plain torch AdamW handed to DeepSpeed, not an ``"optimizer"``
block in the config, which would compile DeepSpeed's fused Adam first (about 45 s on a CPU
machine, docs/facts.md §8). Nor does it build DeepSpeed's shared-memory op on a CPU machine
(``skip_unused_ops``), which training never calls.

Imports only torch, deepspeed, the standard library and its sibling modules.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.utils import safe_get_full_grad

from dtrun.workloads import train
from dtrun.workloads.engine import LEARNING_RATE, DataParallelEngine, Precision, replica_model
from dtrun.workloads.gpt import lm_loss
from dtrun.workloads.result import exit_now


class DeepSpeedEngine(DataParallelEngine):
    """DeepSpeed with the ZeRO stage of the generated config; bf16 when the config says so."""

    name = "deepspeed"

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        config: dict[str, Any] = json.loads(Path(args.deepspeed_config).read_text())
        self.zero_stage: int | None = int(config.get("zero_optimization", {}).get("stage", 0))
        self.strategy = f"zero{self.zero_stage}"
        model, self.initial = replica_model(args, device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        # Broadcasts rank 0's weights (ZeRO 1 and 2) or partitions them from rank 0's (ZeRO 3).
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.replicas = dist.get_world_size()
        self.data_rank = dist.get_rank()
        # DeepSpeed's bf16 casts the model itself, with no autocast: the proof's own gradient
        # runs the same arithmetic on the same (bf16) parameters. Through autocast instead, it
        # missed the reduced gradient by a tenth of the ranks' spread, and the proof failed.
        self.precision: Precision = contextlib.nullcontext

    def _backward(self, batch: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = lm_loss(self.engine(batch[:, :-1]), batch[:, 1:])
        self.engine.backward(loss)
        return loss

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        loss = self._backward(batch)
        self.engine.step()
        return loss

    @contextlib.contextmanager
    def full_parameters(self) -> Iterator[list[tuple[str, torch.Tensor]]]:
        module = self.engine.module
        named = list(module.named_parameters())
        if self.zero_stage == 3:
            # Each rank holds a shard: gather the full parameters while the proof reads them.
            with deepspeed.zero.GatheredParameters([p for _, p in named]):
                yield [(name, p.detach().clone()) for name, p in named]
        else:
            yield named

    def reduced_gradients(self, batch: torch.Tensor) -> list[torch.Tensor]:
        self._backward(batch)  # reduces (ZeRO 1), reduce-scatters (ZeRO 2, 3) the gradients
        grads = []
        for _, p in self.engine.module.named_parameters():
            grad = safe_get_full_grad(p)  # the whole reduced gradient, gathered where sharded
            if grad is None:
                raise RuntimeError("a parameter received no gradient")
            grads.append(grad)
        self.engine.optimizer.zero_grad()
        return grads

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        # ZeRO 1's no_sync might serve; untried, so every stage is left unprobed.
        return "ZeRO 2 and 3 reduce gradients within every backward (DeepSpeed's no_sync refuses)"


# DeepSpeed's CPU accelerator JIT-builds its shared-memory all-reduce op (deepspeed_shm_comm, g++
# into TORCH_EXTENSIONS_DIR: 18-37 s on a machine's first launch here, again whenever another
# Python environment rebuilt it there) in every process's init_distributed, through build_shm_op.
# Only inference_all_reduce, for tensor-parallel inference layers, calls it; ZeRO's training
# collectives go through torch.distributed (deepspeed/comm/torch.py, DeepSpeed 0.19.8). An op
# marked incompatible is neither built nor loaded: build_shm_op returns None. The table of
# compatible ops is one dict kept in deepspeed.ops, so the mark holds (deepspeed/ops/__init__.py).
# No other accelerator (CUDA, ROCm) has the op, so this changes nothing there.
UNUSED_OPS = ("deepspeed_shm_comm",)


def skip_unused_ops() -> None:
    """Mark the ops the training never calls incompatible, so DeepSpeed builds none of them."""
    compatible: dict[str, bool] = deepspeed.ops.__compatible_ops__
    for name in UNUSED_OPS:
        compatible[name] = False


def init_deepspeed(args: argparse.Namespace, backend: str) -> None:
    skip_unused_ops()
    deepspeed.init_distributed(
        dist_backend=backend, timeout=datetime.timedelta(seconds=args.timeout)
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--deepspeed-config", required=True, help="DeepSpeed JSON config")
    known, rest = extra.parse_known_args(argv)
    args = train.parse_args(rest)
    args.deepspeed_config = known.deepspeed_config
    return args


def main(argv: list[str] | None = None) -> int:
    return train.train(parse_args(argv), DeepSpeedEngine, init_deepspeed)


if __name__ == "__main__":
    exit_now(main())
