"""The check workload's result file (schema dtrun.check/1, runner/workloads/check.py), read
into typed figures: every value checked, a damaged file named with what is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtrun.record.readback import (
    ANY_OBJECT,
    COUNT,
    GBS,
    TEXT,
    WALL_SECONDS,
    WHOLE,
    list_of,
    nullable,
    obj,
    one_of,
    ranged,
    read_record,
)
from dtrun.spec.text import plural

SCHEMA = "dtrun.check/1"
# a GPU row's longest text: nvidia-smi's error, cut to 300 (runner/workloads/check_measure.py)
GPU_TEXT = 300


def _gpu_row(value: Any, where: str) -> str | None:
    """A GPU's row as nvidia-smi's CSV gives it: every value text, none long. A number was a
    TypeError in gpu_problems, 4,000 hex digits a ValueError (str() of its count)."""
    problem = ANY_OBJECT(value, where)
    for key, item in value.items() if problem is None else ():
        inner = f"{where}.{key}"
        problem = TEXT(item, inner)
        if problem is None and len(item) > GPU_TEXT:
            problem = (
                f"'{inner}' is text of {len(item):,} characters, more than nvidia-smi's {GPU_TEXT}"
            )
        if problem is not None:
            return problem
    return problem


# What a machine can measure: -1e308 GFLOP/s flagged a node with a 300-digit percentage
GFLOPS = ranged("a number", 0, 1e9, "GFLOP/s: none to a million TFLOP/s", int, float)
_GROUP = obj({"nodes": list_of(WHOLE, nonempty=True), "busbw_gbs": list_of(nullable(GBS))})
SHAPE = obj(
    {
        "schema": one_of(SCHEMA),
        "device": one_of("cpu", "cuda"),
        "settings": ANY_OBJECT,
        "nodes": list_of(obj({"name": TEXT, "address": TEXT, "ranks": list_of(WHOLE)})),
        "ranks": list_of(
            obj(
                {"node": WHOLE, "compute_gflops": list_of(GFLOPS), "memory_gbs": list_of(GBS)},
                {
                    "gpus": nullable(list_of(_gpu_row)),
                    "cpu_wait_s": nullable(WALL_SECONDS),  # results before it: none
                    "measured_s": WALL_SECONDS,
                    "cpu_threads": nullable(COUNT),  # results before it: none
                },
            )
        ),
        "inside": list_of(_GROUP),
        "rounds": list_of(list_of(_GROUP)),
        "bisection": list_of(list_of(_GROUP)),
    }
)


Series = tuple[float | None, ...]  # a figure per cycle; None: not measured


@dataclass(frozen=True)
class Group:
    nodes: tuple[int, ...]  # node indices
    busbw_gbs: Series  # per cycle; None: one process, nothing moved


@dataclass(frozen=True)
class Measured:
    """What the check workload measured, per node in node order."""

    device: str
    names: tuple[str, ...]  # the inventory's node names (DTRUN_NODE_NAME)
    procs: tuple[int, ...]  # processes per node
    compute: tuple[tuple[Series, ...], ...]  # each node's processes' GFLOP/s (a GPU each)
    memory: tuple[tuple[Series, ...], ...]  # each node's processes' copy GB/s
    gpus: tuple[tuple[Mapping[str, str], ...] | None, ...]  # nvidia-smi's rows; None: no tool
    inside: tuple[Series, ...]  # in-node all-reduce busbw
    rounds: tuple[tuple[Group, ...], ...]  # the pairs, round by round
    bisection: tuple[tuple[Group, ...], ...]  # the whole fleet, halves, quarters, ...
    settings: Mapping[str, Any]
    addresses: tuple[str, ...] = ()  # each node's address, as its rank 0 found it
    # each node's seconds its threads waited, runnable, for a CPU per second of the cycles (its
    # most-waiting process; runner/workloads/check_measure.py cpu_waits); None: older results
    cpu_wait: tuple[float | None, ...] = ()
    # the same over its compute threads (torch's): every thread's wait per compute thread
    cpu_wait_thread: tuple[float | None, ...] = ()


def _groups(rows: list[dict[str, Any]]) -> tuple[Group, ...]:
    return tuple(Group(tuple(row["nodes"]), tuple(row["busbw_gbs"])) for row in rows)


def parse(data: dict[str, Any]) -> Measured:
    names = tuple(node["name"] for node in data["nodes"])
    count = len(names)
    compute: list[list[Series]] = [[] for _ in names]
    memory: list[list[Series]] = [[] for _ in names]
    gpus: list[tuple[Mapping[str, str], ...] | None] = [None] * count
    waits: list[float | None] = [None] * count
    per_thread: list[float | None] = [None] * count
    _check_groups(data, count)
    for rank in data["ranks"]:
        node = rank["node"]
        if not 0 <= node < count:
            raise ValueError(f"a rank names node {node} of {count}")
        compute[node].append(tuple(float(v) for v in rank["compute_gflops"]))
        memory[node].append(tuple(float(v) for v in rank["memory_gbs"]))
        if rank.get("gpus") is not None:
            gpus[node] = tuple(rank["gpus"])
        if rank.get("cpu_wait_s") is not None and rank.get("measured_s"):
            share = float(rank["cpu_wait_s"]) / float(rank["measured_s"])
            waits[node] = max(share, waits[node] or 0.0)
            if rank.get("cpu_threads"):
                share /= int(rank["cpu_threads"])
                per_thread[node] = max(share, per_thread[node] or 0.0)
    return Measured(
        device=data["device"],
        names=names,
        procs=tuple(len(node["ranks"]) for node in data["nodes"]),
        compute=tuple(tuple(values) for values in compute),
        memory=tuple(tuple(values) for values in memory),
        gpus=tuple(gpus),
        inside=tuple(group.busbw_gbs for group in _groups(data["inside"])),
        rounds=tuple(_groups(pairs) for pairs in data["rounds"]),
        bisection=tuple(_groups(level) for level in data["bisection"]),
        settings=data["settings"],
        addresses=tuple(node["address"] for node in data["nodes"]),
        cpu_wait=tuple(waits),
        cpu_wait_thread=tuple(per_thread),
    )


def _check_groups(data: dict[str, Any], count: int) -> None:
    """Every group's nodes among the ``count`` nodes, and one 'inside' group a node, as the
    workload writes them: a node 9 of 4 was an IndexError, and -1 blamed the last node."""
    if len(data["inside"]) != count:
        held = plural(len(data["inside"]), "group")
        raise ValueError(f"'inside' holds {held} for {plural(count, 'node')}, one a node")
    levels = [("inside", data["inside"])]
    levels += [(f"rounds[{i}]", pairs) for i, pairs in enumerate(data["rounds"])]
    levels += [(f"bisection[{i}]", level) for i, level in enumerate(data["bisection"])]
    for where, groups in levels:
        for group in groups:
            if stray := [node for node in group["nodes"] if not 0 <= node < count]:
                raise ValueError(f"a group of '{where}' names node {stray[0]} of {count}")


def load(path: Path) -> Measured:
    """The result rank 0 wrote; a damaged one is a DamagedRunError naming what is wrong."""
    from dtrun.record.readback import damaged

    data = read_record(path, SHAPE, missing="rank 0 of the check writes it", root=path.parent)
    try:
        return parse(data)
    except ValueError as exc:
        raise damaged(path, str(exc)) from None
