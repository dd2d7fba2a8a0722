"""`dtrun bench`, `dtrun run` and `dtrun exec`: the commands that start processes on a cluster."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dtrun.cli import options as opts
from dtrun.cli.common import command_secrets, console, echo, print_json, typed_command
from dtrun.cli.cost import (
    before_line,
    checked_usd,
    print_estimate,
    refuse_early,
    refuse_on,
)
from dtrun.cli.display import SweepDisplay, print_sweep_plan
from dtrun.cli.groups import by_name, grouped
from dtrun.cli.options import Launching, Where
from dtrun.cli.session import session
from dtrun.cli.summary import print_summary, sweep_json
from dtrun.cli.sweep_options import SweepOptions, launches_of
from dtrun.cli.workload_options import (
    AllreduceOptions,
    GateOptions,
    ModelOptions,
    ProgramOptions,
    StrategyOptions,
)
from dtrun.errors import DtrunError, RunDirWriteError, UsageError
from dtrun.redact import remember_secrets
from dtrun.spec.request import BenchSpec
from dtrun.spec.text import one_line

if TYPE_CHECKING:
    from dtrun.engines.base import Cluster
    from dtrun.plan.resolve import ResolvedBench
    from dtrun.plan.sweep import SweepPlan
    from dtrun.record.resume import Resumed
    from dtrun.record.rundir import RunDir
    from dtrun.sweep.run import Sweep

app = typer.Typer()


def run_id_of(launching: Launching) -> str:
    from dtrun.cli.parse import check_run_id, new_run_id

    return check_run_id(launching.run_id) if launching.run_id is not None else new_run_id()


def launch_request(launching: Launching) -> dict[str, Any]:
    """The LaunchRequest fields `dtrun bench` and `dtrun run` both take from their options."""
    from dtrun.cli.parse import parse_env, parse_platforms

    return {
        "launcher": launching.launcher,
        "procs_per_node": launching.procs_per_node,
        "env": parse_env(launching.env or []),
        "rdzv_port": launching.port,
        "launch": launching.options,
        "nccl_debug": launching.nccl_debug,
        "cluster_env": launching.cluster_env,
        "platform_env": parse_platforms(launching.platform_env or []),
        "success": launching.success,
    }


def bench_spec(
    sweep: SweepOptions,
    model: ModelOptions,
    strategy: StrategyOptions,
    allreduce: AllreduceOptions,
    gate: GateOptions,
    launching: Launching,
    most: int,
) -> BenchSpec:
    """The options of `dtrun bench`, as one BenchSpec (parsed, not yet checked); ``most``: the
    engine's --max-launches (Engine.max_launches)."""
    from dtrun.cli.parse import parse_node_counts
    from dtrun.plan.presets import resolve_model

    # Parsed in the order the command always checked them, so the first bad value is reported.
    counts = parse_node_counts(sweep.nodes)
    run_id = run_id_of(launching)
    shape = {name: getattr(model, name) for name in ("layers", "d_model", "heads", "seq_len")}
    resolved_model = resolve_model(model.preset, vocab=model.vocab, **shape)
    price = checked_usd("price_per_node_hour", sweep.price_per_node_hour)
    max_cost = checked_usd("max_cost", sweep.max_cost)
    # Every option reaches the BenchSpec field of its name (--timeout: timeout_s); then the
    # values parsed or checked first, and the groups' own spec sections, in their place.
    by_option = {
        **by_name(sweep, BenchSpec, timeout_s="timeout"),
        **by_name(strategy, BenchSpec),  # dtype
        **by_name(allreduce, BenchSpec),  # busbw
    }
    parsed = {
        "node_counts": counts,
        "model": resolved_model,
        "strategy": strategy.spec,
        "allreduce": allreduce.spec,
        "health": gate.spec,
        "price_per_node_hour": price,
        "max_cost": max_cost,
        **launches_of(sweep, counts, most),  # until_decided, repeat, max_launches
    }
    return BenchSpec(run_id, **{**launch_request(launching), **by_option, **parsed})


