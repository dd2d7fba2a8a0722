"""A DDP loop with no torch optimizer at all: it updates the weights by hand. It imports torch
(and so torch.optim) as every program does, but no optimizer ever steps, so dtrun's step hook
has nothing to time and must leave no file. It writes own-times-rank<RANK>.json as
ddp_loop.py does.

Usage: python no_optimizer.py [--steps N] [--sleep S]
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--sleep", type=float, default=0.01, help="extra seconds per step")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(64, 8))
own = []
for _ in range(args.steps):
    started = time.perf_counter()
    model(torch.randn(16, 64)).square().mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(1e-3 * p.grad)
                p.grad = None
    time.sleep(args.sleep)
    own.append(time.perf_counter() - started)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
dist.destroy_process_group()
