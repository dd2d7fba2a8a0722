"""A plain DDP loop with a step long enough to be a real one on a CPU (about 100 ms on 2 cores
with the defaults: an MLP of 8.4M parameters, its 34 MB gradient all-reduced every step). It
times each iteration itself and writes those times to own-times-rank<RANK>.json, as
ddp_loop.py does, and each iteration's CPU time (the process's, all threads) to
own-cpu-rank<RANK>.json; benchmarks/stephook_overhead.py runs it hooked and unhooked.

Usage: python ddp_heavy.py [--steps N] [--width W] [--layers L] [--batch B]
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
layers: list[torch.nn.Module] = []
for _ in range(args.layers):
    layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
model = DistributedDataParallel(torch.nn.Sequential(*layers))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
own, cpu = [], []
for _ in range(args.steps):
    started, used = time.perf_counter(), time.process_time()
    loss = model(torch.randn(args.batch, args.width)).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    own.append(time.perf_counter() - started)
    cpu.append(time.process_time() - used)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
Path(f"own-cpu-rank{rank}.json").write_text(json.dumps(cpu))
dist.destroy_process_group()
