"""`dtrun compare RUN_A RUN_B`: two runs side by side, from their saved results. Read-only.

Rows are matched by node count; training figures are at the median step time, with each run's
interval (95%, or per-look for an --until-decided run), and a difference is called a change only
when the two intervals do not overlap (runner/report/stats.py) and both points were measured
quietly: where either run's report calls its point unreliable (its Noise section), the change is
"noisy (A)" and the reason is said. A run compared with itself is said to be one. Beside the
figures it lists what differs between the two runs' set-ups (launcher, size, model, versions,
...), since a ratio means little without it.

Only like with like: two runs of the same workload, and two runs of a user's program only
when their throughputs count the same unit (docs/your-training.md "Comparing runs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dtrun.errors import UsageError
from dtrun.redact import redact_var
from dtrun.report.build import Report
from dtrun.report.program import (
    STAND_INS,
    STRATEGY_TEXT,
    program_texts,
    sharding_text,
    timing_text,
)
from dtrun.report.reproduce import kept_cores
from dtrun.report.results import ProgramFacts, TrainResult
from dtrun.report.stats import CONFIDENCE, interval_level
from dtrun.spec.text import plural

COMPARE_SCHEMA = "dtrun.compare/3"
WITHIN_NOISE = "within noise"


@dataclass(frozen=True)
class Figures:
    """One run's figures at one node count, as `dtrun compare` shows them."""

    value: float  # the throughput at the median step (training, programs) or busbw in GB/s
    low: float | None = None  # the interval of ``value`` (training; None: none)
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
    a_low: float | None = None  # training: each run's interval of its tokens/s
    a_high: float | None = None
    b_low: float | None = None
    b_high: float | None = None
    # "higher" or "lower" (B against A) only when the two intervals do not overlap and both
    # points are reliable; "within noise" when they overlap; "noisy (A)", "noisy (B)" or
    # "noisy (A, B)" where a run's report calls its point unreliable; None where either run
    # has no interval at this node count
    change: str | None = None
    a_efficiency_low: float | None = None
    a_efficiency_high: float | None = None
    b_efficiency_low: float | None = None
    b_efficiency_high: float | None = None
    a_verdict: str | None = None
    b_verdict: str | None = None


@dataclass(frozen=True)
class NoisyPoint:
    """A point that one run's report calls unreliable (its Noise section), and why."""

    side: str  # "A" or "B"
    run_id: str
    nodes: int
    why: str  # the Noise section's first finding for the point


@dataclass(frozen=True)
class Comparison:
    a: str  # run ids
    b: str
    workload: str
    metric: str  # what a and b measure
    rows: tuple[CompareRow, ...]
    differences: tuple[tuple[str, str, str], ...]  # (what, in A, in B)
    unit: str = "tokens/s"  # a and b's: "tokens/s", a program's "samples/s", ..., or "GB/s"
    # the points of rows both runs measured that a run's report calls unreliable
    noisy: tuple[NoisyPoint, ...] = ()
    # why A and B are one run ("the same run directory", ...); None: two runs
    same_run: str | None = None
    # each run's target efficiency, its efficiencies shown on their side of it (training)
    a_target: float | None = None
    b_target: float | None = None
    # each run's intervals' level: "95%", or "per-look" for an --until-decided run's
    a_level: str = "95%"
    b_level: str = "95%"

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


