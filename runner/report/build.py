"""Rebuild the report of a run directory from its recorded files alone.

Inputs: manifest.json, runs.json, health.json and each launch's result.json. Outputs:
summary.json, report.md, a self-contained report.html (the same Markdown, rendered, with the
plots inlined) and the plots. Nothing here reads a clock or the machine, so rebuilding from the
same inputs writes the same bytes. The inputs are read and checked whole, before anything is
written (runner/report/recorded.py): a damaged run directory is refused and left as it was.
"""

from __future__ import annotations

import base64
import functools
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from runner import __version__
from runner.azure.sizefacts import ExpectedBusbw, expected_busbw
from runner.predict.predict import CHECKED_OF, CHECKED_WITHIN_5, Prediction
from runner.record.rundir import RunDir
from runner.redact import redact_text
from runner.render import environment, render
from runner.report.cost import SweepCost, sweep_cost
from runner.report.losses import LossRow, where_scaling_is_lost
from runner.report.metrics import (
    FORMULAS,
    BusbwRow,
    ProjectionRow,
    ScalingRow,
    busbw_rows,
    projection,
    scaling_rows,
)
from runner.report.model import ASSUMED
from runner.report.noise import NoiseReport, noise_report
from runner.report.predicted import next_counts
from runner.report.program import program_texts
from runner.report.recorded import check_writable, read_recorded
from runner.report.resultfile import AllreduceResult, Result
from runner.report.results import SizeRow, TrainResult
from runner.report.stages import StageTable, stage_tables
from runner.report.stats import (
    CONFIDENCE,
    DEFAULT_TARGET,
    ONE_LAUNCH,
    STATISTIC,
    Verdict,
)
from runner.spec.cluster import exceeds_cores
from runner.spec.request import ScalingMode
from runner.spec.text import noun, plural

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

SUMMARY_SCHEMA = "dtrun.summary/4"  # 4: t-intervals from launches, none from one launch
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
    "freedom (launches less one per node count); none with one launch at the point or baseline"
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


@dataclass(frozen=True)
class _Plot:
    name: str  # file name in the run directory
    alt: str  # what it shows, for the Markdown image and the HTML alt text


THROUGHPUT = _Plot(
    "throughput.png",
    "tokens/s against nodes, with the ideal line",
)
EFFICIENCY = _Plot(
    "efficiency.png",
    "efficiency against nodes, with the target",
)
BUSBW = _Plot(
    "busbw.png",
    "all-reduce busbw against message size",
)
PLOTS = (THROUGHPUT, EFFICIENCY, BUSBW)
# What build_report writes (each through a temporary file beside it) or removes.
OUTPUTS = (
    "summary.json",
    "report.md",
    "report.html",
    *(plot.name for plot in PLOTS),
)


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
        noise = noise_report(
            {n: [r.noise for r in rs] for n, rs in trained.items()}, manifest.get("noise")
        )
        rows = scaling_rows(trained, float(bench.get("target_efficiency", DEFAULT_TARGET)))
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
            losses=where_scaling_is_lost(rows, size, oversubscribed(manifest, rows), mode),
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


def verdicts_on_quiet_points(
    rows: tuple[ScalingRow, ...], noise: NoiseReport
) -> tuple[ScalingRow, ...]:
    """A verdict stands only on figures measured quietly: where the Noise section calls the
    point or the baseline unreliable, *scales* and *loses* become *inconclusive*, saying why
    (docs/report.md, "Noise")."""
    unreliable = {point.nodes for point in noise.points if point.unreliable}
    if not rows or not unreliable:
        return rows
    base = rows[0].nodes
    judged = []
    for row in rows:
        which = row.nodes if row.nodes in unreliable else base if base in unreliable else None
        if row.verdict in (Verdict.SCALES, Verdict.LOSES) and which is not None:
            would = (
                "which would scale" if row.verdict is Verdict.SCALES else "which would be a loss"
            )
            row = replace(
                row,
                verdict=Verdict.INCONCLUSIVE,
                verdict_reason=f"{row.verdict_reason}, {would}, but the "
                f"{which}-node point was measured in noise (see the noise findings); to "
                "decide: rerun on a quieter machine",
            )
        judged.append(row)
    return tuple(judged)


def _first(results: Mapping[int, Sequence[T]]) -> T | None:
    return next((rs[0] for _, rs in sorted(results.items()) if rs), None)


def _widest(results: Mapping[int, Sequence[T]]) -> T | None:
    return next((rs[-1] for _, rs in sorted(results.items(), reverse=True) if rs), None)


