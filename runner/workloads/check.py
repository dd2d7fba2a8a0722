"""`dtrun check`'s workload: every node's compute, memory and GPUs, then all-reduce inside each
node, between pairs of nodes round by round, and over halves, quarters, ... of the fleet.

One launch over every node. Rank 0 writes one JSON result (schema dtrun.check/1,
docs/check.md); dtrun judges it (runner/check/). Every figure is taken once per cycle
(``--cycles``), so each can be set beside its peers of the same cycle:

- compute: a fixed square matrix multiply (GFLOP/s), memory: a copy of ``--memory`` bytes,
  read and written (GB/s); the best of ``--repeats`` timings of at least ``--window`` seconds
  (check_measure.py);
- all-reduce busbw, nccl-tests' way (allreduce.py): inside each node (2 or more processes), each
  pair of the rounds and each bisection group (check_plan.py).

With ``--one-at-a-time`` (the default on CPUs) one node (one pair, one group) is measured while
the others wait at a barrier: nodes that share a machine's cores (the embedded cluster, loopback
sshd nodes) then cannot slow each other down. On GPUs each GPU is its own and all run at once.

Imports only torch, the standard library and its sibling modules: staged onto the nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dtrun.workloads.allreduce import bus_factor
from dtrun.workloads.check_measure import (
    AllReduce,
    copy,
    cpu_waits,
    gloo_group,
    gpu_health,
    matmul,
    waited_s,
)
from dtrun.workloads.check_plan import bisection_levels, pair_rounds
from dtrun.workloads.result import device_name, local_device, rank_info, versions, write_result

SCHEMA = "dtrun.check/1"
EXECUTOR_HOST = "DTRUN_EXECUTOR_ADDR"  # the Spark executor's host, where the task knows it
SETTINGS = (
    "matrix", "memory", "message", "window", "repeats", "cycles", "more_cycles", "suspect",
    "one_at_a_time",
)  # fmt: skip
# each rank's figures in the result; cpu_wait_s over measured_s: its threads' time waiting for a
# CPU over the cycles (check_measure.py cpu_waits), seconds; cpu_threads: torch's compute threads
RANK_KEYS = ("node", "compute_gflops", "memory_gbs", "gpus", "cpu_wait_s", "measured_s",
             "cpu_threads")  # fmt: skip
HEARTBEAT_S = 5.0  # each rank says this often how long it has waited on the others, or worked


class Watch:
    """Says, every HEARTBEAT_S, how long this rank has waited on the others and where, or how
    long it has worked since it last waited: a rank that stops (a process stopped, a host
    frozen) falls silent while the others go on saying, and one stuck in its own work says it
    has worked longer than any step takes. A check stopped at --timeout names their node
    (runner/check/stopped.py, Progress)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank = rank
        self.waiting: tuple[str, float] | None = None  # where, since when: one value, one read
        self.worked_from = time.monotonic()  # when it last stopped waiting
        self.done = threading.Event()  # set: the thread ends
        say(f"dtrun: rank {rank} of {world} started")
        threading.Thread(target=self._say, daemon=True, name="dtrun-check-watch").start()

    @contextlib.contextmanager
    def at(self, where: str) -> Iterator[None]:
        """Waiting on the others at ``where``."""
        self.waiting = (where, time.monotonic())
        try:
            yield
        finally:
            self.worked_from = time.monotonic()
            self.waiting = None

    def _say(self) -> None:
        while not self.done.wait(HEARTBEAT_S):
            waiting, worked_from = self.waiting, self.worked_from
            now = time.monotonic()
            if waiting is not None:
                say(f"dtrun: rank {self.rank} has waited {now - waiting[1]:.0f} s for the "
                    f"others at {waiting[0]}")  # fmt: skip
            else:
                say(f"dtrun: rank {self.rank} has worked {now - worked_from:.0f} s since it "
                    "last waited")  # fmt: skip


