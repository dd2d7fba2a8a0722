"""A plain DDP loop with a step long enough to be a real one on a CPU (about 100 ms on 2 cores
with the defaults: an MLP of 8.4M parameters, its 34 MB gradient all-reduced every step). It
times each iteration itself and writes those times to own-times-rank<RANK>.json, as
ddp_loop.py does, and each iteration's CPU time (the process's, all threads) to
own-cpu-rank<RANK>.json; benchmarks/stephook_overhead.py runs it hooked and unhooked.

With --throttled-rank R, rank R creates ready-rank<R> once its first step is done (its lazy
imports and first-use set-up behind it) and waits, up to 120 s, until it is in another cpu
cgroup than the one it started in: a test throttling it from outside
(tests/e2e/test_stephook_ranks.py) thus throttles its steps and nothing else.

Usage: python ddp_heavy.py [--steps N] [--width W] [--layers L] [--batch B] [--throttled-rank R]
"""

import argparse
import json
import re
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
parser.add_argument("--throttled-rank", type=int, default=None)
args = parser.parse_args()


def cpu_cgroup() -> str:
    """This process's cgroup v1 cpu group, from /proc/self/cgroup."""
    found = re.search(r"^\d+:cpu(,cpuacct)?:(.*)$", Path("/proc/self/cgroup").read_text(), re.M)
    return found.group(2) if found else ""


started_in = cpu_cgroup()

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
    if len(own) == 1 and rank == args.throttled_rank:
        Path(f"ready-rank{rank}").touch()
        deadline = time.monotonic() + 120
        while cpu_cgroup() == started_in and time.monotonic() < deadline:
            time.sleep(0.01)
Path(f"own-times-rank{rank}.json").write_text(json.dumps(own))
Path(f"own-cpu-rank{rank}.json").write_text(json.dumps(cpu))
dist.destroy_process_group()