def build_report(run_dir: RunDir) -> Report:
    """Read the recorded files; write summary.json, report.md, report.html and the plots.

    Everything is made in memory first and written after, each file whole (RunDir.write): a
    full disk stops the writing with every file either as it was or as new, none half-written;
    the plots go first, so no report names a plot that is not there."""
    report = analyse(run_dir)
    check_writable(run_dir, OUTPUTS)  # nothing is written unless all of it can be
    manifest = report.manifest
    title = f"dtrun {manifest['run_id']}"
    pngs: dict[_Plot, bytes] = {}
    if report.rows:
        from runner.report.plots import plot_efficiency, plot_throughput

        label = f"{title} ({report.mode.value})"
        unit = str(report.summary.get("unit") or "tokens")
        pngs[THROUGHPUT] = plot_throughput(report.rows, title=label, unit=unit)
        if len(report.rows) > 1:  # one node count is its own baseline: 100% says nothing
            pngs[EFFICIENCY] = plot_efficiency(report.rows, title=label)
    if report.series:
        from runner.report.plots import plot_busbw

        pngs[BUSBW] = plot_busbw(
            dict(report.series), dict(report.expected), title=f"{title}: all-reduce"
        )
    links = _links(pngs)
    markdown = report_markdown(report, links, html=False)
    body = report_html_body(report_markdown(report, links, html=True))
    for plot, png in pngs.items():  # the HTML carries its plots inside: one file to send
        lead = ' class="lead"' if plot is THROUGHPUT else ""  # sized to fit the first screen
        body = body.replace(f'src="{plot.name}"', f'{lead} src="{_data_uri(png)}"'.lstrip())
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
    return report


def report_markdown(
    report: Report, plots: Mapping[str, tuple[str, str]], *, html: bool = False
) -> str:
    """report.md; with ``html``, the Markdown report.html is rendered from: the method text
    and the figures report.md leaves to summary.json in place, between the markers
    report_html_body makes <details> of.

    From redacted records; redacted again so a report rebuilt from older records holds none
    (before the plots are inlined: their base64 is not text to scrub)."""
    context = {**_context(report), "plots": plots, **_METHOD_MARKERS, "html": html}
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
        "workload": report.workload,
        "rows": report.rows,
        "busbw_rows": report.busbw_rows,
        "projection": report.projection,
        "project_tokens": int(bench.get("project_tokens", DEFAULT_PROJECT_TOKENS)),
        "losses": report.losses,
        "model": ASSUMED,
        "series": report.series,
        "health": report.health,
        "formula": FORMULAS[report.mode],
        "statistic": STATISTIC_TEXT,
        "interval": INTERVAL_TEXT,
        "confidence": CONFIDENCE,
        "one_launch": ONE_LAUNCH,
        "first": report.first,
        "widest": report.widest,
        "measured_on": measured_on(manifest, report.first),
        "oversubscribed": oversubscribed(manifest, report.rows),
        "noise": report.noise,
        "stages": report.stages,
        "cost": report.cost,
        "next_counts": report.next_counts,
        "next_counts_checked": (CHECKED_WITHIN_5, CHECKED_OF),
        "reproduce": reproducibility(manifest, report.first),
        "command": command_block(manifest),
        "error_block": code_block(str(report.runs["error"])) if report.runs.get("error") else "",
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


# report.md.j2 renders its method text (templates/report_method.md.j2) for the HTML between
# these marker paragraphs, which report_html_body turns into <details>; in report.md the text
# is one line naming its section of docs/report.md. Private-use characters: no figure or name
# the report shows holds them, and any that did are removed before the HTML is written.
_MARK = "\ue000"
_METHOD_MARKERS = {"details_open": f"{_MARK}details{_MARK}", "details_close": f"{_MARK}end{_MARK}"}
_DETAILS_OPEN = re.compile(f"<p>{_MARK}details{_MARK} (.*?)</p>")
_DETAILS_CLOSE = f"<p>{_MARK}end{_MARK}</p>"


def report_html_body(markdown: str) -> str:
    """The HTML report's body: method text collapsed into <details>, every table in a box of
    its own that scrolls sideways (so a wide table never widens the page)."""
    html = markdown_to_html(markdown)
    html = _DETAILS_OPEN.sub(r"<details>\n<summary>\1</summary>", html)
    html = html.replace(_DETAILS_CLOSE, "</details>").replace(_MARK, "")
    return html.replace("<table>", '<div class="table">\n<table>').replace(
        "</table>", "</table>\n</div>"
    )


