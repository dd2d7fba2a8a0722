"""GPT-style data-parallel training throughput on synthetic tokens.

Runs on every process of a launch started by any launcher that provides the environment contract
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; README "The environment each process
sees"). Imports only torch, the standard library and its sibling modules, because these files are
what gets staged onto the nodes, whose Python may be as old as 3.10 (Ubuntu 22.04 HPC images).

After ``--warmup`` untimed steps it times ``--steps - --warmup`` steps and rank 0 writes one JSON
result (schema ``dtrun.train/1``, documented in the README) that also proves the ranks really
communicated: each rank starts from different random weights and trains on different tokens, so
its parameters can only end up equal to rank 0's through the engine's broadcast and gradient
all-reduce.

The engine is the seam between data-parallel libraries: this module trains with PyTorch's
DistributedDataParallel; ``train_deepspeed`` runs the same loop and result through DeepSpeed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from runner.workloads.gpt import GPT, fingerprint, flops_per_token, lm_loss

SCHEMA = "dtrun.train/1"
# Relative difference of parameter fingerprints still called "equal". Gloo's all-reduce is not
# bit-identical across ranks at every world size (4 ranks on CPU differ in the last bits), and
# float32 rounding accumulates over the steps; ranks that never communicated differ by ~1e-2.
SYNC_TOLERANCE = 1e-6
LEARNING_RATE = 1e-3


class Engine(Protocol):
    """One data-parallel library's way of training the model, one step at a time."""

    name: str
    zero_stage: int | None

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        """Forward, backward and optimizer step on one batch of token rows; returns the loss."""
        ...

    def fingerprint(self) -> float:
        """The fingerprint of this rank's full parameters."""
        ...


class DdpEngine:
    """PyTorch DistributedDataParallel with AdamW; bf16 through autocast when asked."""

    name: str = "ddp"
    zero_stage: int | None = None

    def __init__(self, model: GPT, args: argparse.Namespace, device: torch.device) -> None:
        self.model = model
        self.ddp = DistributedDataParallel(model)  # broadcasts rank 0's weights to every rank
        self.optimizer = torch.optim.AdamW(self.ddp.parameters(), lr=LEARNING_RATE)
        self.autocast = torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"
        )

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast:
            loss = lm_loss(self.ddp(batch[:, :-1]), batch[:, 1:])
        torch.autograd.backward(loss)
        self.optimizer.step()
        return loss

    def fingerprint(self) -> float:
        return fingerprint(self.model)


def init_torch_distributed(args: argparse.Namespace, backend: str) -> None:
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))


EngineFactory = Callable[[GPT, argparse.Namespace, torch.device], Engine]
InitDistributed = Callable[[argparse.Namespace, str], None]


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def gather_floats(value: float, device: torch.device) -> list[float]:
    mine = torch.tensor([value], dtype=torch.float64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [float(t.item()) for t in every]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="sequences per process per step")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--preset", default=None, help="the preset the shape came from")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--mode", choices=("weak", "strong"), default="weak")
    parser.add_argument("--peak-tflops", type=float, default=None, help="per-device peak, for MFU")
    parser.add_argument("--timeout", type=int, default=600, help="collective timeout, seconds")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", default="result.json")
    # DeepSpeed's launcher appends --local_rank=N to the program's arguments; LOCAL_RANK from the
    # environment contract is what counts.
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def setup(args: argparse.Namespace, init: InitDistributed) -> tuple[torch.device, str]:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    init(args, backend)
    return device, backend


