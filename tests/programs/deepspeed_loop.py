"""A DeepSpeed training loop, as a user writes one: ``deepspeed.initialize`` with a config dict
and a torch optimizer (a config ``"optimizer"`` block would compile DeepSpeed's fused Adam
first, docs/facts.md section 8), ``engine.backward`` and ``engine.step`` per micro-batch;
DeepSpeed steps the optimizer once every ``gradient_accumulation_steps`` micro-batches. It
times each optimizer step's micro-batches itself and writes those times to
own-times-rank<RANK>.json, as ddp_loop.py does.

Runs under torchrun or the deepspeed launcher (which appends --local_rank=N).
Usage: python deepspeed_loop.py [--steps N] [--accumulate K] [--sleep S] [--zero-stage Z]
    [--diverge]
"""

import argparse
import json
import time
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--sleep", type=float, default=0.02, help="extra seconds per micro-batch")
parser.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3))
parser.add_argument("--diverge", action="store_true", help="rank 1 changes its weights alone")
parser.add_argument("--local_rank", type=int, default=0, help="set by the deepspeed launcher")
args = parser.parse_args()

deepspeed.init_distributed(dist_backend="gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
config = {
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": args.accumulate,
    "zero_optimization": {"stage": args.zero_stage},
}
engine, _, _, _ = deepspeed.initialize(
    model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3), config=config
)
own = []
for step in range(args.steps):
    started = time.perf_counter()
    for _ in range(args.accumulate):
        loss = engine(torch.randn(16, 64)).square().mean()
        engine.backward(loss)
        time.sleep(args.sleep * (1 + step % 3))  # uneven steps: a misaligned clock shows
        engine.step()  # the optimizer steps at the last micro-batch only
    if args.diverge and rank == 1 and step == args.steps - 1:
        with torch.no_grad():
            next(engine.module.parameters()).add_(1.0)
    own.append(time.perf_counter() - started)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
# A gloo worker thread drops its last work's tensors under the GIL; one still doing so when
# Python finalizes aborts the rank after its work is done ("terminate called without an active
# exception", SIGABRT: pytorch/pytorch#190489, open for torch 2.13). DeepSpeed keeps the
# process group alive past destroy_process_group, so its threads run into finalization: 2 of 20
# launches here aborted. Idle a moment, without the GIL, so they finish first.
dist.barrier()
time.sleep(0.5)
dist.destroy_process_group()