@app.command(context_settings={"allow_interspersed_args": False})
@grouped
def bench(  # noqa: PLR0913 - typer's context (for --resume) beside the option groups
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="Your own program and its arguments, after --, measured instead of the "
            "built-in workload ({nodes}, {world_size}, {procs_per_node} are filled in).",
            show_default=False,
        ),
    ] = None,
    *,
    sweep: SweepOptions,
    program_options: ProgramOptions,
    model: ModelOptions,
    strategy: StrategyOptions,
    allreduce: AllreduceOptions,
    gate: GateOptions,
    launching: Launching,
    where: Where,
    json_out: opts.Json = False,
    wide: opts.Wide = False,
) -> None:
    """Run a scaling sweep and write runs/<run-id>/ with logs, results and a report.

    On the machines of --hosts, --stack or --outputs over SSH, or of --slurm or --spark; with
    none of them, on the embedded local cluster: simulated nodes on 127.0.0.2, 127.0.0.3, ...
    of this machine, each running its real launch script.

    dtrun bench --nodes 1,2,4 --repeat 3
    dtrun bench --hosts hosts.yaml --nodes 1,2 -- python train.py --batch-size 32
    """
    from dtrun.plan.resolve import resolve_bench
    from dtrun.record.runsfile import record_stop_after_sweep

    with session(launching, where, json_out=json_out, drains=True) as current:
        if json_out and launching.dry_run:
            raise UsageError(
                "--json prints a sweep's summary, and --dry-run runs no sweep",
                fix="leave out one of them",
            )
        from_record = _recorded(ctx, sweep, launching, command)
        if from_record is not None:
            spec, resumed, output = from_record
            if resumed is not None and resumed.complete:
                _nothing_to_resume(resumed.run_dir, json_out)
                return
            current.launching = launching = replace(launching, output=output)
        else:
            if sweep.yes:
                raise UsageError(
                    "--yes approves the program and environment a --rerun or --resume RUN_DIR "
                    "records, and neither was given",
                    fix="leave out --yes",
                )
            resumed = None
            from dtrun.engines.registry import chosen

            most = chosen(where).max_launches
            spec = bench_spec(sweep, model, strategy, allreduce, gate, launching, most)
            spec = with_program(spec, command, program_options)
        # never printed, recorded or uploaded, even in an error
        remember_secrets(command_secrets(spec))
        resolved = resolve_bench(spec)
        refuse_early(resolved.spec, where, resolved.largest)  # --max-cost: nothing asked for yet
        try:
            with current.cluster(resolved.spec, resolved.largest) as cluster:
                done = _bench_on(cluster, resolved, launching, json_out, resumed)
                if done is None:  # --dry-run
                    return
                current.ended("the sweep", partial(record_stop_after_sweep, done.run_dir))
                # the result first, then the report's files (that an upload of the run carries),
                # while the engine lets go of its nodes (Cluster.release), then their path
                cluster.release()
                print_summary(done, wide=wide)
            if json_out:
                print_json(sweep_json(done.run_dir))
        except KeyboardInterrupt:
            current.record_late_stop()
            raise


def _nothing_to_resume(run_dir: RunDir, json_out: bool) -> None:
    """--resume on a sweep that ended with every launch run: said, nothing changed."""
    path = run_dir.path
    echo(
        f"nothing to resume: the sweep in {path} is complete, every launch recorded. "
        f"`dtrun report {path}` rebuilds its report; `dtrun bench --rerun {path}` runs it again."
    )
    if json_out:
        print_json(sweep_json(run_dir))


def _recorded(
    ctx: typer.Context, sweep: SweepOptions, launching: Launching, command: list[str] | None
) -> tuple[BenchSpec, Resumed | None, Path] | None:
    """--rerun or --resume: the sweep the run directory records, and where it is written;
    None for a new sweep. A link to the run directory is followed once (resolved_once): its
    records are read, approved and written there alone."""
    from dtrun.record.rundir import resolved_once

    if sweep.rerun is not None:  # the recorded sweep again, as a new run
        from dtrun.cli.resume import rerun_request

        run_id, rerun = run_id_of(launching), resolved_once(sweep.rerun)
        spec, output = rerun_request(ctx, rerun, launching, command, run_id, sweep.yes)
        return spec, None, output
    if sweep.resume is None:
        return None
    resume = resolved_once(sweep.resume)
    from dtrun.cli.resume import resume_request

    if command:
        raise UsageError(
            f"--resume runs the sweep {resume} records, its program included, and a "
            "program after -- would change it",
            fix=f"leave out the program (`dtrun bench --resume {resume}`), or start a "
            "new sweep without --resume",
        )
    resumed = resume_request(ctx, resume, launching, sweep.yes)
    return resumed.spec, resumed, resume.parent


