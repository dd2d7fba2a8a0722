"""`dtrun bench --resume RUN_DIR` and `--rerun RUN_DIR`: the options they take, and the recorded
sweep they run (--rerun: all of it again, as a new run).

The sweep is the one the run directory records (runner/record/resume.py), every record of it
checked as `dtrun report` checks it before anything runs or is written: options that would
change it (node counts, steps, launcher, model, ...) are refused rather than ignored, even when
given at their default value. What may be given is where it runs (--hosts, --stack, --slurm,
--spark, --local-nodes, ...: the same or a new cluster), --env values given again for redacted
secrets, and how it is shown or kept.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from runner.cli.options import Where
from runner.errors import UsageError
from runner.record.resume import Resumed, read_resume, read_spec
from runner.spec.request import BenchSpec

# Options that do not change the sweep: allowed beside --resume.
AS_YOU_LIKE = {
    "resume", "env", "results", "check", "teardown", "dry_run", "quiet", "json_out", "wide",
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


def resume_request(ctx: typer.Context, path: Path, launching: Any) -> Resumed:
    given = given_options(ctx, AS_YOU_LIKE)
    if given:
        raise UsageError(
            f"--resume runs the sweep {path} records, and {', '.join(given)} would change it",
            fix=f"leave them out (`dtrun bench --resume {path}`, with --hosts, --stack, --slurm "
            "or --spark for another cluster), or start a new sweep without --resume",
        )
    from runner.cli.parse import parse_env

    env = parse_env(launching.env) if launching.env else ()
    resumed = read_resume(path, env)
    # Every record the report will read, each kept launch's result.json included, is checked
    # now, with the reader `dtrun report` and `dtrun compare` use: a damaged one is refused
    # before anything is launched or written, not after the sweep ran.
    from runner.report.recorded import read_recorded

    read_recorded(resumed.run_dir)
    return resumed


# Beside --rerun also where the new run is written and its id; never --resume.
RERUN_AS_YOU_LIKE = (AS_YOU_LIKE - {"resume"}) | {"rerun", "output", "run_id"}


def rerun_request(
    ctx: typer.Context, path: Path, launching: Any, command: list[str] | None, run_id: str
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
    from runner.cli.parse import parse_env

    env = parse_env(launching.env) if launching.env else ()
    spec = dataclasses.replace(read_spec(path, env, "--rerun"), run_id=run_id)
    source = ctx.get_parameter_source("output")
    given_output = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
    return spec, launching.output if given_output else path.resolve().parent
