"""A Horovod training loop, as a user writes one: ``hvd.DistributedOptimizer`` around a torch
optimizer (Horovod makes a subclass of the optimizer's class at run time, whose ``step`` calls
the base class's), run with ``horovodrun -np 2``. It times each iteration itself and writes
those times to own-times-rank<RANK>.json, as ddp_loop.py does.

Usage: horovodrun -np 2 -H localhost:2 python horovod_loop.py [--steps N] [--accumulate K]
    [--sleep S] [--diverge]
"""

import argparse
import json
import time
from pathlib import Path

import horovod.torch as hvd
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--sleep", type=float, default=0.02, help="extra seconds per micro-batch")
parser.add_argument("--diverge", action="store_true", help="rank 1 changes its weights alone")
args = parser.parse_args()

hvd.init()
rank = hvd.rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(
    torch.optim.AdamW(model.parameters(), lr=1e-3),
    named_parameters=model.named_parameters(),
    backward_passes_per_step=args.accumulate,
)
own = []
for step in range(args.steps):
    started = time.perf_counter()
    for _ in range(args.accumulate):
        loss = model(torch.randn(16, 64)).square().mean() / args.accumulate
        loss.backward()
        time.sleep(args.sleep * (1 + step % 3))  # uneven steps: a misaligned clock shows
    optimizer.step()
    optimizer.zero_grad()
    if args.diverge and rank == 1 and step == args.steps - 1:
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
    own.append(time.perf_counter() - started)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
