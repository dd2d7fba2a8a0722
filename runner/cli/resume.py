"""`dtrun bench --resume RUN_DIR` and `--rerun RUN_DIR`: the options they take, and the recorded
sweep they run (--rerun: all of it again, as a new run).

The sweep is the one the run directory records (runner/record/resume.py), every record of it
checked as `dtrun report` checks it before anything runs or is written: options that would
change it (node counts, steps, launcher, model, ...) are refused rather than ignored, even when
given at their default value. What may be given is where it runs (--hosts, --stack, --slurm,
--spark, --local-nodes, ...: the same or a new cluster), --env values given again for redacted
secrets, --yes, and how it is shown or kept.

A run directory is data (docs/security.md): every value its manifest records is checked as
the option that sets it is checked when typed, and a recorded program or --env value runs only
once the user approved it (runner/cli/approval.py).
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import typer

from dtrun.cli.approval import approve, program_words
from dtrun.cli.options import Where
from dtrun.errors import UsageError
from dtrun.record.resume import Resumed, read_resume, read_spec, recorded_spec, refuse_links
from dtrun.record.writer import hold_writer
from dtrun.spec.request import BenchSpec, UnitKind

# Options that do not change the sweep: allowed beside --resume.
AS_YOU_LIKE = {
    "resume", "env", "results", "check", "teardown", "dry_run", "quiet", "json_out", "wide", "yes",
    *(field.name for field in dataclasses.fields(Where)),
}  # fmt: skip


def given_options(ctx: typer.Context, allowed: set[str]) -> list[str]:
    """The options of the running command given on its command line (or in the environment),
    at whatever value, other than ``allowed``; as flags."""
    given = []
    for param in ctx.command.params:
        if param.name is None or param.name in allowed:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.append(next((o for o in param.opts if o.startswith("--")), param.opts[0]))
    return given


def resume_request(ctx: typer.Context, path: Path, launching: Any, yes: bool) -> Resumed:
    given = given_options(ctx, AS_YOU_LIKE)
    if given:
        raise UsageError(
            f"--resume runs the sweep {path} records, and {', '.join(given)} would change it",
            fix=f"leave them out (`dtrun bench --resume {path}`, with --hosts, --stack, --slurm "
            "or --spark for another cluster), or start a new sweep without --resume",
        )
    from dtrun.cli.parse import parse_env

    env = parse_env(launching.env) if launching.env else ()
    recorded = recorded_spec(path)
    check_recorded(path, recorded, resume=True)
    resumed = read_resume(path, env, recorded)
    if resumed.complete:  # nothing to launch, approve or check: the caller says so
        return resumed
    from dtrun.report.build import OUTPUTS

    # a link where it writes, the report's plots too: refused now, not once launches began
    refuse_links(resumed, OUTPUTS)
    if not launching.dry_run:
        approve(path, recorded, "--resume", yes=yes)
    # Every record the report will read, each kept launch's result.json included, is checked
    # now, with the reader `dtrun report` and `dtrun compare` use: a damaged one is refused
    # before anything is launched or written, not after the sweep ran.
    from dtrun.report.recorded import read_recorded

    read_recorded(resumed.run_dir)
    if not launching.dry_run:  # the first write; refused while another dtrun still writes
        hold_writer(path)
    return resumed


# Beside --rerun also where the new run is written and its id; never --resume.
RERUN_AS_YOU_LIKE = (AS_YOU_LIKE - {"resume"}) | {"rerun", "output", "run_id"}


def rerun_request(
    ctx: typer.Context,
    path: Path,
    launching: Any,
    command: list[str] | None,
    run_id: str,
    yes: bool,
) -> tuple[BenchSpec, Path]:
    """The sweep ``path`` records, to run again whole as run ``run_id``, and where: --output
    if given, else beside ``path``."""
    given = given_options(ctx, RERUN_AS_YOU_LIKE)
    if command:
        given.append("a program after --")
    if given:
        raise UsageError(
            f"--rerun runs the sweep {path} records again, and {', '.join(given)} would change it",
            fix=f"leave them out (`dtrun bench --rerun {path}`, with --hosts, --stack, --slurm "
            "or --spark for another cluster), or start a new sweep without --rerun",
        )
    from dtrun.cli.parse import parse_env

    env = parse_env(launching.env) if launching.env else ()
    recorded = recorded_spec(path, "--rerun")
    check_recorded(path, recorded, resume=False)
    if not launching.dry_run:
        approve(path, recorded, "--rerun", yes=yes)
    spec = dataclasses.replace(read_spec(path, env, "--rerun", recorded), run_id=run_id)
    source = ctx.get_parameter_source("output")
    given_output = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
    return spec, launching.output if given_output else path.resolve().parent


def check_recorded(path: Path, recorded: BenchSpec, *, resume: bool) -> None:
    """Every value ``path``'s manifest records, checked as the option that sets it is checked
    when typed (the same functions): one dtrun would refuse is refused with exit 2 before
    anything is asked, run or written. The run id names the run directory again only when
    resuming (a rerun gets a new one)."""
    try:
        _check_as_typed(recorded, resume=resume)
    except UsageError as exc:
        raise UsageError(
            f"{path / 'manifest.json'} records a sweep dtrun refuses: {exc.what}",
            why=exc.why,
            fix="a run directory is data, checked as typed options are; start a new sweep "
            "with values dtrun takes (dtrun bench --help)",
        ) from None


def _check_as_typed(recorded: BenchSpec, *, resume: bool) -> None:
    from dtrun.cli.bench import with_program
    from dtrun.cli.cost import checked_usd
    from dtrun.cli.parse import check_run_id
    from dtrun.cli.workload_options import ProgramOptions
    from dtrun.plan.presets import PRESETS
    from dtrun.plan.registry import lookup
    from dtrun.plan.resolve import resolve_bench

    if resume:
        check_run_id(recorded.run_id)
    checked_usd("price_per_node_hour", recorded.price_per_node_hour)
    checked_usd("max_cost", recorded.max_cost)
    if recorded.model.preset is not None:
        lookup("preset", recorded.model.preset, PRESETS)
    _check_launches(recorded)
    units, program = recorded.units, recorded.program
    typed = with_program(
        dataclasses.replace(recorded, program=None, units=None, step_pattern=None, probe=False),
        program_words(program) if program is not None else None,
        ProgramOptions(
            samples_per_step=units.count if units and units.kind is UnitKind.SAMPLES else None,
            tokens_per_step=units.count if units and units.kind is UnitKind.TOKENS else None,
            step_pattern=recorded.step_pattern,
            probe=recorded.probe,
            per_process=units.per_process if units else False,
        ),
    )
    if program is not None and typed.program != program:
        raise UsageError(
            f"the program `{shlex.join(program_words(program))}` is not one a command line gives",
            why="dtrun records a script or an executable given by a path as an absolute path, "
            "and never an interpreter as an executable",
        )
    resolve_bench(recorded)


def _check_launches(recorded: BenchSpec) -> None:
    """--until-decided as runner/cli/sweep_options.py launches_of takes it (the most launches'
    range: runner/plan/checks.py, through resolve_bench)."""
    if recorded.until_decided and recorded.workload == "allreduce":
        raise UsageError("--until-decided stops on a scaling verdict, and allreduce gives none")
