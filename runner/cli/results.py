"""`dtrun report` and `dtrun compare`: read what a sweep recorded, rebuild or set side by side."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dtrun.cli import options as opts
from dtrun.cli.common import console, human_output_to_stderr, print_json, user_errors
from dtrun.cli.inert import styled
from dtrun.cli.summary import efficiency_text, print_noise, print_verdicts, report_grid, sweep_json
from dtrun.cli.tables import Column, Grid, print_grid
from dtrun.errors import UsageError
from dtrun.record.writer import UNRECORDED
from dtrun.spec.text import one_line

if TYPE_CHECKING:
    from dtrun.record.rundir import RunDir
    from dtrun.report.compare import Comparison

app = typer.Typer()


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory, e.g. runs/<run-id>.")],
    json_out: opts.Json = False,
    wide: opts.Wide = False,
) -> None:
    """Rebuild summary.json, report.md, report.html and the plots from a run's saved results."""
    from dtrun.cli.ownwords import spare_own_words
    from dtrun.report.build import build_report

    spare_own_words()  # this machine's secret that is a name in the records: not masked there
    with human_output_to_stderr(json_out), user_errors():
        built = build_report(_run_dir(run_dir))
        print_grid(console(), report_grid(built), wide=wide)
        print_verdicts(built)
        print_noise(built)
        if built.status == "running" and built.writer is False:  # nobody holds it
            console().print(f"status: {UNRECORDED}")
        console().print(one_line(f"rebuilt {built.run_dir.report} and {built.run_dir.html.name}"))
        if json_out:
            print_json(sweep_json(built.run_dir))  # the directory read, not the link again


def _run_dir(given: Path) -> RunDir:
    """The run directory ``given`` names, a link on the way resolved once (resolved_once):
    checked, read and written there alone; messages name ``given``."""
    from dtrun.record.rundir import RunDir, resolved_once
    from dtrun.workloads.files import name_too_long

    if name_too_long(given):  # pathlib raises on it: a traceback, before
        raise UsageError(
            f"{given} is not a `dtrun bench` run directory",
            why="no directory can have a name this long",
            fix="pass a directory that `dtrun bench` printed, e.g. runs/<run-id>",
        )
    path = resolved_once(given)
    manifest = path / "manifest.json"
    # Anything named manifest.json makes it a run directory: what is wrong with a damaged one
    # (a directory, unreadable, not JSON) is said when it is read.
    if not (path.is_dir() and (manifest.exists() or manifest.is_symlink())):
        fix = "pass a directory that `dtrun bench` printed, e.g. runs/<run-id>"
        if path.exists() and not path.is_dir():
            hint = "it is a file, not a directory"
            if (path.parent / "manifest.json").is_file():  # report.md, summary.json, ...
                fix = f"pass the run directory that holds it: {path.parent}"
        elif not path.is_dir():
            hint = "no such directory"
        elif (path / "run.json").is_file():
            hint = (
                "it is a `dtrun run` directory: its record is run.json and its outputs are in "
                "launch/"
            )
        else:
            hint = "it holds no manifest.json"
        raise UsageError(
            f"{given} is not a `dtrun bench` run directory",
            why=hint,
            fix=fix,
        )
    return RunDir(path)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the baseline).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory.")],
    json_out: opts.Json = False,
    wide: opts.Wide = False,
) -> None:
    """Show two runs side by side, by node count, and what differs between their set-ups."""
    from dtrun.cli.ownwords import spare_own_words
    from dtrun.report.build import analyse
    from dtrun.report.compare import compare as compare_runs

    spare_own_words()
    with human_output_to_stderr(json_out), user_errors():
        result = compare_runs(analyse(_run_dir(run_a)), analyse(_run_dir(run_b)))
        if result.same_run is not None:
            console().print(
                f"A and B are the same run, {result.a} ({result.same_run}): nothing to compare"
            )
        else:
            print_comparison(result, wide=wide)
        if json_out:
            print_json(result.to_json())