def say(line: str) -> None:
    """One line of the node log, whole: one write, not print's two (the Watch's thread too)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Fleet:
    """The ranks of each node, in node order (node i: the i-th distinct node by lowest rank).

    A node is the host: where a rank knows its Spark executor's host (EXECUTOR_HOST, set by
    runner/engines/spark/node.py), the tasks Spark put on one host are one node, its processes,
    as a host's GPUs are (a node's name is then its first task's); else the node dtrun launched
    it on (DTRUN_NODE_NAME)."""

    def __init__(self, infos: Sequence[dict[str, Any]], me: int) -> None:
        self.names: list[str] = []
        self.addresses: list[str] = []
        self.ranks: list[list[int]] = []
        keys: list[str] = []
        for info in infos:
            key = info.get("host") or info["node"]
            if key not in keys:
                keys.append(key)
                self.names.append(info["node"])
                self.addresses.append(info["address"])
                self.ranks.append([])
            self.ranks[keys.index(key)].append(info["rank"])
        self.mine = next(i for i, ranks in enumerate(self.ranks) if me in ranks)

    def ranks_of(self, nodes: Sequence[int]) -> list[int]:
        return sorted(rank for node in nodes for rank in self.ranks[node])


class Groups:
    """Disjoint groups of nodes (one round of pairs, one bisection level), created once: only
    their members create them, and a group of one process moves nothing."""

    def __init__(self, fleet: Fleet, groups: Sequence[Sequence[int]], args: argparse.Namespace,
                 device: torch.device, label: str) -> None:  # fmt: skip
        self.groups = [list(group) for group in groups]
        self.label = label  # what the node logs call them: "pair round 2"
        self.ops: list[AllReduce | None] = []
        address = fleet.addresses[fleet.mine]
        bare = device.type == "cpu" and bool(address)  # gloo on the node's own address
        for group in self.groups:
            ranks = fleet.ranks_of(group)
            if fleet.mine not in group or len(ranks) < 2:
                self.ops.append(None)
                continue
            if bare:
                name = "-".join(map(str, ranks))
                handle = gloo_group(ranks, name, address, args.timeout)
            else:
                handle = dist.new_group(ranks, use_local_synchronization=True)
            self.ops.append(AllReduce(handle, args.message, device, bare))
        # this rank's seconds per all-reduce in each group, one list per cycle
        self.seconds: list[list[float | None]] = []

    def cycle(self, args: argparse.Namespace, watch: Watch) -> None:
        row: list[float | None] = []
        with watch.at(f"{self.label}'s all-reduces, cycle {len(self.seconds) + 1}"):
            for op in self.ops:
                if args.one_at_a_time:
                    dist.barrier()
                row.append(op.seconds(args.window, args.repeats) if op is not None else None)
            dist.barrier()
        self.seconds.append(row)


def node_cycle(fleet: Fleet, args: argparse.Namespace, kernels: dict[str, Any],
               figures: dict[str, list[float]], watch: Watch) -> None:  # fmt: skip
    """This rank's compute and memory for one cycle; one node at a time when asked."""
    cycle = len(next(iter(figures.values()))) + 1
    for node in range(len(fleet.names)) if args.one_at_a_time else [fleet.mine]:
        whose = f"{fleet.names[node]}'s" if args.one_at_a_time else "the"
        with watch.at(f"the barrier before {whose} compute, cycle {cycle}"):
            dist.barrier()
        if node == fleet.mine:
            for key, kernel in kernels.items():
                figures[key].append(kernel.rate(args.window, args.repeats))
    with watch.at(f"the barrier after the compute, cycle {cycle}"):
        dist.barrier()


def busbw(size: int, seconds: Sequence[float], members: int) -> float:
    """nccl-tests' busbw from the members' seconds per operation (averaged, as -a 1 does)."""
    return size / 1e9 / (sum(seconds) / len(seconds)) * bus_factor(members)


