"""Every number an option takes has a range, declared on the field that holds it
(runner/spec/bounds.py): a value past it, nan or inf is refused with exit 2 and one message by
the command that takes it, before anything is planned; the ranges are in --help and
docs/bench.md ("Bounds"); a dry run's size does not grow with --repeat."""

from __future__ import annotations

import math
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.cli.workload_options import ProgramOptions
from dtrun.engines.registry import EngineOptions
from dtrun.errors import PlanError
from dtrun.plan.checks import check_bound
from dtrun.spec.bounds import Bound, bounds_on
from dtrun.spec.request import (
    AllreduceSpec,
    BenchSpec,
    HealthGate,
    LauncherOptions,
    ModelSpec,
    RunSpec,
    StrategySpec,
)
from tests.paths import REPO
from tests.unit.test_bad_input import refused

ROOT = REPO
# every class whose fields hold an option's value: the specs, the engines' and the program's
HOLDERS = (BenchSpec, RunSpec, ModelSpec, StrategySpec, AllreduceSpec, HealthGate,
           LauncherOptions, EngineOptions, ProgramOptions)  # fmt: skip


def _declared() -> dict[str, Bound]:
    """Every option's range, as its fields declare it: flag -> range."""
    found: dict[str, Bound] = {}
    for holder in HOLDERS:
        for bound in bounds_on(holder).values():
            assert found.setdefault(bound.flag, bound) == bound, f"{bound.flag}: two ranges"
    return found


BOUNDS = _declared()

# flag -> (the command and the options it needs beside the flag, a value past the ceiling)
PAST = {
    "--nodes": (["bench"], "10001"),
    "--local-nodes": (["bench"], "10001"),
    "--procs-per-node": (["bench"], "1025"),
    "--port": (["bench"], "65535"),
    "--tf-ps": (["bench", "--launcher", "tensorflow"], "1025"),
    "--steps": (["bench"], "1000001"),
    "--warmup": (["bench", "--steps", "1000000"], "1000000"),
    "--repeat": (["bench"], "1000000000"),
    "--max-launches": (["bench", "--until-decided"], "1001"),
    "--batch": (["bench"], "1048577"),
    "--global-batch": (["bench", "--mode", "strong"], "16777217"),
    "--layers": (["bench"], "1025"),
    "--d-model": (["bench"], "1048577"),
    "--heads": (["bench"], "65537"),
    "--seq-len": (["bench"], "16777217"),
    "--vocab": (["bench"], "16777217"),
    "--micro-batches": (["bench", "--strategy", "pipeline"], "65537"),
    "--pp-size": (["bench", "--strategy", "pipeline"], "1048577"),
    "--stages-per-rank": (
        ["bench", "--strategy", "pipeline", "--schedule", "interleaved-1f1b"],
        "1025",
    ),
    "--ar-iters": (["bench", "--workload", "allreduce"], "1000001"),
    "--ar-warmup": (["bench", "--workload", "allreduce"], "1000001"),
    "--project-tokens": (["bench"], "1000000000000001"),
    "--samples-per-step": (["bench", "--", "python", "x.py"], "1000000000001"),
    "--tokens-per-step": (["bench", "--", "python", "x.py"], "1000000000000001"),
    "--target-efficiency": (["bench"], "1.5"),
    "--timeout": (["bench"], "1e308"),
    "--ready-timeout": (["bench"], "2592001"),
    "--connect-timeout": (["bench"], "1e308"),
    "--queue-timeout": (["bench", "--slurm"], "1e308"),
    "--health-threshold": (["bench"], "1e308"),
    "--price-per-node-hour": (["bench"], "1e308"),
    "--max-cost": (["bench", "--price-per-node-hour", "1"], "1e308"),
}
FLOATS = [flag for flag, bound in BOUNDS.items() if bound.above]


def test_every_bounded_option_has_a_case_past_its_ceiling():
    assert set(PAST) == set(BOUNDS)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bench_or_run(command: list[str], workdir: Path, *rest: str) -> list[str]:
    """The command with its options, then ``rest``, then the program after -- if it has one."""
    cut = command.index("--") if "--" in command else len(command)
    before, program = command[1:cut], command[cut:]
    return [command[0], "--output", str(workdir / "runs"), "--dry-run", *before, *rest, *program]


@pytest.mark.parametrize("flag", list(PAST))
def test_a_value_past_an_options_ceiling_is_refused_naming_the_range(workdir, flag):
    command, value = PAST[flag]
    bound = BOUNDS[flag]
    # the refusal names the ceiling (--warmup's is its rule against --steps)
    ceiling = f"at most {bound.rule.rpartition('at most ')[2]}"
    ceiling = "less than --steps" if flag == "--warmup" else ceiling
    ceiling = "at most 1000" if flag == "--max-launches" else ceiling  # its own message
    refused(_bench_or_run(command, workdir, flag, value), workdir, ceiling)


