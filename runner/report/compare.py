"""`dtrun compare RUN_A RUN_B`: two runs side by side, from their saved results. Read-only.

Rows are matched by node count; training figures are at the median step time, with each run's
95% interval, and a difference is called a change only when the two intervals do not overlap
(runner/report/stats.py). Beside the figures it lists what differs between the two runs'
set-ups (launcher, size, model, versions, ...), since a ratio means little without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from runner.errors import UsageError
from runner.report.build import Report
from runner.report.results import TrainResult

COMPARE_SCHEMA = "dtrun.compare/2"
WITHIN_NOISE = "within noise"


@dataclass(frozen=True)
class Figures:
    """One run's figures at one node count, as `dtrun compare` shows them."""

    value: float  # tokens/s at the median step (training) or busbw in GB/s (all-reduce)
    low: float | None = None  # the 95% interval of ``value`` (training; None: none)
    high: float | None = None
    efficiency: float | None = None
    efficiency_low: float | None = None
    efficiency_high: float | None = None
    verdict: str | None = None
    busbw: float | None = None  # training: the probe's busbw at the gradient size


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
    a_low: float | None = None  # training: each run's 95% interval of its tokens/s
    a_high: float | None = None
    b_low: float | None = None
    b_high: float | None = None
    # "higher" or "lower" (B against A) only when the two intervals do not overlap; else
    # "within noise"; None where either run has no interval at this node count
    change: str | None = None
    a_efficiency_low: float | None = None
    a_efficiency_high: float | None = None
    b_efficiency_low: float | None = None
    b_efficiency_high: float | None = None
    a_verdict: str | None = None
    b_verdict: str | None = None


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


def _figures(report: Report) -> dict[int, Figures]:
    if report.workload == "allreduce":
        return {row.nodes: Figures(row.busbw) for row in report.busbw_rows}
    return {
        row.nodes: Figures(
            row.tokens_per_s,
            row.tokens_per_s_low,
            row.tokens_per_s_high,
            row.efficiency,
            row.efficiency_low,
            row.efficiency_high,
            str(row.verdict),
            row.busbw,
        )
        for row in report.rows
    }


def change(a: Figures, b: Figures) -> str | None:
    """B against A: a change only when the two 95% intervals do not overlap."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return None
    if b.low > a.high:
        return "higher"
    if b.high < a.low:
        return "lower"
    return WITHIN_NOISE


# CompareRow's field for each run ("a" or "b" + suffix) -> the Figures attribute it holds
_SIDE = {"": "value", "_low": "low", "_high": "high", "_efficiency": "efficiency",
         "_efficiency_low": "efficiency_low", "_efficiency_high": "efficiency_high",
         "_verdict": "verdict", "_busbw": "busbw"}  # fmt: skip


def _row(nodes: int, a: Figures | None, b: Figures | None) -> CompareRow:
    sides = {
        side + suffix: None if figures is None else getattr(figures, attr)
        for side, figures in (("a", a), ("b", b))
        for suffix, attr in _SIDE.items()
    }
    return CompareRow(
        nodes=nodes,
        ratio=b.value / a.value if a is not None and b is not None and a.value else None,
        change=change(a, b) if a is not None and b is not None else None,
        **sides,
    )


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
    facts.update(_env(manifest))
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


def _env(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Each --env variable as recorded; a redacted value with its digest, so that two runs
    whose secrets differ are told apart by name and digest, never by value (manifests made
    before the digests show <redacted> alone)."""
    digests = manifest.get("env_digests")
    digests = digests if isinstance(digests, dict) else {}
    facts = {}
    for pair in manifest["bench"].get("env") or ():
        if not (isinstance(pair, list) and len(pair) == 2):
            continue
        name, shown = (str(part) for part in pair)
        digest = digests.get(name)
        facts[f"--env {name}"] = f"{shown} ({digest})" if isinstance(digest, str) else shown
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
    rows = [_row(nodes, fa.get(nodes), fb.get(nodes)) for nodes in sorted(set(fa) | set(fb))]
    sa, sb = _setup(a), _setup(b)
    differences = tuple(
        (key, sa.get(key, "-"), sb.get(key, "-"))
        for key in dict.fromkeys([*sa, *sb])
        if sa.get(key) != sb.get(key)
    )
    metric = "busbw (GB/s)" if a.workload == "allreduce" else "tokens/s at the median step"
    return Comparison(
        a.manifest["run_id"], b.manifest["run_id"], a.workload, metric, tuple(rows), differences
    )
