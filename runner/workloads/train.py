"""GPT-style training throughput on synthetic tokens, under one training strategy.

Runs on every process of a launch started by any launcher that provides the environment contract
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; docs/launchers.md "The environment each
process sees"). Imports only torch, the standard library and its sibling modules, because these
files are what gets staged onto the nodes, whose Python may be as old as 3.10 (Ubuntu 22.04
HPC images).

After ``--warmup`` untimed steps it times ``--steps - --warmup`` steps, recording how noisy each
node was meanwhile (``noise``); each rank then times ``--probe-steps`` forward and backward
passes alone, to find a rank slower than the rest; then the engine proves that the ranks
really communicated (``proof``) and rank 0 writes one JSON result (schema ``dtrun.train/1``,
documented in docs/workloads.md). A launch whose proof fails exits with code 3.

``--strategy`` picks the engine: DDP, FSDP or a pipeline here (``ENGINES``); DeepSpeed's ZeRO
runs the same loop and result from ``train_deepspeed``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dtrun.workloads import noise
from dtrun.workloads.allreduce import probe as probe_allreduce
from dtrun.workloads.ddp import DdpEngine
from dtrun.workloads.engine import Engine, EngineFactory
from dtrun.workloads.gpt import param_counts
from dtrun.workloads.result import (
    Measured,
    build_result,
    exit_now,
    local_device,
    peak_memory_bytes,
    rank_info,
    write_result,
)
from dtrun.workloads.stagecost import SCHEDULE_NAMES, SPLITS


def _on_demand(module: str, name: str) -> EngineFactory:
    """Engine ``name`` of ``module``, imported when a launch picks it. FSDP's and the pipeline's
    modules import torch.distributed.fsdp and .pipelining (torch._dynamo with it): 0.5 s of CPU
    each on every rank (``python -X importtime``, torch 2.13 on this project's 2-core CI
    machine), which a DDP launch, the default, never used."""

    def make(args: argparse.Namespace, device: torch.device) -> Engine:
        engine: EngineFactory = getattr(importlib.import_module(f"dtrun.workloads.{module}"), name)
        return engine(args, device)

    return make


ENGINES: dict[str, EngineFactory] = {
    "ddp": DdpEngine,
    "fsdp": _on_demand("fsdp", "FsdpEngine"),
    "pipeline": _on_demand("pipeline_parallel", "PipelineEngine"),
}

InitDistributed = Callable[[argparse.Namespace, str], None]

# Engines live until the process leaves through exit_now, which runs no destructor. Freed when
# ``train`` returned, their C++ state (DDP's reducer and the gloo process group it holds, after
# destroy_process_group) sometimes spun forever on one rank, the result already written: 2 of
# 8 two-rank DDP launches on this 2-core machine with torch 2.13; none of 40 since.
_ALIVE: list[object] = []


def init_torch_distributed(args: argparse.Namespace, backend: str) -> None:
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--batch", type=int, default=8, help="sequences per step, per process (or pipeline)"
    )
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--preset", default=None, help="the preset the shape came from")
    parser.add_argument("--strategy", choices=sorted(ENGINES), default="ddp")
    parser.add_argument("--schedule", choices=sorted(SCHEDULE_NAMES), default="1f1b")
    parser.add_argument("--micro-batches", type=int, default=4, help="pipeline, per step")
    parser.add_argument("--pp-size", type=int, default=None, help="pipeline: ranks per pipeline")
    parser.add_argument("--stages-per-rank", type=int, default=1)
    parser.add_argument(
        "--stage-split",
        choices=sorted(SPLITS),
        default="even",
        help="pipeline: blocks per stage as even as the layers allow, or balanced by FLOPs",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--mode", choices=("weak", "strong"), default="weak")
    parser.add_argument("--peak-tflops", type=float, default=None, help="per-device peak, for MFU")
    parser.add_argument("--timeout", type=int, default=600, help="collective timeout, seconds")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--busbw-iters", type=int, default=0, help="after training, time all-reduces (0: skip)"
    )
    parser.add_argument(
        "--probe-steps",
        type=int,
        default=3,
        help="after training, forward and backward passes each rank (and each pipeline stage) "
        "times alone (0: skip)",
    )
    parser.add_argument("--out", default="result.json")
    # DeepSpeed's launcher appends --local_rank=N to the program's arguments; LOCAL_RANK from the
    # environment contract is what counts.
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def setup(args: argparse.Namespace, init: InitDistributed) -> tuple[torch.device, str]:
    device, backend = local_device(args.device)
    init(args, backend)
    return device, backend


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_losses(losses: list[float]) -> list[float]:
    """Every rank's losses -> those of the first rank that computed any (a pipeline's last
    stage computes them; the other ranks have none)."""
    every: list[list[float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, losses)
    return next((mine for mine in every if mine), [])


def probe_compute(
    engine: Engine, batch: torch.Tensor, steps: int, device: torch.device
) -> tuple[float | None, str | None]:
    """This rank's median time of a forward and backward pass alone, seconds; or why not.

    Under DDP every rank waits for the slowest at each step, so step times cannot tell which
    rank is slow; without the gradient all-reduce each rank's own compute shows. Ranks that
    share one machine's CPU cores take turns (``noise.probe_turns``): a rank computing beside
    its neighbour on the same cores would read slow for the neighbour, not for its node. There
    each rank gives its fastest pass: what slows a pass there is the machine's other work (the
    Noise section's other load); a slow or throttled node is slow in every pass.
    """
    if steps <= 0:
        return None, "turned off (--probe-steps 0)"
    if dist.get_world_size() == 1:
        return None, "one rank: nothing to compare"
    turn, turns = 0, 1
    if device.type == "cpu":  # ranks on accelerators compute on their own: no turns to take
        machines: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(machines, noise.machine_id())
        turn, turns = noise.probe_turns([str(m) for m in machines], dist.get_rank(), "cpu")
    timed: tuple[float | None, str | None] = (None, "no turn")
    for now in range(turns):
        if turns > 1:
            dist.barrier()  # the turn before has finished on every machine
        if now == turn:
            timed = _time_alone(engine, batch, steps, device, min if turns > 1 else None)
    return timed


def _time_alone(
    engine: Engine,
    batch: torch.Tensor,
    steps: int,
    device: torch.device,
    pick: Callable[[list[float]], float] | None = None,
) -> tuple[float | None, str | None]:
    """The passes' median (or ``pick`` of them), seconds; or why there are none."""
    times = []
    for _ in range(steps):
        synchronize(device)
        start = time.perf_counter()
        why = engine.compute_alone(batch)
        synchronize(device)
        if why is not None:
            return None, why
        times.append(time.perf_counter() - start)
    return (pick or statistics.median)(times), None