def change(a: Figures, b: Figures, noisy: str = "") -> str | None:
    """B against A: a change only when the two intervals do not overlap and neither point
    was measured in noise; ``noisy``: which sides were ("A", "B", "A, B"), "" for none."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return None
    if noisy:
        return f"noisy ({noisy})"
    if b.low > a.high:
        return "higher"
    if b.high < a.low:
        return "lower"
    return WITHIN_NOISE


# CompareRow's field for each run ("a" or "b" + suffix) -> the Figures attribute it holds
_SIDE = {"": "value", "_low": "low", "_high": "high", "_efficiency": "efficiency",
         "_efficiency_low": "efficiency_low", "_efficiency_high": "efficiency_high",
         "_verdict": "verdict", "_busbw": "busbw"}  # fmt: skip


def _row(nodes: int, a: Figures | None, b: Figures | None, noisy: str = "") -> CompareRow:
    sides = {
        side + suffix: None if figures is None else getattr(figures, attr)
        for side, figures in (("a", a), ("b", b))
        for suffix, attr in _SIDE.items()
    }
    return CompareRow(
        nodes=nodes,
        ratio=b.value / a.value if a is not None and b is not None and a.value else None,
        change=change(a, b, noisy) if a is not None and b is not None else None,
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
        "image": _image(manifest.get("image")),
        "processes per node": str(bench.get("procs_per_node")),
        "dtrun": str(manifest.get("dtrun_version")),
    }
    if report.workload == "allreduce":
        facts["all-reduce"] = ", ".join(f"{k} {v}" for k, v in bench["allreduce"].items())
    elif report.workload == "program":
        facts.update(_program_setup(report))
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
    kept = kept_cores(manifest)
    if kept is not None:
        facts["cores"] = kept
    git = manifest.get("git")
    if git:
        facts["git revision"] = git["revision"][:12] + (" (dirty)" if git["dirty"] else "")
    first = report.first
    if first is not None:
        facts["device"] = f"{first.device} ({first.device_name})"
        facts["torch on the nodes"] = first.torch_version
        facts["NCCL on the nodes"] = str(first.nccl_version)
        facts["dtype"] = first.dtype
        if isinstance(first, TrainResult) and first.program is None:
            facts["engine"] = first.engine
            facts["strategy"] = first.strategy_text
    return facts


def _image(image: Any) -> str:
    """The nodes' image as the manifest records it: 'URN (where it came from)', or none."""
    if not isinstance(image, dict) or not image.get("urn"):
        return "none recorded"
    return f"{image['urn']} ({image.get('source')})"


def _facts(report: Report) -> ProgramFacts | None:
    first = report.first
    return first.program if isinstance(first, TrainResult) else None


def _program_setup(report: Report) -> dict[str, str]:
    """A program run's set-up: the program as recorded (secret-looking arguments redacted),
    its units, how its steps were timed, its warm-up, its parameters' sharding. The built-in
    workload's model, batch, steps and strategy do not apply: the program decides them."""
    bench, facts = report.manifest["bench"], _facts(report)
    texts = program_texts(bench, report.mode, facts)
    return {
        "mode": str(bench.get("mode")),
        "program": texts.line,
        "units": f"{texts.unit}/s ({texts.unit_why})",
        "timed": timing_text(bench, facts),
        "warm-up": f"the first {plural(max(int(bench.get('warmup') or 0), 1), 'step')} untimed",
        "parameters": sharding_text(facts),
        "all-reduce probe (--probe)": "on" if bench.get("probe") else "off",
        "strategy": STRATEGY_TEXT,
    }


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
        name, value = (str(part) for part in pair)
        shown = redact_var(name, value)  # as the manifest's writer: one written elsewhere may not
        digest = digests.get(name)
        facts[f"--env {name}"] = f"{shown} ({digest})" if isinstance(digest, str) else shown
    return facts


def _unit(report: Report) -> str:
    """What a run's figures count, per second: tokens, a program's own unit, or bus GB."""
    if report.workload == "allreduce":
        return "GB/s"
    return f"{report.summary.get('unit') or 'tokens'}/s"


_WHAT = {"train": "the built-in training", "program": "your program", "allreduce": "all-reduce"}


