"""The timings of `dtrun check`'s workload (check.py): a matrix multiply, a copy, an all-reduce
within a group, and the GPUs' health as nvidia-smi and the kernel log report it.

Each timing lasts at least ``window`` seconds (the repetitions are fixed once, on the first
look): a CPU quota (a cgroup's cpu.cfs_quota_us over its 100 ms period) only shows over a window
that long, and a shorter one would see a throttled node run at full speed until its quota is
spent. Imports only torch and the standard library: staged onto the nodes.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# nvidia-smi's fields for a GPU's health (nvidia-smi --help-query-gpu): uncorrectable ECC errors
# since boot, retired pages pending, and the active clock-event reasons as a bit mask.
GPU_FIELDS = (
    "index,name,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "clocks_event_reasons.active,temperature.gpu,clocks.sm,clocks.max.sm"
)
MAX_REPS = 10_000


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], object], device: torch.device) -> float:
    start = time.perf_counter()
    run()
    sync(device)
    return time.perf_counter() - start


def cpu_waits() -> dict[int, int]:
    """Each thread of this process: the nanoseconds it has waited, runnable, for a CPU
    (/proc/<pid>/task/<tid>/schedstat's second field, run_delay; Documentation/scheduler/
    sched-stats.rst). A CPU quota's throttling counts there, and so does another process on
    the cores: a node held back part of the time shows it, where its best-of timings may not.
    Empty where there is no /proc or no schedstats."""
    waits: dict[int, int] = {}
    try:
        tasks = list(Path(f"/proc/{os.getpid()}/task").iterdir())
    except OSError:
        return waits
    for task in tasks:
        try:
            waits[int(task.name)] = int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return waits


def waited_s(before: dict[int, int], after: dict[int, int]) -> float | None:
    """Seconds this process's threads waited for a CPU between two ``cpu_waits``; a thread
    born since counts its whole wait. None without schedstats."""
    if not after:
        return None
    return max(0.0, sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9)


def reps_for(seconds: float, window: float) -> int:
    """Repetitions of a ``seconds``-long step that fill ``window``."""
    return max(1, min(MAX_REPS, math.ceil(window / max(seconds, 1e-9))))


class Kernel:
    """A timed step (a multiply, a copy) with its work, repeated to fill the window."""

    def __init__(self, step: Callable[[], object], work: float, device: torch.device) -> None:
        self.step, self.work, self.device = step, work, device
        self.reps = 0  # set on the first measurement

    def rate(self, window: float, repeats: int) -> float:
        """Work per second (GFLOP/s, GB/s): the best of ``repeats`` timings."""
        if not self.reps:
            timed(self.step, self.device)  # warm: allocations, page faults, kernels loaded
            self.reps = reps_for(timed(self.step, self.device), window)

        def run() -> None:
            for _ in range(self.reps):
                self.step()

        best = min(timed(run, self.device) for _ in range(repeats))
        return self.work * self.reps / best / 1e9


def matmul(n: int, device: torch.device) -> Kernel:
    """An n x n multiply (bfloat16 on GPUs, float32 on CPUs); its work in FLOPs."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.rand(n, n, dtype=dtype, device=device)
    b = torch.rand(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)
    return Kernel(lambda: torch.matmul(a, b, out=out), 2.0 * n**3, device)


def copy(size: int, device: torch.device) -> Kernel:
    """A copy of ``size`` bytes; its work in bytes read and written."""
    src = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return Kernel(lambda: dst.copy_(src), 2.0 * src.numel() * 4, device)


def gloo_group(ranks: list[int], name: str, address: str, timeout_s: float) -> Any:
    """A gloo process group of ``ranks`` whose sockets bind ``address`` (this node's): gloo's
    default device binds the address the host name resolves to, the same for every simulated
    node of one machine, so traffic between them would never travel to a node's own address
    (where a slow link on that address shows). Only the members create it."""
    import datetime

    from torch.distributed import PrefixStore, ProcessGroupGloo  # type: ignore[attr-defined]

    options = ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._devices = [ProcessGroupGloo.create_device(hostname=address)]
    options._timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.distributed_c10d._get_default_store()
    rank = ranks.index(dist.get_rank())
    return ProcessGroupGloo(PrefixStore(f"dtrun-check/{name}", store), rank, len(ranks), options)


class AllReduce:
    """All-reduces of ``size`` bytes within a group this rank is a member of: a process group
    of torch.distributed (NCCL), or a bare gloo group (``gloo_group``)."""

    def __init__(self, group: Any, size: int, device: torch.device, bare: bool) -> None:
        self.group, self.device, self.bare = group, device, bare
        self.buffer = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)
        self.iters = 0  # set on the first measurement, the same on every member

    def _reduce(self, tensor: torch.Tensor, op: Any = None) -> None:
        if not self.bare:
            dist.all_reduce(
                tensor, op=op if op is not None else dist.ReduceOp.SUM, group=self.group
            )
            return
        options = dist.AllreduceOptions()
        options.reduceOp = op if op is not None else dist.ReduceOp.SUM  # type: ignore[assignment]
        self.group.allreduce([tensor], options).wait()

    def _barrier(self) -> None:
        if self.bare:
            self.group.barrier().wait()
        else:
            dist.barrier(group=self.group)

    def _op(self) -> None:
        self._reduce(self.buffer)

    def seconds(self, window: float, repeats: int) -> float:
        """This rank's best seconds per all-reduce, over ``repeats`` aligned timings."""
        if not self.iters:
            self._op()  # connections made, buffers registered
            took = torch.tensor([timed(self._op, self.device)], device=self.device)
            self._reduce(took, dist.ReduceOp.MAX)
            self.iters = reps_for(float(took.item()), window)
        best = math.inf
        for _ in range(repeats):
            self._barrier()  # every member starts together

            def run() -> None:
                for _ in range(self.iters):
                    self._op()

            best = min(best, timed(run, self.device))
        return best / self.iters


def _xid_count() -> int | None:
    """NVIDIA XID lines in the kernel log; None where it cannot be read (not root)."""
    try:
        text = subprocess.run(
            ["dmesg"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum("NVRM: Xid" in line for line in text.splitlines())


def gpu_health() -> list[dict[str, str]] | None:
    """Every GPU's health as nvidia-smi reports it, and the node's XID count (a row of its
    own); None where there is no nvidia-smi."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run(
            [tool, f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return [{"error": str(exc)[:300]}]
    names = GPU_FIELDS.split(",")
    rows = [
        dict(zip(names, (part.strip() for part in line.split(",")), strict=False))
        for line in out.splitlines()
        if line.strip()
    ]
    xid = _xid_count()
    if xid is not None:
        rows.append({"index": "node", "xid": str(xid)})
    return rows