def run_steps(
    args: argparse.Namespace, engine: Engine, pool: torch.Tensor, device: torch.device
) -> tuple[list[float], list[torch.Tensor | None], noise.Snapshot]:
    """Every step, timed: the times and losses, and the node's CPU times as the first timed
    step began (the noise window's start)."""
    times: list[float] = []
    losses: list[torch.Tensor | None] = []
    log_every = max(1, args.steps // 5)
    window_start = noise.snapshot()
    for step in range(args.steps):
        if step == args.warmup:
            window_start = noise.snapshot()
        rows = (torch.arange(args.batch, device=device) + step * args.batch) % pool.shape[0]
        batch = pool[rows]
        synchronize(device)
        start = time.perf_counter()
        loss = engine.step(batch)
        synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(loss)
        if dist.get_rank() == 0 and (step + 1) % log_every == 0:
            said = "" if loss is None else f" loss {float(loss.item()):.3f}"
            print(
                f"step {step + 1}/{args.steps}{said} step_time {times[-1] * 1000:.1f} ms",
                flush=True,
            )
    return times, losses, window_start


def measure_noise(
    args: argparse.Namespace,
    engine: Engine,
    pool: torch.Tensor,
    device: torch.device,
    window: dict[str, Any],
) -> dict[str, Any]:
    """After the timed steps: the straggler probe on every rank, then every rank's window and
    probe gathered into the result's ``noise``; rank 0 names any straggler in its log."""
    same = pool[torch.arange(args.batch, device=device) % pool.shape[0]]  # a step's worth
    alone_s, alone_why = probe_compute(engine, same, args.probe_steps, device)
    mine = {**window, "alone_s": alone_s, "alone_why": alone_why, "node": rank_info()["node"]}
    every: list[dict[str, Any] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    gathered = [g or {} for g in every]
    nodes = [str(g["node"]) for g in gathered]
    measured = noise.launch_noise(gathered, nodes, args.probe_steps)
    if dist.get_rank() == 0:
        for slow in noise.stragglers(measured["probe"]["rank_s"] or [], nodes):
            print(
                f"dtrun: rank {slow['rank']} on {slow['node']} computed {slow['ratio']:.2f}x as "
                f"long as the median of the other ranks: a straggler",
                flush=True,
            )
    return measured


def train(
    args: argparse.Namespace,
    make_engine: EngineFactory | None = None,
    init: InitDistributed = init_torch_distributed,
) -> int:
    started = datetime.datetime.now(datetime.timezone.utc)
    device, backend = setup(args, init)
    rank, world = dist.get_rank(), dist.get_world_size()

    # The all-reduce every later number depends on: the sum of 1..world, computed by all ranks.
    check = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(check)
    allreduce_ok = check.item() == world * (world + 1) / 2

    engine = (make_engine or ENGINES[args.strategy])(args, device)
    _ALIVE.append(engine)
    # Different tokens per replica: a small pool of random sequences the model can learn. The
    # ranks of one pipeline share theirs: the first stage reads the inputs, the last the targets.
    generator = torch.Generator().manual_seed(args.seed * 1000 + engine.data_rank)
    pool = torch.randint(0, args.vocab, (64, args.seq_len + 1), generator=generator).to(device)

    times, losses, window_start = run_steps(args, engine, pool, device)
    window = noise.rank_window(window_start, noise.snapshot())
    launch_noise = measure_noise(args, engine, pool, device, window)
    engine.probe_stages(args.probe_steps)

    # The probe: rows no step trained on, the same number as a step's.
    probe = pool[(torch.arange(args.batch, device=device) + 32) % pool.shape[0]]
    proof = engine.prove(probe)
    ranks: list[dict[str, Any] | None] = [None] * world
    dist.all_gather_object(ranks, rank_info())
    peaks: list[int | None] = [None] * world
    dist.all_gather_object(peaks, peak_memory_bytes(device))
    busbw = None
    if args.busbw_iters > 0 and world > 1:
        # Float32 gradients (also under bf16 autocast): 4 bytes per parameter of the whole model,
        # what DDP all-reduces every step (FSDP reduce-scatters as much; a pipeline, its share).
        gradient_bytes = 4 * param_counts(args.vocab, args.seq_len, args.layers, args.d_model)[0]
        warmup = min(5, args.busbw_iters)
        # An engine with its own collectives (Horovod) times those; the others, torch's.
        own_probe = getattr(engine, "allreduce_probe", None)
        if own_probe is not None:
            busbw = own_probe(gradient_bytes, warmup, args.busbw_iters)
        else:
            busbw = probe_allreduce(gradient_bytes, warmup, args.busbw_iters, device)
    measured = Measured(
        started=started,
        backend=backend,
        device=device,
        times=times,
        losses=first_losses([float(x.item()) for x in losses if x is not None]),
        peak_memory=[int(p or 0) for p in peaks],
        ranks=[r or {} for r in ranks],
        allreduce_ok=allreduce_ok,
        busbw=busbw,
        noise=launch_noise,
    )
    ok = proof.ok and allreduce_ok
    if rank == 0:
        result = build_result(args, engine, proof, measured)
        out = Path(args.out)
        write_result(out, result)
        failed = [check.name for check in proof.checks if not check.ok]
        if world == 1:
            said = "single process"
        elif ok:
            said = f"{proof.kind}: {', '.join(c.name for c in proof.checks)} verified"
        else:
            said = f"{proof.kind}: FAILED {', '.join(failed) or 'all-reduce'}"
        # at the median step, as dtrun's own line and the report say it (result.json keeps the
        # mean over the timed steps as tokens_per_s): one launch, one throughput on the console
        median = result["global_batch"] * args.seq_len / result["step_time_s"]["p50"]
        print(f"dtrun: {median:,.0f} tokens/s at the median step; {said}; wrote {out}", flush=True)
    dist.destroy_process_group()
    if not ok:
        for failed_check in proof.checks:
            if not failed_check.ok:
                print(
                    f"dtrun: rank {rank}: {failed_check.name}: {failed_check.detail}",
                    file=sys.stderr,
                )
        print(
            f"dtrun: rank {rank}: ranks did not communicate correctly "
            f"(all-reduce ok: {allreduce_ok})",
            file=sys.stderr,
            flush=True,
        )
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    return train(parse_args(argv))


if __name__ == "__main__":
    exit_now(main())
