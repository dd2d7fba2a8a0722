"""The bench summary on the console: the scaling table that fits the terminal
(runner/cli/tables.py), the verdicts, the noise findings, and the --json document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtrun.cli.common import console
from dtrun.cli.inert import styled
from dtrun.cli.tables import Column, Grid, print_grid
from dtrun.spec.text import one_line, percent, percent_range, plural
from dtrun.workloads.sizes import format_size

if TYPE_CHECKING:
    from dtrun.record.rundir import RunDir
    from dtrun.report.build import Report
    from dtrun.report.metrics import ScalingRow
    from dtrun.sweep.run import Sweep


def print_summary(sweep: Sweep, *, wide: bool = False) -> None:
    """The sweep's table: scaling for training, bus bandwidth for all-reduce; then the report's
    files written (Sweep.write_report: after the result, off the user's wait,
    docs/benchmarks.md), and only then their path, so the path printed holds this report."""
    out = console()
    report = sweep.report
    if report is not None:
        print_grid(out, report_grid(report), wide=wide)
        print_verdicts(report)
        print_noise(report)
    sweep.write_report()
    if report is not None:
        out.print(one_line(f"report: {sweep.run_dir.report} (and {sweep.run_dir.html.name})"))


def print_noise(report: Report) -> None:
    """Under the table, each point the report calls unreliable, and why (its Noise section)."""
    if report.noise is not None:
        for point in report.noise.points:
            for finding in point.findings:
                console().print(styled(("noise:", "yellow"), f" {finding}"))


# The longest proof the table shows whole; a longer one shows its answer (the words before its
# first colon) and points at the report, which says why (docs/bench.md, "The summary table").
PROOF_CELL_MAX = 32


def proof_cell(proof: str) -> str:
    """'in sync: 8 ranks on 2 nodes' whole; 'diverged: ranks 1, 3 end with other parameters
    than rank 0' as 'diverged (why: report.md)'."""
    if len(proof) <= PROOF_CELL_MAX or ": " not in proof:
        return proof
    return f"{proof.split(': ', 1)[0]} (why: report.md)"


def report_grid(report: Report) -> Grid:
    """The summary table of `dtrun bench` and `dtrun report`. The answer (node count, throughput,
    speedup, efficiency, verdict) stays at any width; the proof, the processes, n and the probe's
    busbw go in that order as the terminal narrows."""
    title = f"{report.workload}: {report.status}"
    columns: tuple[Column, ...]
    rows: list[tuple[str, ...]]
    if report.workload == "allreduce":
        columns = (
            Column("nodes", 10), Column("processes", 5), Column("size", 8),
            Column("busbw", 9), Column("peak busbw", 7), Column("expected", 4),
            Column("correctness", 6, "left", wrap=True),
        )  # fmt: skip
        rows = [
            (
                str(ar.nodes),
                str(ar.world_size),
                format_size(ar.largest_size),
                f"{ar.busbw:.2f} GB/s",
                f"{ar.peak_busbw:.2f} GB/s",
                ar.expected.describe().split(" (")[0] if ar.expected else "-",
                proof_cell(ar.proof),
            )
            for ar in report.busbw_rows
        ]
        return Grid(columns, rows, title)
    unit = report.summary.get("unit") or "tokens"
    from dtrun.report.stats import interval_level

    sequential = any(row.stopped for row in report.rows)  # --until-decided
    caption = (
        f"{unit}/s, speedup and efficiency at the median step time, efficiency with its "
        f"{interval_level([row.confidence for row in report.rows])} interval from the launches "
        "in brackets; n = "
        "timed steps x launches"
        + ("; --until-decided: why each point stopped after its verdict" if sequential else "")
    )
    columns = (
        Column("nodes", 10), Column("processes", 5), Column("n", 4), Column(f"{unit}/s", 9),
        Column("speedup", 8), Column("efficiency", 8), Column("verdict", 8),
        Column("busbw", 3), Column("communication", 6, "left", wrap=True),
    )  # fmt: skip
    rows = [
        (
            str(row.nodes),
            str(row.world_size),
            f"{row.steps_n}x{row.launches_n}",
            f"{row.tokens_per_s:,.0f}",
            f"{row.speedup:.2f}x",
            _efficiency_cell(row),
            _verdict_cell(row),
            "-" if row.busbw is None else f"{row.busbw:.2f} GB/s",
            proof_cell(row.proof),
        )
        for row in report.rows
    ]
    return Grid(columns, rows, title, caption)


def _verdict_cell(row: ScalingRow) -> str:
    """The verdict; with --until-decided, why the point stopped (decided, maximum, ended)."""
    if row.stopped is None or row.verdict == "baseline":
        return str(row.verdict)
    return f"{row.verdict} ({row.stopped})"


def _efficiency_cell(row: ScalingRow) -> str:
    if row.verdict == "baseline":  # 100% by definition
        return percent(row.efficiency)
    return efficiency_text(
        row.efficiency, row.efficiency_low, row.efficiency_high, row.target_efficiency
    )


def efficiency_text(
    value: float | None, low: float | None, high: float | None, target: float | None = None
) -> str:
    """'92% (88-96%)', each figure on its side of ``target`` as the report shows it (0.8997
    below 90%: '89.97%'); a figure without an interval stands alone."""
    if value is None:
        return "-"
    if low is None or high is None:
        return percent(value, target)
    return f"{percent(value, target)} ({percent_range(low, high, target)})"


def print_verdicts(report: Report) -> None:
    """Below the table: each judged node count's verdict and why, in the report's words."""
    out = console()
    said = (report.summary.get("baseline") or {}).get("finding")
    if said:  # every efficiency below is against another node count than asked
        out.print(styled(("baseline:", "yellow"), f" {said}"), highlight=False)
    for row in report.rows[1:]:
        style = {"scales": "green", "loses": "red"}.get(str(row.verdict), "yellow")
        out.print(
            styled(f"{plural(row.nodes, 'node')}: ", (str(row.verdict), style),
                   f": {row.verdict_reason}"),
            highlight=False,
        )  # fmt: skip


def sweep_json(run_dir: RunDir) -> dict[str, object]:
    """What --json prints: summary.json (an older dtrun's under today's field names), and where
    the run's files are."""
    from dtrun.report.summaryfile import read_summary

    summary = read_summary(run_dir.summary)
    return {
        **summary,
        "run_dir": str(run_dir.path),
        "report": str(run_dir.report),
        "report_html": str(run_dir.html),
    }
