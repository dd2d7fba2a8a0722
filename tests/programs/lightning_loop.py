"""A Lightning program, as a user writes one: a LightningModule and a Trainer with the DDP
strategy, on CPU or on every GPU of the node. Under torchrun Lightning takes its ranks from the
launcher's environment (torchelastic), so the Trainer is told the node count and the processes
per node the launch has. A callback times each optimizer step with the program's own clock and
writes those times to own-times-rank<RANK>.json, as ddp_loop.py does.

Usage: python lightning_loop.py [--steps N] [--accumulate K] [--sleep S] [--width W]
    [--precision bf16-mixed]
"""

import argparse
import json
import os
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12, help="optimizer steps")
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--sleep", type=float, default=0.02, help="extra seconds per micro-batch")
parser.add_argument("--width", type=int, default=64, help="hidden width of the MLP")
parser.add_argument("--precision", default="32-true")
args = parser.parse_args()


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 8)
        )

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        time.sleep(args.sleep)
        loss: torch.Tensor = self.net(batch[0]).square().mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class OwnClock(L.Callback):
    """Each optimizer step's time by the program's own clock: one step's end to the next's
    (the first from the first micro-batch's start), the interval the step hook times, so the
    loader's and Lightning's own work between steps is in both."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.times: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, module: object, out: object, batch: object, index: int
    ) -> None:
        if (index + 1) % args.accumulate:  # a micro-batch: the optimizer has not stepped
            return
        assert self.started is not None
        now = time.perf_counter()
        self.times.append(now - self.started)
        self.started = now


torch.manual_seed(0)
samples = 16 * args.steps * args.accumulate
data = TensorDataset(torch.randn(samples, 64))
clock = OwnClock()
gpus = torch.cuda.device_count()
per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
trainer = L.Trainer(
    accelerator="gpu" if gpus else "cpu",
    devices=per_node,
    num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // per_node,
    strategy="ddp",
    precision=args.precision,
    max_steps=args.steps,
    accumulate_grad_batches=args.accumulate,
    callbacks=[clock],
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Model(), DataLoader(data, batch_size=16))
Path(f"own-times-rank{trainer.global_rank}.json").write_text(json.dumps(clock.times))
# Lightning leaves its process group alive. Left to the interpreter's exit, torch 2.13 with gloo
# aborted a rank ("terminate called without an active exception", SIGABRT) in 1 of 12 bare
# torchrun launches here, so the program ends its group itself, as ddp_loop.py does.
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
