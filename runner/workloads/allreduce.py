"""All-reduce bandwidth, measured and computed the way nccl-tests' all_reduce_perf does.

For each message size S (bytes of the whole array), out of place and in place: time ``--iters``
back-to-back all-reduces (sum), take the time per operation averaged over the ranks, then
algbw = S / t and busbw = algbw * 2(n-1)/n (GB = 1e9 bytes; docs/facts.md §7), and
check one more operation's result element by element (#wrong). Before the sizes, ``--warmup``
operations at the largest and at the smallest size. nccl on GPU, gloo on CPU.

Out of place goes through torch's functional all_reduce (a new output tensor, the input left
as it was), in place through dist.all_reduce, which is what DDP uses. Rank 0 writes one JSON
result (schema dtrun.allreduce/1, docs/workloads.md). Imports only torch, the standard
library and its sibling modules: this file is staged onto the nodes (Python 3.10 or later).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dtrun.workloads.result import (
    device_name,
    local_device,
    rank_info,
    versions,
    write_result,
)
from dtrun.workloads.sizes import message_sizes, probe_sizes

SCHEMA = "dtrun.allreduce/1"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def bus_factor(world: int) -> float:
    """busbw / algbw for all-reduce: 2(n-1)/n, the share of the data every rank must move."""
    return 2 * (world - 1) / world


def bandwidths(size_bytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s, exactly as nccl-tests computes them for all_reduce."""
    algbw = size_bytes / 1e9 / seconds
    return algbw, algbw * bus_factor(world)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _out_of_place(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed import _functional_collectives as functional

    world = dist.group.WORLD
    assert world is not None  # the process group is initialised before any measurement
    result: torch.Tensor = functional.wait_tensor(  # type: ignore[no-untyped-call]
        functional.all_reduce(tensor, "sum", world)
    )
    return result


def _in_place(tensor: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(tensor)
    return tensor


MODES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "out_of_place": _out_of_place,
    "in_place": _in_place,
}


def _time(op: Callable[[torch.Tensor], torch.Tensor], buffer: torch.Tensor, iters: int) -> float:
    """Seconds per operation, averaged over the ranks (nccl-tests' default, -a 1)."""
    device = buffer.device
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        op(buffer)
    _synchronize(device)
    seconds = (time.perf_counter() - start) / iters
    total = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return float(total.item()) / dist.get_world_size()


def _wrong(op: Callable[[torch.Tensor], torch.Tensor], buffer: torch.Tensor) -> int:
    """Elements of one all-reduce that differ from the expected sum, counted over every rank.
    Reuses the timing buffer, so the largest size needs no third copy of the array."""
    world, rank = dist.get_world_size(), dist.get_rank()
    device = buffer.device
    # rank + 1 everywhere: the sum is world(world+1)/2, exact in every dtype for small worlds.
    data = buffer.fill_(float(rank + 1))
    result = op(data)
    expected = world * (world + 1) / 2
    wrong = torch.tensor([int((result != expected).sum().item())], dtype=torch.int64, device=device)
    dist.all_reduce(wrong)
    return int(wrong.item())


def measure(
    sizes: list[int],
    dtype: torch.dtype,
    warmup: int,
    iters: int,
    device: torch.device,
    modes: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = MODES,
) -> list[dict[str, Any]]:
    """One row per size: out of place and in place, time, algbw, busbw and #wrong. ``modes``
    are the two all-reduces timed (torch.distributed's; Horovod's under train_horovod)."""
    world = dist.get_world_size()
    element = torch.tensor([], dtype=dtype).element_size()
    for size in (max(sizes), min(sizes)):  # warm up connections and buffers at both ends
        buffer = torch.zeros(max(1, size // element), dtype=dtype, device=device)
        for _ in range(warmup):
            modes["in_place"](buffer)
            modes["out_of_place"](buffer)
    rows = []
    for size in sizes:
        count = max(1, size // element)
        size_bytes = count * element
        # Zeros: repeated sums stay finite in every dtype; the speed does not depend on values.
        buffer = torch.zeros(count, dtype=dtype, device=device)
        kind = str(dtype).split(".")[-1]
        row: dict[str, Any] = {"size": size_bytes, "count": count, "type": kind, "redop": "sum"}
        for mode, op in modes.items():
            buffer.zero_()
            seconds = _time(op, buffer, iters)
            algbw, busbw = bandwidths(size_bytes, seconds, world)
            row[mode] = {
                "time_us": seconds * 1e6,
                "algbw": algbw,
                "busbw": busbw,
                "wrong": _wrong(op, buffer),
            }
        rows.append(row)
    return rows


# The largest message of a training launch's probe: the whole gradient, up to what the network
# shows its full speed at (NCCL on GPUs) or what gloo moves in well under a second (CPU).
def probe(
    gradient_bytes: int,
    warmup: int,
    iters: int,
    device: torch.device,
    modes: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = MODES,
) -> dict[str, Any]:
    """A training launch's all-reduce probe: the same ranks, after training, timing float32
    all-reduces up to the size of the gradients that DDP all-reduces every step."""
    sizes = probe_sizes(gradient_bytes, device.type)
    rows = measure(sizes, torch.float32, warmup, iters, device, modes)
    return {
        "gradient_bytes": gradient_bytes,
        "dtype": "float32",
        "warmup": warmup,
        "iters": iters,
        "bus_factor": bus_factor(dist.get_world_size()),
        "rows": rows,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4K:64M", help="MIN:MAX doubling, or a list: 1K,1M")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--timeout", type=int, default=600, help="collective timeout, seconds")
    parser.add_argument("--out", default="result.json")
    parser.add_argument("--local_rank", type=int, help=argparse.SUPPRESS)  # DeepSpeed adds it
    return parser.parse_args(argv)


def init_torch(args: argparse.Namespace, backend: str) -> None:
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))


def run(
    args: argparse.Namespace,
    init: Callable[[argparse.Namespace, str], None] = init_torch,
    modes: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = MODES,
    library: str = "torch.distributed",
) -> int:
    """Measure and write the result; ``init`` opens the process group (and Horovod, under
    allreduce_horovod), ``modes`` are the all-reduces timed, ``library`` says whose they are."""
    started = datetime.datetime.now(datetime.timezone.utc)
    device, backend = local_device(args.device)
    init(args, backend)
    world = dist.get_world_size()
    sizes = message_sizes(args.sizes)
    rows = measure(sizes, DTYPES[args.dtype], args.warmup, args.iters, device, modes)
    ranks: list[dict[str, Any] | None] = [None] * world
    dist.all_gather_object(ranks, rank_info())
    wrong = sum(row[mode]["wrong"] for row in rows for mode in MODES)
    if dist.get_rank() == 0:
        in_place = [row["in_place"]["busbw"] for row in rows]
        result = {
            "schema": SCHEMA,
            "workload": "allreduce",
            "started_at": started.isoformat(),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "world_size": world,
            "nnodes": len({r["node"] for r in ranks if r}),
            "procs_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            "backend": backend,
            "device": device.type,
            "device_name": device_name(device),
            "dtype": args.dtype,
            **versions(device),
            "warmup": args.warmup,
            "iters": args.iters,
            "op": "sum",
            "bus_factor": bus_factor(world),
            "rows": rows,
            "peak_busbw": max(in_place),
            "avg_busbw": sum(in_place) / len(in_place),  # nccl-tests' "Avg bus bandwidth"
            "library": library,
            "communication": {"backend": backend, "wrong": wrong, "allreduce_ok": wrong == 0},
            "ranks": ranks,
        }
        out = Path(args.out)
        write_result(out, result)
        print(
            f"dtrun: all-reduce over {world} ranks, {len(rows)} sizes: peak busbw "
            f"{max(in_place):.2f} GB/s, {wrong} wrong elements; wrote {out}",
            flush=True,
        )
    dist.destroy_process_group()
    if wrong:
        print(f"dtrun: {wrong} elements of the all-reduce results were wrong", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    from dtrun.workloads.result import exit_now

    exit_now(run(parse_args()))
