"""A plain DDP training loop, as a user writes one: it times each iteration itself and writes
those times to own-times-rank<RANK>.json, so tests can hold dtrun's step hook to its clock.

Usage: python ddp_loop.py [--steps N] [--accumulate K] [--sleep S] [--diverge]
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--sleep", type=float, default=0.02, help="extra seconds per micro-batch")
parser.add_argument("--diverge", action="store_true", help="rank 1 changes its weights alone")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
own = []
for step in range(args.steps):
    started = time.perf_counter()
    for micro in range(args.accumulate):
        x = torch.randn(16, 64)
        loss = model(x).square().mean() / args.accumulate
        if micro < args.accumulate - 1:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
        time.sleep(args.sleep)
    optimizer.step()
    optimizer.zero_grad()
    if args.diverge and rank == 1 and step == args.steps - 1:
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
    own.append(time.perf_counter() - started)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
dist.destroy_process_group()