def with_program(spec: BenchSpec, command: list[str] | None, units: ProgramOptions) -> BenchSpec:
    """`dtrun bench -- PROGRAM`: the user's program and what its steps process (the checks:
    runner/plan/checks.py step_units)."""
    from dtrun.cli.parse import parse_command
    from dtrun.plan.checks import step_units
    from dtrun.spec.request import UnitKind

    describing = "--step-pattern" if units.step_pattern is not None else None
    describing = "--probe" if units.probe else describing
    counts = {UnitKind.SAMPLES: units.samples_per_step, UnitKind.TOKENS: units.tokens_per_step}
    step = step_units(
        counts,
        per_process=units.per_process,
        mode=spec.mode,
        program=bool(command),
        describing=describing,
    )
    if not command:
        return spec
    program = parse_command(command, Path.cwd())
    pattern = units.step_pattern  # checked with the sweep (runner/plan/checks.py)
    return replace(spec, program=program, units=step, step_pattern=pattern, probe=units.probe)


def _bench_on(
    cluster: Cluster,
    resolved: ResolvedBench,
    launching: Launching,
    json_out: bool,
    resumed: Resumed | None,
) -> Sweep | None:
    """The sweep on the open cluster; None after a --dry-run's plan is printed."""
    from dtrun.plan.sweep import plan_sweep

    guess = refuse_on(resolved.spec, cluster.inventory)  # before the run directory
    if launching.dry_run:
        print_sweep_plan(
            plan_sweep(resolved.redacted(), cluster.inventory),
            cluster.preview,
            launching.output / resolved.spec.run_id,
        )
        print_estimate(guess, before_line(launching.output, cluster.inventory, guess.price))
        return None
    if cluster.engine.runs_this_python:
        _require_packages(resolved)
    plan = plan_sweep(resolved, cluster.inventory)
    program = resolved.spec.program
    if program is not None and cluster.engine.runs_shell:  # before the run directory is made
        from dtrun.cluster.program import check_program

        widest = plan.points[-1]
        nodes = widest.every_node
        cluster.contacted = time.monotonic()  # the readiness wait counts from here
        held = partial(cluster.executor.command, hold=True)  # the staging's session too
        cluster.answered = check_program(held, program, nodes)
    return _sweep(cluster, plan, launching, json_out, resumed)


def _require_packages(resolved: ResolvedBench) -> None:
    import importlib.util

    from dtrun.extras import install_fix
    from dtrun.spec.request import Framework

    for package in ("torch", *resolved.packages):
        if importlib.util.find_spec(package) is None:
            strategy = resolved.strategy
            needs = (
                f"--strategy {strategy.name}"
                if strategy is not None and strategy.framework is Framework.DEEPSPEED
                else f"--launcher {resolved.launch.name}"
            )
            raise UsageError(
                f"{needs} needs {package}, and this Python has none",
                why=f"the embedded cluster's nodes run {sys.executable}",
                fix=install_fix(package),
            )


def _sweep(
    cluster: Cluster,
    plan: SweepPlan,
    launching: Launching,
    json_out: bool,
    resumed: Resumed | None = None,
) -> Sweep:
    from dtrun.sweep.run import run_sweep

    out = console()
    display = SweepDisplay(out, plan, quiet=launching.quiet)
    cluster.on_wait = display.on_waiting
    try:
        with display.progress:
            return run_sweep(
                plan,
                launching.output,
                cluster.executor,
                display.events(),
                cluster.ready,
                cluster.engine.drain(cluster, plan.spec.run_id),  # --drain-failing
                resumed,
                cluster.executor.command if cluster.engine.evictable else None,
                command=typed_command(),
                report_later=True,
                answered=cluster.answered,  # the program check's: gone later, they vanished
            )
    except DtrunError as exc:
        # a run directory that could not be written has no report: its message says what is kept
        if display.run_dir is not None and not isinstance(exc, RunDirWriteError):
            # a stop during the report's build, after the last launch, leaves none
            kept = "and the report are" if display.run_dir.report.exists() else "are"
            out.print(one_line(f"finished launches {kept} kept in {display.run_dir.path}"))
            if json_out and display.run_dir.summary.exists():
                # scripts get the partial summary too, unless it cannot be read: then the
                # sweep's own error, raised below, is the one to show
                with contextlib.suppress(DtrunError):
                    print_json(sweep_json(display.run_dir))
        raise
