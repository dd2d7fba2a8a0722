"""A DDP loop whose rank 1 raises at step 3 (counting from 0), after three optimizer steps:
a crash must stay the program's own (its traceback, its exit code), and the hook still
records the steps the rank made. Rank 0 writes own-times-rank0.json if it gets that far.

Usage: python fails_rank1.py [--steps N] [--sleep S]
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--sleep", type=float, default=0.01, help="extra seconds per step")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(64, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
own = []
for step in range(args.steps):
    started = time.perf_counter()
    if rank == 1 and step == 3:
        raise RuntimeError("rank 1 fails at step 3, as planned")
    model(torch.randn(16, 64)).square().mean().backward()
    time.sleep(args.sleep)
    optimizer.step()
    optimizer.zero_grad()
    own.append(time.perf_counter() - started)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
dist.destroy_process_group()
