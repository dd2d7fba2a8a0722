"""The training workload's result file (schema ``dtrun.train/1``, documented in docs/workloads.md).

Torch, the standard library and sibling modules only.
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist

from dtrun.workloads.files import UNWRITTEN, folder_identity, write_atomic
from dtrun.workloads.gpt import flops_per_token, param_counts
from dtrun.workloads.hosted import hosted

if TYPE_CHECKING:  # the all-reduce workload uses this module without any engine
    from dtrun.workloads.engine import Engine
    from dtrun.workloads.proof import Proof

SCHEMA = "dtrun.train/1"


@dataclass(frozen=True)
class Measured:
    """What the loop measured, gathered from every rank where it matters."""

    started: datetime.datetime
    backend: str
    device: torch.device
    times: list[float]  # every step's time on rank 0, warm-up included
    losses: list[float]  # every step's loss, from the first rank that computes it
    peak_memory: list[int]  # by rank
    ranks: list[dict[str, Any]]  # rank_info() by rank
    allreduce_ok: bool
    busbw: dict[str, Any] | None  # the all-reduce probe after training (allreduce.probe)
    noise: dict[str, Any] | None = None  # how noisy the nodes were (noise.launch_noise)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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
        "os": os_name(),
    }


def os_name() -> str:
    """The node's OS as /etc/os-release names it (the image, as the node sees it)."""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def versions(device: torch.device) -> dict[str, str | None]:
    """The node-side software a result depends on (the run manifest has dtrun's side)."""
    nccl = None
    if device.type == "cuda":
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    deepspeed = sys.modules.get("deepspeed")
    return {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "nccl_version": nccl,
        "deepspeed_version": getattr(deepspeed, "__version__", None) if deepspeed else None,
    }


def local_device(kind: str) -> tuple[torch.device, str]:
    """This process's device (LOCAL_RANK's GPU for "cuda", else the CPU) and its backend."""
    if kind == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def build_result(
    args: argparse.Namespace, engine: Engine, proof: Proof, measured: Measured
) -> dict[str, Any]:
    world = len(measured.ranks)
    timed = measured.times[args.warmup :]
    elapsed = sum(timed)
    global_batch = args.batch * engine.replicas
    tokens_per_s = global_batch * args.seq_len * len(timed) / elapsed
    params, matmul_params = param_counts(args.vocab, args.seq_len, args.layers, args.d_model)
    head_dim = args.d_model // args.heads
    fpt = flops_per_token(matmul_params, args.layers, args.heads, head_dim, args.seq_len)
    mfu = None
    if args.peak_tflops:
        mfu = tokens_per_s * fpt / (world * args.peak_tflops * 1e12)
    device = measured.device
    return {
        "schema": SCHEMA,
        "workload": "train",
        "engine": engine.name,
        "zero_stage": engine.zero_stage,
        "strategy": engine.strategy,
        # The pipeline's layout; null for the data-parallel strategies.
        "schedule": None,
        "micro_batches": None,
        "stages": None,
        "stages_per_rank": None,
        "pipeline_ranks": None,
        "stage_split": None,
        "stage_blocks": None,
        "stage_cost_share": None,
        "stage_param_share": None,
        "stage_pieces_s": None,
        "stage_time_s": None,
        **engine.describe(),
        "data_parallel": engine.replicas,
        "started_at": measured.started.isoformat(),
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "world_size": world,
        "nnodes": len({r["node"] for r in measured.ranks}),
        "procs_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        "backend": measured.backend,
        "device": device.type,
        "device_name": device_name(device),
        "dtype": args.dtype,
        **versions(device),
        "mode": args.mode,
        "model": {
            "preset": args.preset,
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
        # every timed step, in order (rank 0's clock; DDP's ranks wait for each other every
        # step): the report's statistics and their confidence intervals come from these
        "step_times_s": [round(seconds, 7) for seconds in timed],
        "tokens_per_s": tokens_per_s,
        "samples_per_s": global_batch * len(timed) / elapsed,
        "flops_per_token": fpt,
        "peak_tflops": args.peak_tflops,
        "mfu": mfu,
        "loss": {"first": measured.losses[0], "last": measured.losses[-1]},
        "peak_memory_bytes": measured.peak_memory[0],
        "peak_memory_max_bytes": max(measured.peak_memory),
        "communication": {
            "backend": measured.backend,
            "allreduce_ok": measured.allreduce_ok,
            "initial_params_differed": proof.initial_params_differed,
            "params_in_sync": proof.params_in_sync and measured.allreduce_ok,
            "max_divergence": proof.max_divergence,
            "initial_divergence": proof.initial_divergence,
            "initial_fingerprints": proof.initial_fingerprints,
            "final_fingerprints": proof.final_fingerprints,
            "proof": proof.kind,
            "checks": [check.as_json() for check in proof.checks],
            "ok": proof.ok and measured.allreduce_ok,
        },
        "busbw": measured.busbw,
        # CPU steal and other load on each node over the timed steps, and each rank's compute
        # alone (the straggler probe); the report judges them (docs/report.md "Noise")
        "noise": measured.noise,
        "ranks": measured.ranks,
    }


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Whole or not at all, and not through a link: a reader never sees half a file. Where
    it cannot be written (a full disk), a line says so before the traceback: the node is not
    what failed, its disk is, and dtrun says that (runner/record/writefail.py ``unwritten``)."""
    try:
        write_atomic(path, (json.dumps(result, indent=2) + "\n").encode())
    except OSError as exc:
        where = folder_identity(path.absolute().parent)  # whose disk: here, or the node's
        print(f"{UNWRITTEN} {exc.errno} {where} {path.absolute()}", file=sys.stderr, flush=True)
        raise


def exit_now(code: int) -> NoReturn:
    """Leave without interpreter finalisation.

    With gloo, tearing down torch's C++ state at exit sometimes aborts ("terminate called without
    an active exception", SIGABRT) after the work is done and the result written: about 1 launch
    in 15 on a 2-core machine with torch 2.13. The process group is destroyed and every file
    closed by now; only the standard streams need flushing. A workload its host runs in its own
    process (runner/workloads/hosted.py) raises SystemExit instead: the host leaves so itself.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if hosted():
        raise SystemExit(code)
    os._exit(code)
