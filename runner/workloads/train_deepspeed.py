"""The training workload under DeepSpeed: the same model, loop and result as ``train``.

DeepSpeed owns data parallelism here: ``deepspeed.initialize`` wraps the model with the ZeRO
stage of the generated config (``--deepspeed-config``, rendered by dtrun into the launch
directory). The optimizer is a plain torch AdamW handed to DeepSpeed, not an ``"optimizer"``
block in the config, which would compile DeepSpeed's fused Adam first (about 45 s on a CPU
machine, shared/FACTS.md section 8).

Imports only torch, deepspeed, the standard library and its sibling modules.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import deepspeed
import torch

from runner.workloads import train
from runner.workloads.gpt import GPT, fingerprint, lm_loss


class DeepSpeedEngine:
    name: str = "deepspeed"

    def __init__(self, model: GPT, args: argparse.Namespace, device: torch.device) -> None:
        config: dict[str, Any] = json.loads(Path(args.deepspeed_config).read_text())
        self.zero_stage: int | None = int(config.get("zero_optimization", {}).get("stage", 0))
        optimizer = torch.optim.AdamW(model.parameters(), lr=train.LEARNING_RATE)
        # Broadcasts rank 0's weights (ZeRO 1 and 2) or partitions them from rank 0's (ZeRO 3).
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = lm_loss(self.engine(batch[:, :-1]), batch[:, 1:])
        self.engine.backward(loss)
        self.engine.step()
        return loss

    def fingerprint(self) -> float:
        module = self.engine.module
        if self.zero_stage == 3:
            # Each rank holds a shard: gather the full parameters to fingerprint them.
            with deepspeed.zero.GatheredParameters(list(module.parameters())):
                return fingerprint(module)
        return fingerprint(module)


def init_deepspeed(args: argparse.Namespace, backend: str) -> None:
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
    train.exit_now(main())
