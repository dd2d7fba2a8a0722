"""A run directory of a sweep up to 1,024 nodes, grown from a real small run's records.

benchmarks/scale_cost.py times `dtrun report` and `dtrun compare` on it. The real run is a
`dtrun bench --nodes 1,2` sweep on the embedded cluster (tests/data/sweeps/repeat2-noisy by
default: its 2-node points give every per-node record, a rank, a noise probe, a parameter
fingerprint, a node's result). Each point nN/rR of the grown run (N = 1, 2, 4, ... up to the
largest) is the real point of its repeat R with:

- every per-node list (ranks, the noise check's nodes and probes, the parameter fingerprints,
  the sweep's node results, the manifest's inventory) N entries long, entry i the real entry
  i mod 2 renamed node-i on the i-th loopback address, each node its own machine, as on a
  real cluster (on the embedded one every node shares one);
- the real step times stretched by 1 + ``slope`` x log2(N) (``slope`` 0.04 for the first run
  and 0.06 for the one it is compared with), so efficiency falls with N as it would, and the
  throughput, bus bandwidth and world-size figures recomputed from them;
- node i's log and launch script the real node's (i mod 2) with the names changed, where the
  real run kept them (tests/data/sweeps keeps only what `dtrun report` reads).

The report and plots are then rebuilt by `dtrun report`, which is what is timed.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sshd import address

REBUILT = ("summary.json", "report.md", "report.html", "efficiency.png", "throughput.png")


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _named(text: str, real: int, node: int) -> str:
    """The real node's text as node ``node``'s: its name and its loopback address."""
    return text.replace(f"node-{real}", f"node-{node}").replace(
        f"127.0.0.{real + 2}", address(node + 2)
    )


def _stretch(result: dict[str, Any], nodes: int, slope: float) -> dict[str, Any]:
    grown = copy.deepcopy(result)
    factor = 1 + slope * math.log2(nodes)
    times = [t * factor for t in result["step_times_s"]]
    mean = statistics.fmean(times)
    grown["step_times_s"] = times
    grown["step_time_s"] = {
        "p50": statistics.median(times),
        "p90": sorted(times)[math.ceil(0.9 * len(times)) - 1],
        "mean": mean,
        "min": min(times),
        "max": max(times),
    }
    procs = nodes * result["procs_per_node"]
    grown.update(world_size=procs, nnodes=nodes, data_parallel=procs)
    if result.get("mode") == "weak":
        grown["global_batch"] = result["batch_per_proc"] * procs
    samples = grown["global_batch"] / mean
    grown["samples_per_s"] = samples
    grown["tokens_per_s"] = samples * result["model"]["seq_len"]
    busbw = grown.get("busbw")
    if busbw and busbw.get("rows"):
        bus_factor = 2 * (procs - 1) / procs if procs > 1 else 1.0
        busbw["bus_factor"] = bus_factor
        for row in busbw["rows"]:
            for side in ("out_of_place", "in_place"):
                if side in row:
                    row[side]["busbw"] = row[side]["algbw"] * bus_factor
    return grown


def _per_node(result: dict[str, Any], nodes: int) -> None:
    real = result["ranks"]
    result["ranks"] = [
        dict(
            real[i % len(real)],
            rank=i,
            group_rank=i,
            node=f"node-{i}",
            address=address(i + 2),
            pid=real[i % len(real)]["pid"] + i,
        )
        for i in range(nodes)
    ]
    comm = result.get("communication") or {}
    for key in ("initial_fingerprints", "final_fingerprints"):
        if comm.get(key):
            comm[key] = [comm[key][i % len(comm[key])] for i in range(nodes)]
    noise = result.get("noise") or {}
    if noise.get("nodes"):
        probes = noise["nodes"]
        noise["nodes"] = [
            dict(
                probes[i % len(probes)],
                node=f"node-{i}",
                machine=str(uuid.UUID(int=i + 1)),
                nodes_on_machine=[f"node-{i}"],
            )
            for i in range(nodes)
        ]
    probe = noise.get("probe") or {}
    if probe.get("rank_s"):
        probe["rank_s"] = [probe["rank_s"][i % len(probe["rank_s"])] for i in range(nodes)]


def _node_files(real_dir: Path, point: Path, nodes: int) -> None:
    """Node i's log and script: the real node's (i mod the real count), renamed."""
    texts = {
        (real, suffix): (real_dir / f"node-{real}{suffix}").read_text()
        for real in range(2)
        for suffix in (".log", ".sh")
        if (real_dir / f"node-{real}{suffix}").exists()
    }
    reals = max(1, len({real for real, _ in texts}))
    for i in range(nodes):
        for (real, suffix), text in texts.items():
            if real == i % reals:
                (point / f"node-{i}{suffix}").write_text(_named(text, real, i))


def grow(real: Path, out: Path, largest: int = 1024, slope: float = 0.04) -> Path:
    """Write the grown run directory ``out`` from the real run directory ``real``."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(real, out, ignore=shutil.ignore_patterns("n*", "plan", *REBUILT))
    counts = [2**k for k in range(int(math.log2(largest)) + 1)]
    runs = _load(real / "runs.json")
    by_point = {(entry["nodes"], entry["repeat"]): entry for entry in runs["runs"]}
    repeats = sorted({repeat for _, repeat in by_point})
    grown_runs = []
    for nodes in counts:
        real_nodes = 1 if nodes == 1 else 2
        for repeat in repeats:
            entry = by_point[(real_nodes, repeat)]
            real_point = real / entry["run_dir"]
            point = out / f"n{nodes}" / f"r{repeat}"
            point.mkdir(parents=True)
            result = _stretch(_load(real_point / "result.json"), nodes, slope)
            _per_node(result, nodes)
            _dump(point / "result.json", result)
            _node_files(real_point, point, nodes)
            results = entry["node_results"]
            grown_runs.append(
                dict(
                    entry,
                    nodes=nodes,
                    run_dir=f"n{nodes}/r{repeat}",
                    node_results=[
                        dict(
                            results[i % len(results)],
                            node=f"node-{i}",
                            address=address(i + 2),
                            log_path=str(point / f"node-{i}.log"),
                        )
                        for i in range(nodes)
                    ],
                )
            )
        plan = out / "plan" / f"n{nodes}"
        plan.mkdir(parents=True)
        _node_files(real / "plan" / f"n{real_nodes}", plan, nodes)
    _dump(out / "runs.json", dict(runs, runs=grown_runs))
    manifest = _load(real / "manifest.json")
    inventory = manifest["inventory"]["nodes"]
    manifest["inventory"]["nodes"] = [
        dict(inventory[i % len(inventory)], name=f"node-{i}", address=address(i + 2))
        for i in range(largest)
    ]
    manifest["bench"]["node_counts"] = counts
    manifest["run_id"] = out.name
    _dump(out / "manifest.json", manifest)
    return out