@pytest.mark.parametrize("flag", [flag for flag in PAST if flag not in FLOATS])
def test_a_whole_number_of_400_digits_is_refused_naming_the_option(workdir, flag):
    """Python holds it as an int; math.isfinite and a ':g' message took it to a float and
    raised OverflowError (a traceback, exit 1)."""
    command, _ = PAST[flag]
    said = "--max-launches" if flag == "--max-launches" else f"{flag} "
    refused(_bench_or_run(command, workdir, flag, "9" * 400), workdir, said)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("flag", FLOATS)
def test_nan_and_inf_are_refused_wherever_a_float_is_taken(workdir, flag, value):
    command, _ = PAST[flag]
    refused(_bench_or_run(command, workdir, flag, value), workdir, flag)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--timeout", "1e308", "--", "python", "x.py"],
        ["run", "--nodes", "10001", "--", "python", "x.py"],
        ["run", "--procs-per-node", "1025", "--", "python", "x.py"],
    ],
)
def test_run_refuses_the_same_ranges(workdir, args):
    flag = args[1]
    refused(_bench_or_run(args[:1], workdir, *args[1:]), workdir, f"{flag} must be")


@pytest.mark.parametrize("flag", ["--connect-timeout", "--ready-timeout", "--local-nodes"])
def test_exec_refuses_the_same_ranges(workdir, flag):
    refused(["exec", flag, PAST[flag][1], "--", "true"], workdir, f"{flag} must be")


@pytest.mark.parametrize("flag", list(BOUNDS))
def test_each_range_holds_its_ends_and_nothing_past_them(flag):
    bound = BOUNDS[flag]
    lowest = math.nextafter(bound.low, math.inf) if bound.above else bound.low
    for inside in (lowest, bound.high):
        check_bound(bound, inside)
    below = bound.low if bound.above else bound.low - 1
    for outside in (below, bound.high + 1, math.nan, math.inf, -math.inf):
        with pytest.raises(PlanError, match=re.escape(f"{flag} must be")):
            check_bound(bound, outside)


def test_a_billion_repeats_are_refused_at_once_without_planning_them(tmp_path):
    """On a dry run, --repeat 1000000000 grew memory at about 140 MB/s and printed nothing.
    Under 1 GiB of address space and 60 s it must end with the refusal."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    result = subprocess.run(
        [sys.executable, "-m", "dtrun.cli", "bench", "--dry-run", "--repeat", "1000000000",
         "--output", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=60, preexec_fn=limited, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--repeat must be at least 1 and at most 1,000" in result.stderr
    assert "Traceback" not in result.stderr


def _dry_run(tmp_path: Path, repeat: int) -> list[str]:
    result = CliRunner().invoke(
        app,
        ["bench", "--dry-run", "--nodes", "1,2", "--repeat", str(repeat),
         "--output", str(tmp_path / "runs")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_a_dry_runs_size_does_not_grow_with_repeat(tmp_path):
    once, many = _dry_run(tmp_path, 1), _dry_run(tmp_path, 1000)
    assert len(many) == len(once)
    # the same plan line for line; only the counts and the estimate's figures differ
    assert sum(len(line) for line in many) - sum(len(line) for line in once) < 200
    assert "# ==== point: 2 nodes, 1000 launches -> n2/r0 to n2/r999, the same scripts" in (
        "\n".join(many)
    )


def _help_rows(command: str) -> dict[str, str]:
    """Each option of ``command --help`` -> its help text, one line per option at 400 columns."""
    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
    rows: dict[str, str] = {}
    flag = None
    for line in out.splitlines():
        text = " ".join(line.replace("│", " ").split())
        match = re.match(r"(--[a-z-]+)\b", text)
        if match:
            flag = match.group(1)
            rows[flag] = text
        elif flag is not None and text:
            rows[flag] += " " + text
    return rows


def test_help_shows_each_options_range():
    for command in ("bench", "run", "exec"):
        rows = _help_rows(command)
        for flag, bound in BOUNDS.items():
            if flag in rows and not (command == "exec" and flag == "--nodes"):
                assert f"({bound.words})" in rows[flag], f"{command} {flag}: {rows[flag]}"
    assert set(BOUNDS) <= set(_help_rows("bench"))


def test_docs_list_every_range_as_the_table_has_it():
    text = (ROOT / "docs" / "bench.md").read_text()
    section = text.split("### Bounds", 1)[1].split("\n#", 1)[0]
    documented = dict(re.findall(r"^\| `(--[a-z-]+)` \| (.+?) \|$", section, re.MULTILINE))
    assert documented == {flag: bound.words for flag, bound in BOUNDS.items()}