def print_compare_noise(result: Comparison) -> None:
    """Under the comparison table: which points no change is called at, because a run's report calls
    them unreliable, and why (that report's Noise section)."""
    if not result.noisy:
        return
    out = console()
    out.print("no change is called where a run's point was measured in noise:")
    for point in result.noisy:
        out.print(
            styled(
                ("noise:", "yellow"),
                f" {point.nodes} node{'' if point.nodes == 1 else 's'}, "
                f"{point.side} ({point.run_id}): {point.why}",
            )
        )


def print_comparison(result: Comparison, *, wide: bool = False) -> None:
    """The two runs by node count: the throughputs, their ratio and whether that is a change
    stay at any width; then the efficiencies, the throughputs' intervals and the probe's busbw
    go, in that order, as the terminal narrows."""
    out = console()
    title = f"{result.workload}: {result.a} (A) against {result.b} (B)"
    train = result.workload != "allreduce"
    unit = result.unit  # tokens/s, a program's own units (samples/s, ...) or busbw's GB/s
    columns = [Column("nodes", 10), Column(f"A {unit}", 9), Column(f"B {unit}", 9),
               Column("B / A", 8)]  # fmt: skip
    caption = None
    if train:
        a_level, b_level = result.a_level, result.b_level
        columns[2:2] = [Column(f"A {a_level} CI", 5, pair="ci")]
        columns[4:4] = [Column(f"B {b_level} CI", 5, pair="ci")]
        columns += [
            Column("change", 8, wrap=True),
            Column(f"A eff. ({a_level} CI)", 7, pair="eff"),
            Column(f"B eff. ({b_level} CI)", 7, pair="eff"),
            Column("A busbw", 3, pair="busbw"), Column("B busbw", 3, pair="busbw"),
        ]  # fmt: skip
        caption = (
            f"{unit} and efficiency at the median step time; a change only where the two "
            + (
                f"{a_level} intervals"
                if a_level == b_level
                else f"intervals ({a_level}, {b_level})"
            )
            + " do not overlap"
        )

    def number(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    def efficiency(
        verdict: str | None, value: float | None, low: float | None, high: float | None,
        target: float | None,
    ) -> str:  # fmt: skip
        # a run's baseline is 100% by definition, as in its own summary table
        return "100%" if verdict == "baseline" else efficiency_text(value, low, high, target)

    def between(low: float | None, high: float | None, spec: str) -> str:
        return "-" if low is None or high is None else f"{low:{spec}}-{high:{spec}}"

    rows = []
    for row in result.rows:
        main = ",.0f" if train else ",.2f"
        if train:
            cells = [
                str(row.nodes),
                number(row.a, main),
                between(row.a_low, row.a_high, main),
                number(row.b, main),
                between(row.b_low, row.b_high, main),
                number(row.ratio, ".2f"),
                row.change or "-",
                efficiency(
                    row.a_verdict,
                    row.a_efficiency,
                    row.a_efficiency_low,
                    row.a_efficiency_high,
                    result.a_target,
                ),
                efficiency(
                    row.b_verdict,
                    row.b_efficiency,
                    row.b_efficiency_low,
                    row.b_efficiency_high,
                    result.b_target,
                ),
                number(row.a_busbw, ".2f"),
                number(row.b_busbw, ".2f"),
            ]
        else:
            cells = [str(row.nodes), number(row.a, main), number(row.b, main),
                     number(row.ratio, ".2f")]  # fmt: skip
        rows.append(cells)
    print_grid(out, Grid(tuple(columns), rows, title, caption), wide=wide)
    print_compare_noise(result)  # beside the changes it holds back, before the set-ups
    if not result.differences:
        out.print("set-ups: the same in every recorded respect")
        return
    # every difference is shown: its words wrap, and one longer than the terminal wraps with it
    setups = (Column("", 10, "left", wrap=True), Column("A", 10, "left", wrap=True),
              Column("B", 10, "left", wrap=True))  # fmt: skip
    print_grid(out, Grid(setups, result.differences, "what differs", min_columns=3), wide=wide)