def grow_check(real: dict[str, Any], nodes: int) -> dict[str, Any]:
    """A `dtrun check` result (schema dtrun.check/1) for ``nodes`` nodes from a real one: node
    i's figures the real node's (i mod the real count), renamed; the pair rounds and bisection
    levels the check workload would run at ``nodes`` (check_plan.py), each pair's and group's
    figures a real pair's and group's (taken in turn)."""
    from dtrun.workloads.check_plan import bisection_levels, pair_rounds

    count = len(real["nodes"])
    pairs = [group for rounds in real["rounds"] for group in rounds]
    groups = [group for level in real["bisection"] for group in level] or pairs
    ranks_of = {node: [r for r in real["ranks"] if r["node"] == node] for node in range(count)}
    ranks: list[dict[str, Any]] = []
    grown_nodes: list[dict[str, Any]] = []
    for i in range(nodes):
        mine = []
        for rank in ranks_of[i % count]:
            mine.append(len(ranks))
            ranks.append(dict(rank, node=i))
        grown_nodes.append({"name": f"node-{i}", "address": address(i + 2), "ranks": mine})

    def like(index: int, group: list[int], real_groups: list[dict[str, Any]]) -> dict[str, Any]:
        return {"nodes": group, "busbw_gbs": real_groups[index % len(real_groups)]["busbw_gbs"]}

    rounds = [
        [like(k, list(pair), pairs) for k, pair in enumerate(one)] for one in pair_rounds(nodes)
    ]
    levels = [
        [like(k, group, groups) for k, group in enumerate(level)]
        for level in bisection_levels(nodes)
    ]
    inside = [like(i, [i], real["inside"]) for i in range(nodes)] if real["inside"] else []
    return dict(
        real, nodes=grown_nodes, ranks=ranks, inside=inside, rounds=rounds, bisection=levels
    )