def _refuse_unlike(a: Report, b: Report) -> None:
    """Two runs whose figures count different things have no meaningful ratio: refused."""
    ids = (a.manifest["run_id"], b.manifest["run_id"])
    if a.workload != b.workload:
        if "allreduce" in (a.workload, b.workload):
            why = f"their figures measure different things ({_unit(a)} against {_unit(b)})"
        else:
            why = (
                f"{_WHAT[a.workload]} counts {_unit(a)} and {_WHAT[b.workload]} {_unit(b)}: "
                "a program's throughput counts its own units over its own steps, the built-in "
                "training's counts tokens of dtrun's GPT model, so their ratio says nothing"
            )
        raise UsageError(
            f"cannot compare run {ids[0]} ({a.workload}) with run {ids[1]} ({b.workload})",
            why=why,
            fix="compare two runs of the same workload: two training runs, two runs of your "
            "program or two all-reduce runs",
        )
    if a.workload != "program":
        return
    if _unit(a) != _unit(b):
        raise UsageError(
            f"cannot compare run {ids[0]} ({_unit(a)}) with run {ids[1]} ({_unit(b)})",
            why="their throughputs count different units, so their ratio says nothing",
            fix="rerun one with the other's units (the same --samples-per-step or "
            "--tokens-per-step, with --per-process under weak scaling), or compare each with "
            "a run in its own units",
        )
    whole = [run.manifest["run_id"] for run in (a, b) if _whole_program(run)]
    if _unit(a).removesuffix("/s") in STAND_INS and len(whole) == 1:
        raise UsageError(
            f"cannot compare run {ids[0]} with run {ids[1]}: run {whole[0]} was timed as one "
            "whole program, the other step by step",
            why="with no --samples-per-step or --tokens-per-step the unit is a step, and a step "
            f"of run {whole[0]} is its whole program, start-up included",
            fix="time both the same way (a program without a torch optimizer: --step-pattern), "
            "or give both the same --samples-per-step or --tokens-per-step",
        )


def _whole_program(report: Report) -> bool:
    facts = _facts(report)
    return facts is not None and facts.timing == "whole program"


def unreliable(report: Report) -> dict[int, str]:
    """The node counts whose point the report calls unreliable, each with its first finding
    (runner/report/noise.py); none for a run without noise figures."""
    points = report.noise.points if report.noise is not None else ()
    return {point.nodes: point.findings[0] for point in points if point.unreliable}


def same_run(a: Report, b: Report) -> str | None:
    """Why A and B are one run, or None: the same run directory, or a copy of one (the same
    run id and the same figures)."""
    if a.run_dir.path.resolve() == b.run_dir.path.resolve():
        return "the same run directory"
    if a.manifest["run_id"] == b.manifest["run_id"] and _figures(a) == _figures(b):
        return "the same run id and the same results"
    return None


def compare(a: Report, b: Report) -> Comparison:
    _refuse_unlike(a, b)
    fa, fb = _figures(a), _figures(b)
    ua, ub = unreliable(a), unreliable(b)
    both = sorted(set(fa) & set(fb))
    noisy = tuple(
        NoisyPoint(side, report.manifest["run_id"], nodes, found[nodes])
        for nodes in both
        for side, report, found in (("A", a, ua), ("B", b, ub))
        if nodes in found
    )

    def sides(nodes: int) -> str:
        return ", ".join(point.side for point in noisy if point.nodes == nodes)

    rows = [
        _row(nodes, fa.get(nodes), fb.get(nodes), sides(nodes))
        for nodes in sorted(set(fa) | set(fb))
    ]
    sa, sb = _setup(a), _setup(b)
    differences = tuple(
        (key, sa.get(key, "-"), sb.get(key, "-"))
        for key in dict.fromkeys([*sa, *sb])
        if sa.get(key) != sb.get(key)
    )
    unit = _unit(a)
    metric = "busbw (GB/s)" if a.workload == "allreduce" else f"{unit} at the median step"
    return Comparison(
        a.manifest["run_id"], b.manifest["run_id"], a.workload, metric, tuple(rows),
        differences, unit, noisy, same_run(a, b), _target(a), _target(b), _level(a), _level(b),
    )  # fmt: skip


def _target(report: Report) -> float | None:
    return report.rows[0].target_efficiency if report.rows else None


def _level(report: Report) -> str:
    return interval_level([row.confidence for row in report.rows] or [CONFIDENCE])