def rank_info() -> dict[str, Any]:
    env = os.environ
    return {
        "rank": dist.get_rank(),
        "local_rank": int(env.get("LOCAL_RANK", "0")),
        "group_rank": int(env.get("GROUP_RANK", env.get("NODE_RANK", "0"))),
        "node": env.get("DTRUN_NODE_NAME", socket.gethostname()),
        "address": env.get("DTRUN_NODE_ADDR", ""),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def train(
    args: argparse.Namespace,
    make_engine: EngineFactory = DdpEngine,
    init: InitDistributed = init_torch_distributed,
) -> int:
    started = datetime.datetime.now(datetime.timezone.utc)
    device, backend = setup(args, init)
    rank, world = dist.get_rank(), dist.get_world_size()

    # The all-reduce every later number depends on: the sum of 1..world, computed by all ranks.
    check = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(check)
    allreduce_ok = check.item() == world * (world + 1) / 2

    torch.manual_seed(args.seed + rank)  # different weights per rank, on purpose
    model = GPT(args.vocab, args.seq_len, args.layers, args.d_model, args.heads).to(device)
    initial = gather_floats(fingerprint(model), device)
    # Counted before the engine may partition the parameters (ZeRO-3 leaves each rank a shard).
    params = sum(p.numel() for p in model.parameters())
    matmul_params = params - model.pos.weight.numel()
    engine = make_engine(model, args, device)

    # Different tokens per rank: a small pool of random sequences the model can learn.
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    pool = torch.randint(0, args.vocab, (64, args.seq_len + 1), generator=generator).to(device)

    times: list[float] = []
    losses: list[float] = []
    log_every = max(1, args.steps // 5)
    for step in range(args.steps):
        rows = (torch.arange(args.batch, device=device) + step * args.batch) % pool.shape[0]
        batch = pool[rows]
        synchronize(device)
        start = time.perf_counter()
        loss = engine.step(batch)
        synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(float(loss.item()))
        if rank == 0 and (step + 1) % log_every == 0:
            print(
                f"step {step + 1}/{args.steps} loss {losses[-1]:.3f} "
                f"step_time {times[-1] * 1000:.1f} ms",
                flush=True,
            )

    final = gather_floats(engine.fingerprint(), device)
    divergence = max(abs(f - final[0]) / max(1.0, abs(final[0])) for f in final)
    initial_divergence = max(abs(f - initial[0]) / max(1.0, abs(initial[0])) for f in initial)
    ranks: list[dict[str, Any] | None] = [None] * world
    dist.all_gather_object(ranks, rank_info())
    in_sync = divergence <= SYNC_TOLERANCE and allreduce_ok

    if rank == 0:
        timed = times[args.warmup :]
        elapsed = sum(timed)
        global_batch = args.batch * world
        tokens_per_s = global_batch * args.seq_len * len(timed) / elapsed
        head_dim = args.d_model // args.heads
        fpt = flops_per_token(matmul_params, args.layers, args.heads, head_dim, args.seq_len)
        mfu = None
        if args.peak_tflops:
            mfu = tokens_per_s * fpt / (world * args.peak_tflops * 1e12)
        result = {
            "schema": SCHEMA,
            "workload": "train",
            "engine": engine.name,
            "zero_stage": engine.zero_stage,
            "started_at": started.isoformat(),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "world_size": world,
            "nnodes": len({r["node"] for r in ranks if r}),
            "procs_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            "backend": backend,
            "device": device.type,
            "device_name": torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "dtype": args.dtype,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "mode": args.mode,
            "model": {
                "layers": args.layers,
                "d_model": args.d_model,
                "heads": args.heads,
                "seq_len": args.seq_len,
                "vocab": args.vocab,
                "params": params,
                "matmul_params": matmul_params,
            },
            "batch_per_proc": args.batch,
            "global_batch": global_batch,
            "steps": args.steps,
            "warmup": args.warmup,
            "timed_steps": len(timed),
            "step_time_s": {
                "p50": percentile(timed, 50),
                "p90": percentile(timed, 90),
                "mean": elapsed / len(timed),
                "min": min(timed),
                "max": max(timed),
            },
            "tokens_per_s": tokens_per_s,
            "samples_per_s": global_batch * len(timed) / elapsed,
            "flops_per_token": fpt,
            "peak_tflops": args.peak_tflops,
            "mfu": mfu,
            "loss": {"first": losses[0], "last": losses[-1]},
            "peak_memory_bytes": peak_memory_bytes(device),
            "communication": {
                "backend": backend,
                "allreduce_ok": allreduce_ok,
                "initial_params_differed": len(set(initial)) == world if world > 1 else None,
                "params_in_sync": in_sync,
                "max_divergence": divergence,
                "initial_divergence": initial_divergence,
                "initial_fingerprints": initial,
                "final_fingerprints": final,
            },
            "ranks": ranks,
        }
        out = Path(args.out)
        partial = out.with_name(out.name + ".partial")
        partial.write_text(json.dumps(result, indent=2) + "\n")
        partial.replace(out)
        if world == 1:
            proof = "single process"
        else:
            proof = f"parameters {'in sync' if in_sync else 'NOT in sync'} across {world} ranks"
        print(f"dtrun: {tokens_per_s:,.0f} tokens/s; {proof}; wrote {out}", flush=True)
    dist.destroy_process_group()
    if not in_sync:
        print(
            f"dtrun: rank {rank}: ranks did not communicate correctly "
            f"(all-reduce ok: {allreduce_ok}, parameter divergence {divergence:.3g})",
            file=sys.stderr,
            flush=True,
        )
        return 3
    return 0


def exit_now(code: int) -> NoReturn:
    """Leave without interpreter finalisation.

    With gloo, tearing down torch's C++ state at exit sometimes aborts ("terminate called without
    an active exception", SIGABRT) after the work is done and the result written: about 1 launch
    in 15 on a 2-core machine with torch 2.13. The process group is destroyed and every file
    closed by now; only the standard streams need flushing.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    return train(parse_args(argv))


if __name__ == "__main__":
    exit_now(main())
