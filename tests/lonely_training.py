"""The training workload with a fake engine whose ranks never communicate: DDP's loop on the
bare model, so gradients are never averaged. Its proof must fail, and the launch exit 3."""

from __future__ import annotations

import argparse

import torch

from dtrun.workloads import train
from dtrun.workloads.ddp import DdpEngine
from dtrun.workloads.result import exit_now


class LonelyDdp(DdpEngine):
    """Each rank trains alone (DDP's constructor still broadcasts rank 0's weights once)."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        super().__init__(args, device)
        self.ddp = self.model  # type: ignore[assignment]

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        return "the lonely engine is not probed"  # its bare model has no no_sync


if __name__ == "__main__":
    exit_now(train.train(train.parse_args(), LonelyDdp))
