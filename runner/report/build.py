"""Rebuild the report of a run directory from its recorded files alone.

Inputs: manifest.json, runs.json, health.json and each launch's result.json. Outputs:
summary.json, report.md, a self-contained report.html (the same Markdown, rendered, with the
plots inlined) and the plots. Nothing here reads a clock or the machine, so rebuilding from the
same inputs writes the same bytes. The inputs are read and checked whole, before anything is
written (runner/report/recorded.py): a damaged run directory is refused and left as it was.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from dtrun import __version__
from dtrun.azure.sizefacts import ExpectedBusbw, expected_busbw
from dtrun.predict.predict import CHECKED_INSIDE, CHECKED_OF, CHECKED_WITHIN_5, Prediction
from dtrun.record.rundir import RunDir
from dtrun.record.runsfile import cleanups
from dtrun.record.writer import writer_alive
from dtrun.redact import redact_text
from dtrun.render import code_block, environment, render
from dtrun.report.cost import SweepCost, sweep_cost
from dtrun.report.htmlpage import METHOD_MARKERS, data_uri, markdown_parser, report_html_body
from dtrun.report.losses import LossRow, where_scaling_is_lost
from dtrun.report.metrics import (
    FORMULAS,
    BusbwRow,
    ProjectionRow,
    ScalingRow,
    baseline,
    busbw_rows,
    projection,
    verdicts_on_quiet_points,
)
from dtrun.report.model import ASSUMED
from dtrun.report.noise import NoiseReport, noise_report
from dtrun.report.predicted import next_counts
from dtrun.report.program import program_texts
from dtrun.report.recorded import check_writable, read_recorded
from dtrun.report.reproduce import (
    command_block,
    measured_on,
    oversubscribed,
    reproducibility,
    usable_cores,
)
from dtrun.report.resultfile import AllreduceResult, Result
from dtrun.report.results import SizeRow, TrainResult
from dtrun.report.sequential import STOPPED_TEXT, judged_rows, until_decided, used_launches
from dtrun.report.stages import StageTable, stage_tables
from dtrun.report.stats import CONFIDENCE, ONE_LAUNCH, STATISTIC, interval_level
from dtrun.report.summaryfile import SUMMARY_SCHEMA
from dtrun.spec.outcome import health_below
from dtrun.spec.request import ScalingMode, leaves_out

T = TypeVar("T")
DEFAULT_PROJECT_TOKENS = 10**9
BUSBW_FORMULA = (
    "algbw = S / t (GB = 1e9 bytes, t averaged over the ranks); busbw = algbw * 2(n-1)/n "
    "for n ranks (nccl-tests)"
)

STATISTIC_TEXT = (
    f"{STATISTIC}: a launch's tokens/s = global batch x sequence length / its median step "
    "time (rank 0's timed steps); a node count's = the mean over its launches, the fastest and "
    "slowest dropped first from three or more (MLPerf-style)"
)
INTERVAL_TEXT = (
    f"{CONFIDENCE:.0%} t-interval from the launches: each launch's ln tokens/s; a point's "
    "mean of them, speedup and efficiency from its difference with the baseline's, with the "
    "launch-to-launch variance pooled over the node counts and Student's t at its degrees of "
    "freedom (launches less one per node count); none with one launch at the point or baseline, "
    "or where no launch differs from another"
)


@dataclass(frozen=True)
class Report:
    """What a run directory's recorded files say, before anything is written."""

    run_dir: RunDir
    status: str
    workload: str
    mode: ScalingMode
    manifest: dict[str, Any]
    runs: dict[str, Any]
    rows: tuple[ScalingRow, ...] = ()  # training sweeps
    busbw_rows: tuple[BusbwRow, ...] = ()  # all-reduce sweeps
    projection: tuple[ProjectionRow, ...] = ()
    losses: tuple[LossRow, ...] = ()
    series: tuple[tuple[int, tuple[SizeRow, ...]], ...] = ()  # busbw by size, per node count
    expected: tuple[tuple[int, ExpectedBusbw | None], ...] = ()
    health: dict[str, Any] | None = None
    first: Result | None = None  # the first finished launch's result
    widest: Result | None = None  # the last finished launch at the most nodes (its proof)
    noise: NoiseReport | None = None  # training sweeps: steal, other load, stragglers
    stages: tuple[StageTable, ...] = ()  # pipeline sweeps: each node count's stages
    cost: SweepCost | None = None  # node-hours and cost per point, the sweep's total and idle
    next_counts: Prediction | None = None  # training sweeps: 2x and 4x the largest node count
    summary: dict[str, Any] = field(default_factory=dict)  # what summary.json holds
    writer: bool | None = None  # a "running" sweep's: a dtrun holds it (record/writer.py)


