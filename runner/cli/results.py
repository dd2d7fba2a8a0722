"""`dtrun report` and `dtrun compare`: read what a sweep recorded, rebuild or set side by side."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli import options as opts
from runner.cli.common import console, human_output_to_stderr, print_json, user_errors
from runner.cli.display import print_comparison, print_noise, report_table, sweep_json
from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.record.rundir import RunDir

app = typer.Typer()


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory, e.g. runs/<run-id>.")],
    json_out: opts.Json = False,
) -> None:
    """Rebuild summary.json, report.md, report.html and the plots from a run's saved results."""
    from runner.record.rundir import RunDir
    from runner.report.build import build_report

    with human_output_to_stderr(json_out), user_errors():
        built = build_report(_run_dir(run_dir))
        console().print(report_table(built))
        print_noise(built)
        console().print(f"rebuilt {built.run_dir.report} and {built.run_dir.html.name}")
        if json_out:
            print_json(sweep_json(RunDir(run_dir)))


def _run_dir(path: Path) -> RunDir:
    from runner.record.rundir import RunDir

    manifest = path / "manifest.json"
    # Anything named manifest.json makes it a run directory: what is wrong with a damaged one
    # (a directory, unreadable, not JSON) is said when it is read.
    if not (path.is_dir() and (manifest.exists() or manifest.is_symlink())):
        if not path.is_dir():
            hint = "no such directory"
        elif (path / "run.json").is_file():
            hint = (
                "it is a `dtrun run` directory: its record is run.json and its outputs are in "
                "launch/"
            )
        else:
            hint = "it holds no manifest.json"
        raise UsageError(
            f"{path} is not a `dtrun bench` run directory",
            why=hint,
            fix="pass a directory that `dtrun bench` printed, e.g. runs/<run-id>",
        )
    return RunDir(path)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the baseline).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory.")],
    json_out: opts.Json = False,
) -> None:
    """Show two runs side by side, by node count, and what differs between their set-ups."""
    from runner.report.build import analyse
    from runner.report.compare import compare as compare_runs

    with human_output_to_stderr(json_out), user_errors():
        result = compare_runs(analyse(_run_dir(run_a)), analyse(_run_dir(run_b)))
        print_comparison(result)
        if json_out:
            print_json(result.to_json())
