"""An FSDP training loop, as a user writes one (FSDP2's ``fully_shard``, torch 2.6 and later;
FSDP1's ``FullyShardedDataParallel`` with --fsdp1): each rank holds a shard of every
parameter. It times each iteration itself and writes those times to own-times-rank<RANK>.json,
as ddp_loop.py does.

Usage: python fsdp_loop.py [--steps N] [--accumulate K] [--sleep S]
    [--fsdp1 [--use-orig-params]]
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--sleep", type=float, default=0.02, help="extra seconds per micro-batch")
parser.add_argument(
    "--fsdp1", action="store_true", help="FullyShardedDataParallel, not fully_shard"
)
parser.add_argument("--use-orig-params", action="store_true", help="FSDP1's use_orig_params")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
if args.fsdp1:
    model = FullyShardedDataParallel(
        model, use_orig_params=args.use_orig_params, device_id=torch.device("cpu")
    )
else:
    for layer in model.children():
        fully_shard(layer)
    fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
own = []
for step in range(args.steps):
    started = time.perf_counter()
    for _ in range(args.accumulate):
        loss = model(torch.randn(16, 64)).square().mean() / args.accumulate
        loss.backward()
        time.sleep(args.sleep * (1 + step % 3))  # uneven steps: a misaligned clock shows
    optimizer.step()
    optimizer.zero_grad()
    own.append(time.perf_counter() - started)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
dist.destroy_process_group()