@dataclass(frozen=True)
class _Plot:
    name: str  # file name in the run directory
    alt: str  # what it shows, for the Markdown image and the HTML alt text


THROUGHPUT = _Plot("throughput.png", "tokens/s against nodes, with the ideal line")
EFFICIENCY = _Plot("efficiency.png", "efficiency against nodes, with the target")
BUSBW = _Plot("busbw.png", "all-reduce busbw against message size")
PLOTS = (THROUGHPUT, EFFICIENCY, BUSBW)
# what build_report writes (each through a temporary file beside it) or removes
OUTPUTS = ("summary.json", "report.md", "report.html", *(plot.name for plot in PLOTS))


def _only(results: Mapping[int, Sequence[Result]], kind: type[T]) -> dict[int, list[T]]:
    return {n: [r for r in rs if isinstance(r, kind)] for n, rs in results.items()}


def analyse(run_dir: RunDir) -> Report:
    """Read a run directory's recorded files and compute every table; writes nothing."""
    recorded = read_recorded(run_dir)  # every input checked: a damaged one is refused here
    manifest, runs_data, results = recorded.manifest, recorded.runs, recorded.results
    bench = manifest["bench"]
    workload = recorded.workload
    mode = ScalingMode(bench["mode"])
    size = manifest["inventory"].get("size")
    base = Report(
        run_dir,
        runs_data["status"],
        workload,
        mode,
        manifest,
        runs_data,
        health=recorded.health,
        writer=writer_alive(run_dir.path) if runs_data["status"] == "running" else None,
    )
    series: dict[int, tuple[SizeRow, ...]] = {}
    expected: dict[int, ExpectedBusbw | None] = {}
    if workload == "allreduce":
        measured = _only(results, AllreduceResult)
        rows_ar = busbw_rows(measured, size)
        series = {n: rs[0].rows for n, rs in measured.items() if rs}
        expected = {row.nodes: row.expected for row in rows_ar}
        report = replace(base, busbw_rows=rows_ar, first=_first(measured))
    else:
        trained = _only(results, TrainResult)
        used = used_launches(trained, bench, runs_data)  # a point's launches to its stop
        noisy = {n: [r.noise for r in rs] for n, rs in trained.items()}
        noise = noise_report(noisy, manifest.get("noise"), leaves_out(bench), used)
        rows = judged_rows(trained, bench, runs_data)  # --until-decided: as of each last look
        rows = verdicts_on_quiet_points(rows, noise)
        if workload == "program":  # --steps is the built-in workload's: your program's steps
            rows = tuple(
                replace(
                    row,
                    verdict_reason=row.verdict_reason.replace(
                        "more --steps", "more steps of your program"
                    ),
                )
                for row in rows
            )
        tokens = int(bench.get("project_tokens", DEFAULT_PROJECT_TOKENS))
        for nodes, rs in trained.items():
            probe = next((r.busbw for r in rs if r.busbw is not None), None)
            if probe is not None:
                series[nodes] = probe.rows
                expected[nodes] = expected_busbw(size, nodes, rs[0].world_size // nodes)
        report = replace(
            base,
            rows=rows,
            projection=projection(rows, tokens),
            losses=where_scaling_is_lost(
                rows, size, oversubscribed(manifest, rows), mode, stragglers=noise.stragglers
            ),
            first=_first(trained),
            widest=_widest(trained),
            noise=noise,
            stages=stage_tables(trained, bench["model"]),
        )
    report = replace(
        report,
        series=tuple(sorted(series.items())),
        expected=tuple(sorted(expected.items())),
        cost=sweep_cost(manifest, runs_data, report.rows),
    )
    report = replace(report, next_counts=next_counts(report))
    return replace(report, summary=_summary(report))


def _first(results: Mapping[int, Sequence[T]]) -> T | None:
    return next((rs[0] for _, rs in sorted(results.items()) if rs), None)


def _widest(results: Mapping[int, Sequence[T]]) -> T | None:
    return next((rs[-1] for _, rs in sorted(results.items(), reverse=True) if rs), None)


def build_report(run_dir: RunDir) -> Report:
    """Read the recorded files; write summary.json, report.md, report.html and the plots."""
    report = analyse(run_dir)
    write_report(report)
    return report


def write_report(report: Report) -> None:
    """An analysed run's summary.json, report.md, report.html and plots, into its directory.

    Everything is made in memory first and written after, each file whole (RunDir.write): a
    full disk stops the writing with every file either as it was or as new, none half-written;
    the plots go first, so no report names a plot that is not there."""
    run_dir = report.run_dir
    check_writable(run_dir, OUTPUTS)  # nothing is written unless all of it can be
    manifest = report.manifest
    title = f"dtrun {manifest['run_id']}"
    pngs: dict[_Plot, bytes] = {}
    if report.rows:
        from dtrun.report.plots import plot_efficiency, plot_throughput

        label = f"{title} ({report.mode.value})"
        unit = str(report.summary.get("unit") or "tokens")
        pngs[THROUGHPUT] = plot_throughput(report.rows, title=label, unit=unit)
        if len(report.rows) > 1:  # one node count is its own baseline: 100% says nothing
            pngs[EFFICIENCY] = plot_efficiency(report.rows, title=label)
    if report.series:
        from dtrun.report.plots import plot_busbw

        pngs[BUSBW] = plot_busbw(
            dict(report.series), dict(report.expected), title=f"{title}: all-reduce"
        )
    links = _links(pngs)
    markdown = report_markdown(report, links, html=False)
    body = report_html_body(report_markdown(report, links, html=True))
    for plot, png in pngs.items():  # the HTML carries its plots inside: one file to send
        lead = ' class="lead"' if plot is THROUGHPUT else ""  # sized to fit the first screen
        body = body.replace(f'src="{plot.name}"', f'{lead} src="{data_uri(png)}"'.lstrip())
    page_title = redact_text(f"dtrun report: {manifest['run_id']}")
    html = render("report.html.j2", {"title": page_title, "body": body})
    for plot in PLOTS:
        if plot in pngs:
            run_dir.write(run_dir.path / plot.name, pngs[plot])
        else:
            (run_dir.path / plot.name).unlink(missing_ok=True)
    run_dir.write_json(run_dir.summary, report.summary)
    run_dir.write(run_dir.report, markdown)
    run_dir.write(run_dir.html, html)


def report_markdown(
    report: Report, plots: Mapping[str, tuple[str, str]], *, html: bool = False
) -> str:
    """report.md; with ``html``, the Markdown report.html is rendered from: the method text
    and the figures report.md leaves to summary.json in place, between the markers
    report_html_body makes <details> of.

    From redacted records; redacted again so a report rebuilt from older records holds none
    (before the plots are inlined: their base64 is not text to scrub)."""
    context = {**_context(report), "plots": plots, **METHOD_MARKERS, "html": html}
    return redact_text(render("report.md.j2", context))


def _links(pngs: Mapping[_Plot, bytes]) -> dict[str, tuple[str, str]]:
    """The template's plots: by short name, each its alt text and file name."""
    return {plot.name.removesuffix(".png"): (plot.alt, plot.name) for plot in PLOTS if plot in pngs}


def _context(report: Report) -> dict[str, Any]:
    manifest = report.manifest
    bench = manifest["bench"]
    return {
        "version": __version__,
        "manifest": manifest,
        "bench": bench,
        "runs": report.runs,
        "writer": report.writer,
        "workload": report.workload,
        "rows": report.rows,
        "baseline": report.summary.get("baseline"),
        "busbw_rows": report.busbw_rows,
        "projection": report.projection,
        "project_tokens": int(bench.get("project_tokens", DEFAULT_PROJECT_TOKENS)),
        "losses": report.losses,
        "model": ASSUMED,
        "series": report.series,
        "health": report.health,
        "health_below": health_below(report.health),
        "formula": FORMULAS[report.mode],
        "statistic": STATISTIC_TEXT,
        "interval": INTERVAL_TEXT,
        "confidence": CONFIDENCE,
        "confidence_text": interval_level([row.confidence for row in report.rows] or [CONFIDENCE]),
        "until_decided": until_decided(bench),
        "stopped_text": STOPPED_TEXT,
        "one_launch": ONE_LAUNCH,
        "first": report.first,
        "widest": report.widest,
        "measured_on": measured_on(manifest, report.first),
        "oversubscribed": oversubscribed(manifest, report.rows),
        "usable_cores": usable_cores(manifest),
        "noise": report.noise,
        "stages": report.stages,
        "cost": report.cost,
        "next_counts": report.next_counts,
        "next_counts_checked": (CHECKED_WITHIN_5, CHECKED_INSIDE, CHECKED_OF),
        "reproduce": reproducibility(manifest, report.first),
        "command": command_block(manifest),
        "error_block": code_block(str(report.runs["error"])) if report.runs.get("error") else "",
        # what a run of dtrun on the sweep left to tidy up (runs.json's cleanup), oldest first
        "cleanup_blocks": [code_block(text) for text in cleanups(report.runs)],
        **_program_context(report),
    }


def _program_context(report: Report) -> dict[str, Any]:
    """The throughput's unit (tokens for the built-in training) and, for `dtrun bench --
    PROGRAM`, the program's command line (redacted in the manifest) and its units."""
    first = report.first
    facts = first.program if isinstance(first, TrainResult) else None
    if report.workload != "program":
        return {"unit": "tokens", "program_line": "", "unit_why": ""}
    texts = program_texts(report.manifest["bench"], report.mode, facts)
    unit = texts.unit
    per_step = f"a launch's {unit}/s = {unit} per step / its median step time"
    return {
        "unit": unit,
        "program_line": texts.line,
        "unit_why": texts.unit_why,
        "statistic": STATISTIC_TEXT.replace(
            "a launch's tokens/s = global batch x sequence length / its median step time",
            per_step,
        ).replace("rank 0's timed steps", "the lowest rank's timed steps"),
        "formula": FORMULAS[report.mode].replace("tokens/s", f"{unit}/s"),
    }


def _summary(report: Report) -> dict[str, Any]:
    manifest, health = report.manifest, report.health
    return {
        "schema": SUMMARY_SCHEMA,
        "run_id": manifest["run_id"],
        "status": report.status,
        "error": report.runs["error"],
        "workload": report.workload,
        "unit": _program_context(report)["unit"],
        "mode": report.mode.value,
        # How it trained (train sweeps): the strategy, and a pipeline's schedule and micro-batches.
        "strategy": report.first.strategy_text if isinstance(report.first, TrainResult) else None,
        "size": manifest["inventory"].get("size"),
        "efficiency_formula": FORMULAS[report.mode] if report.rows else None,
        # Training: what every throughput, speedup and efficiency is computed from, and how
        # sure it is (docs/report.md "The statistic" and "Intervals and verdicts").
        "statistic": STATISTIC_TEXT if report.rows else None,
        "interval": INTERVAL_TEXT if report.rows else None,
        "target_efficiency": report.rows[0].target_efficiency if report.rows else None,
        # The node count every efficiency is against, and the one asked for where it had none.
        "baseline": baseline(report.manifest["bench"], report.runs, report.rows),
        "busbw_formula": BUSBW_FORMULA if report.workload == "allreduce" else None,
        "rows": [asdict(row) for row in report.rows],
        "busbw_rows": [asdict(row) for row in report.busbw_rows],
        "time_to_train": [asdict(row) for row in report.projection],
        "where_scaling_is_lost": [asdict(row) for row in report.losses],
        "model": asdict(ASSUMED) | {"formula": ASSUMED.describe()} if report.rows else None,
        "health": None if health is None else {k: health.get(k) for k in ("status", "note")},
        "noise": None if report.noise is None else report.noise.summary(),
        "cost": None if report.cost is None else report.cost.summary(),
        "next_node_counts": None if report.next_counts is None else report.next_counts.to_json(),
        # How the ranks were shown to communicate at the most nodes (the last launch there).
        "proof": _proof(report.widest),
    }


def _proof(widest: Result | None) -> dict[str, Any] | None:
    if not isinstance(widest, TrainResult) or not widest.checks:
        return None
    return {
        "nodes": widest.nnodes,
        "strategy": widest.strategy_text,
        "layout": widest.layout_text,
        "checks": [asdict(check) for check in widest.checks],
    }


def warm_up_tools() -> None:
    """Import and load what building a report needs, so that the first report is fast."""
    from matplotlib.figure import Figure

    # Drawing text once loads the font list and the font the plots use.
    fig = Figure(figsize=(1, 1), dpi=20)
    fig.subplots().set_title("warm-up")
    fig.savefig(io.BytesIO(), format="png")
    markdown_parser()
    env = environment()
    for template in env.list_templates(filter_func=lambda name: name.startswith("report")):
        env.get_template(template)  # and the parts report.md.j2 includes, compiled on first use