def group_figures(fleet: Fleet, groups: Groups, gathered: Sequence[Sequence[Sequence[Any]]],
                  size: int) -> list[dict[str, Any]]:  # fmt: skip
    """Each group's busbw per cycle from its members' seconds (``gathered[rank][cycle][g]``)."""
    out = []
    for position, group in enumerate(groups.groups):
        ranks = fleet.ranks_of(group)
        cycles: list[float | None] = []
        for cycle in range(len(gathered[0])):
            seconds = [gathered[rank][cycle][position] for rank in ranks]
            timed = [value for value in seconds if value is not None]
            cycles.append(busbw(size, timed, len(ranks)) if len(timed) == len(ranks) > 1 else None)
        out.append({"nodes": group, "busbw_gbs": cycles})
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--matrix", type=int, default=512, help="n of the n x n multiply")
    parser.add_argument("--memory", type=int, default=64 << 20, help="bytes copied")
    parser.add_argument("--message", type=int, default=4 << 20, help="all-reduce bytes")
    parser.add_argument("--window", type=float, default=0.15, help="seconds a timing lasts")
    parser.add_argument("--repeats", type=int, default=2, help="timings a figure; the best")
    parser.add_argument("--cycles", type=int, default=5, help="every figure, this many times")
    parser.add_argument(
        "--more-cycles", type=int, default=5,
        help="this many more when a figure stands --suspect below its peers after --cycles",
    )  # fmt: skip
    parser.add_argument("--suspect", type=float, default=0.2)
    parser.add_argument("--one-at-a-time", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--timeout", type=int, default=600, help="collective timeout, seconds")
    parser.add_argument("--out", default="result.json")
    args = parser.parse_args(argv)
    if args.one_at_a_time is None:
        args.one_at_a_time = args.device == "cpu"
    return args


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def suspect(series: Sequence[Sequence[float | None]], share: float) -> bool:
    """Whether any item's median ratio to the others of its cycle is ``share`` below: worth
    more cycles before dtrun judges (the same answer on every rank: they read the same data)."""
    for index, values in enumerate(series):
        ratios = []
        for cycle, value in enumerate(values):
            peers = [one[cycle] for i, one in enumerate(series) if i != index and cycle < len(one)]
            present = [p for p in peers if p is not None]
            if value is not None and present and _median(present) > 0:
                ratios.append(value / _median(present))
        if ratios and _median(ratios) < 1 - share:
            return True
    return False


def looks_slow(fleet: Fleet, every: Sequence[Groups], figures: dict[str, list[float]],
               args: argparse.Namespace, watch: Watch) -> bool:  # fmt: skip
    """Any node or group that looks slow so far, from every rank's figures."""
    with watch.at("the figures' exchange after the first cycles"):
        gathered = _gather({"figures": figures, "seconds": [g.seconds for g in every]})
    for key in figures:
        per_node = [
            [min(gathered[r]["figures"][key][c] for r in ranks) for c in range(len(figures[key]))]
            for ranks in fleet.ranks
        ]
        if suspect(per_node, args.suspect):
            return True
    for index, groups in enumerate(every):
        rows = group_figures(fleet, groups, [g["seconds"][index] for g in gathered], 1)
        if suspect([row["busbw_gbs"] for row in rows], args.suspect):
            return True
    return False


def _gather(value: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def run(args: argparse.Namespace) -> int:
    started = datetime.datetime.now(datetime.timezone.utc)
    device, backend = local_device(args.device)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    world = dist.get_world_size()
    watch = Watch(dist.get_rank(), world)
    try:
        return _check(args, started, device, backend, watch)
    finally:
        watch.done.set()  # a Spark rank goes on in this process


def _check(args: argparse.Namespace, started: datetime.datetime, device: torch.device,
           backend: str, watch: Watch) -> int:  # fmt: skip
    world = dist.get_world_size()
    with watch.at("the start, as every rank joins"):
        fleet = Fleet(
            _gather({**rank_info(), "host": os.environ.get(EXECUTOR_HOST, "")}), dist.get_rank()
        )
    count = len(fleet.names)
    rounds, levels = pair_rounds(count), bisection_levels(count)
    if dist.get_rank() == 0:  # every rank has joined: what the node logs say while it measures
        print(f"dtrun: checking {count} nodes ({world} processes)", flush=True)
    layouts: list[list[list[int]]] = [[[node] for node in range(count)]]
    layouts += [[list(pair) for pair in pairs] for pairs in rounds] + levels
    labels = ["in-node", *(f"pair round {i + 1}" for i in range(len(rounds))),
              *(f"bisection level {i}" for i in range(len(levels)))]  # fmt: skip
    with watch.at("the groups' set-up"):
        every = [Groups(fleet, groups, args, device, label)
                 for groups, label in zip(layouts, labels, strict=True)]  # fmt: skip
    kernels = {"compute_gflops": matmul(args.matrix, device),
               "memory_gbs": copy(args.memory, device)}  # fmt: skip
    figures: dict[str, list[float]] = {key: [] for key in kernels}
    cycles = args.cycles
    waits, began = cpu_waits(), time.perf_counter()  # what held this rank from its CPU
    for cycle in range(args.cycles + args.more_cycles):
        if cycle == args.cycles:
            if not looks_slow(fleet, every, figures, args, watch):
                break
            cycles += args.more_cycles
        node_cycle(fleet, args, kernels, figures, watch)
        for groups in every:
            groups.cycle(args, watch)
    first = fleet.ranks[fleet.mine][0] == dist.get_rank()  # the node's first process
    mine = {"node": fleet.mine, **figures, "gpus": gpu_health() if first else None,
            "seconds": [groups.seconds for groups in every],
            "cpu_wait_s": waited_s(waits, cpu_waits()),
            "measured_s": time.perf_counter() - began,
            "cpu_threads": torch.get_num_threads()}  # fmt: skip
    with watch.at("the figures' gathering"):
        gathered = _gather(mine)
    if dist.get_rank() == 0:
        found = [
            group_figures(fleet, groups, [g["seconds"][index] for g in gathered], args.message)
            for index, groups in enumerate(every)
        ]
        result = {
            "schema": SCHEMA,
            "workload": "check",
            "started_at": started.isoformat(),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "world_size": world,
            "backend": backend,
            "device": device.type,
            "device_name": device_name(device),
            **versions(device),
            "settings": {key: getattr(args, key) for key in SETTINGS},
            "nodes": [
                {"name": name, "address": address, "ranks": fleet.ranks[index]}
                for index, (name, address) in enumerate(
                    zip(fleet.names, fleet.addresses, strict=True)
                )
            ],
            "ranks": [{key: g[key] for key in RANK_KEYS} for g in gathered],
            "inside": found[0],
            "rounds": found[1 : 1 + len(rounds)],
            "bisection": found[1 + len(rounds) :],
        }
        write_result(Path(args.out), result)
        print(
            f"dtrun: checked {count} nodes ({world} processes) in {cycles} cycles: "
            f"{len(rounds)} pair rounds, {len(levels)} bisection levels; wrote {args.out}",
            flush=True,
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from dtrun.workloads.result import exit_now

    exit_now(run(parse_args()))