def _proof(widest: Result | None) -> dict[str, Any] | None:
    if not isinstance(widest, TrainResult) or not widest.checks:
        return None
    return {
        "nodes": widest.nnodes,
        "strategy": widest.strategy_text,
        "layout": widest.layout_text,
        "checks": [asdict(check) for check in widest.checks],
    }


def markdown_to_html(text: str) -> str:
    """CommonMark with tables; raw HTML in the text is escaped, not passed through."""
    html: str = _markdown().render(text)
    return html


@functools.cache
def _markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def measured_on(manifest: Mapping[str, Any], first: Result | None) -> str:
    inventory = manifest["inventory"]
    machine = manifest["machine"]
    nodes = len(inventory["nodes"])
    if inventory["source"] == "embedded":
        return (
            f"embedded local cluster: {plural(nodes, 'simulated node')} on one machine "
            f"({machine['hostname']}: {machine['cpu']}, {machine['cpu_count']} cores, "
            f"{machine['memory_bytes'] / 2**30:.0f} GiB)"
        )
    device = f", {first.device_name}" if first else ""
    size = f"{inventory['size']} " if inventory.get("size") else ""
    return f"{inventory['source']}: {nodes} {size}{noun(nodes, 'node')}{device}"


def command_block(manifest: Mapping[str, Any]) -> str:
    """The recorded command line (redacted, runner/record/manifest.py) as a Markdown code
    block, fenced with more backticks than the command holds in a row; "" where the manifest
    has none (written before dtrun recorded it, or not started from a command line)."""
    command = manifest.get("command")
    return code_block(str(command), "shell") if command else ""


def code_block(text: str, info: str = "") -> str:
    """``text`` as a Markdown code block whose fence is longer than any run of backticks in
    it: nothing in the text (a command, an error quoting a node's output) can end the block
    and be read as Markdown (CommonMark 0.31, "Fenced code blocks")."""
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def reproducibility(manifest: Mapping[str, Any], first: Result | None) -> list[tuple[str, str]]:
    """The manifest's facts a reader needs to reproduce the run, as (what, value) rows."""
    rows: list[tuple[str, str]] = []
    versions = manifest.get("versions") or {}
    local = [f"{k} {versions[k]}" for k in ("dtrun", "torch") if versions.get(k)]
    if local:  # the rest (deepspeed, pulumi, numpy...) in the manifest, said below
        rows.append(("dtrun's machine", ", ".join(local)))
    if first is not None:
        node = [f"torch {first.torch_version}"]
        node += [f"Python {first.python_version}"] if first.python_version else []
        node += [f"NCCL {first.nccl_version}"] if first.nccl_version else []
        if isinstance(first, TrainResult) and first.deepspeed_version:
            node.append(f"DeepSpeed {first.deepspeed_version}")
        if isinstance(first, TrainResult) and first.rank_os and first.rank_os[0]:
            node.append(first.rank_os[0])
        rows.append(("the nodes", ", ".join(node)))
    git = manifest.get("git")
    if git:
        dirty = " (with local changes)" if git["dirty"] else ""
        rows.append(("source", f"git {git['revision'][:12]}{dirty}"))
    image = manifest.get("image") or {}
    if image.get("urn"):
        rows.append(("image", f"{image['urn']} ({image['source']})"))
    nodes = manifest["inventory"]["nodes"]
    rows.append(("nodes", ", ".join(f"{n['name']} {n['address']}" for n in nodes)))
    launch_env = manifest.get("launch_environment") or []
    if launch_env:
        pairs = ", ".join(f"`{var['key']}={var['value']}`" for var in launch_env)
        rows.append(("launch environment", pairs))
    return rows


def warm_up_tools() -> None:
    """Import and load what building a report needs, so that the first report is fast."""
    from matplotlib.figure import Figure

    # Drawing text once loads the font list and the font the plots use.
    fig = Figure(figsize=(1, 1), dpi=20)
    fig.subplots().set_title("warm-up")
    fig.savefig(io.BytesIO(), format="png")
    _markdown()
    for template in ("report.md.j2", "report.html.j2"):
        environment().get_template(template)


def oversubscribed(manifest: Mapping[str, Any], rows: Sequence[ScalingRow]) -> list[int]:
    """Node counts at which the embedded cluster ran more processes than this machine has cores:
    their efficiency measures the shared CPU, not the launcher or the communication."""
    if manifest["inventory"]["source"] != "embedded":
        return []
    cores = manifest["machine"]["cpu_count"]
    return [row.nodes for row in rows if exceeds_cores(row.world_size, cores)]
