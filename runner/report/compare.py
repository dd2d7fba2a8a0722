"""`dtrun compare RUN_A RUN_B`: two runs side by side, from their saved results. Read-only.

Rows are matched by node count. Beside the figures it lists what differs between the two runs'
set-ups (launcher, size, model, versions, ...), since a ratio means little without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from runner.errors import UsageError
from runner.report.build import Report
from runner.report.results import TrainResult

COMPARE_SCHEMA = "dtrun.compare/1"


@dataclass(frozen=True)
class CompareRow:
    nodes: int
    a: float | None  # tokens/s (training) or busbw in GB/s (all-reduce); None: not measured
    b: float | None
    ratio: float | None  # b / a
    a_efficiency: float | None
    b_efficiency: float | None
    a_busbw: float | None  # training: the probe's busbw at the gradient size
    b_busbw: float | None


@dataclass(frozen=True)
class Comparison:
    a: str  # run ids
    b: str
    workload: str
    metric: str  # what a and b measure
    rows: tuple[CompareRow, ...]
    differences: tuple[tuple[str, str, str], ...]  # (what, in A, in B)

    def to_json(self) -> dict[str, Any]:
        return {"schema": COMPARE_SCHEMA, **asdict(self)}


def _figures(report: Report) -> dict[int, tuple[float, float | None, float | None]]:
    """node count -> (main figure, efficiency, busbw)."""
    if report.workload == "allreduce":
        return {row.nodes: (row.busbw, None, None) for row in report.busbw_rows}
    return {row.nodes: (row.tokens_per_s, row.efficiency, row.busbw) for row in report.rows}


def _setup(report: Report) -> dict[str, str]:
    """The facts of a run's set-up worth comparing, as text."""
    manifest = report.manifest
    bench: Mapping[str, Any] = manifest["bench"]
    facts: dict[str, str] = {
        "launcher": str(bench.get("launcher")),
        "cluster": str(manifest["inventory"].get("source")),
        "size": str(manifest["inventory"].get("size")),
        "image": str(manifest.get("image")),
        "processes per node": str(bench.get("procs_per_node")),
        "dtrun": str(manifest.get("dtrun_version")),
    }
    if report.workload == "allreduce":
        facts["all-reduce"] = ", ".join(f"{k} {v}" for k, v in bench["allreduce"].items())
    else:
        facts["mode"] = str(bench.get("mode"))
        facts["model"] = ", ".join(f"{k} {v}" for k, v in bench["model"].items())
        facts["batch per process"] = str(bench.get("batch"))
        facts["steps"] = f"{bench.get('steps')} ({bench.get('warmup')} warm-up)"
        facts["ZeRO stage (deepspeed)"] = str(bench.get("launch", {}).get("zero_stage"))
        strategy = bench.get("strategy")
        if strategy:  # as given on the command line; the result below says what ran
            facts["strategy options"] = ", ".join(f"{k} {v}" for k, v in strategy.items())
    git = manifest.get("git")
    if git:
        facts["git revision"] = git["revision"][:12] + (" (dirty)" if git["dirty"] else "")
    first = report.first
    if first is not None:
        facts["device"] = f"{first.device} ({first.device_name})"
        facts["torch on the nodes"] = first.torch_version
        facts["NCCL on the nodes"] = str(first.nccl_version)
        facts["dtype"] = first.dtype
        if isinstance(first, TrainResult):
            facts["engine"] = first.engine
            facts["strategy"] = first.strategy_text
    return facts


def compare(a: Report, b: Report) -> Comparison:
    if a.workload != b.workload:
        raise UsageError(
            f"cannot compare run {a.manifest['run_id']} ({a.workload}) with run "
            f"{b.manifest['run_id']} ({b.workload})",
            why="their figures measure different things (tokens/s against bus bandwidth)",
            fix="compare two training runs or two all-reduce runs",
        )
    fa, fb = _figures(a), _figures(b)
    rows = []
    for nodes in sorted(set(fa) | set(fb)):
        xa, ea, ba = fa.get(nodes, (None, None, None))
        xb, eb, bb = fb.get(nodes, (None, None, None))
        ratio = xb / xa if xa and xb is not None else None
        rows.append(CompareRow(nodes, xa, xb, ratio, ea, eb, ba, bb))
    sa, sb = _setup(a), _setup(b)
    differences = tuple(
        (key, sa.get(key, "-"), sb.get(key, "-"))
        for key in dict.fromkeys([*sa, *sb])
        if sa.get(key) != sb.get(key)
    )
    metric = "busbw (GB/s)" if a.workload == "allreduce" else "tokens/s"
    return Comparison(
        a.manifest["run_id"], b.manifest["run_id"], a.workload, metric, tuple(rows), differences
    )
