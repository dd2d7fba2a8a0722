"""manifest.json records the dtrun command line as it was typed, shell-quoted and with every
secret hidden; the report's "Reproducing this run" shows it; manifests from before it was
recorded still resume and report."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from dtrun import redact
from dtrun.record.manifest import command_line
from dtrun.record.resume import read_resume
from dtrun.record.rundir import RunDir, write_manifest
from dtrun.record.runsfile import write_runs
from dtrun.redact import REDACTED, Redactor
from dtrun.report.build import build_report
from dtrun.spec.outcome import SweepStatus
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from dtrun.sweep.run import run_sweep
from tests.aws import BUCKET
from tests.factories import fake_run_dir
from tests.plans import sweep_plan
from tests.secret_shapes import CREDENTIALS, ENV, ENV_ARGS, PROGRAM_ARGS, leaks
from tests.unit.test_sweep_records import Recorded


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No secret remembered by the process: what is hidden, the command's own redaction hid."""
    monkeypatch.setattr(redact, "_process", Redactor())


def test_the_command_line_is_recorded_as_typed_and_shell_quoted():
    args = ["bench", "--nodes", "1,2", "--env", "MODE=fast mode", "--", "python", "t.py", "--lr",
            "0.1", "it's"]  # fmt: skip
    line = command_line(args)
    assert line == "dtrun bench --nodes 1,2 --env 'MODE=fast mode' -- python t.py --lr 0.1 " + (
        "'it'\"'\"'s'"
    )
    assert shlex.split(line) == ["dtrun", *args]  # pastes back into a shell as it was typed


def _secret_command() -> list[str]:
    credentials = [f"s3://AKIAIOSFODNN7EXAMPLE:{shape.secret}@{BUCKET}/p" for shape in CREDENTIALS]
    return [
        "bench", "--nodes", "1,2", *ENV_ARGS,
        "-e", f"DB_PASSWORD={CREDENTIALS[0].secret}",  # the short option
        f"--env=GITHUB_PAT={CREDENTIALS[1].secret}",  # --env=K=V
        f"-eDB_PASS={CREDENTIALS[0].secret}",  # -eK=V
        *(arg for url in credentials for arg in ("--results", url)),
        "--", "python", "t.py", *PROGRAM_ARGS,
    ]  # fmt: skip


def _secret_spec() -> BenchSpec:
    program = Program(ProgramKind.SCRIPT, "t.py", PROGRAM_ARGS)
    return BenchSpec("cmd", env=ENV, program=program)


def test_no_secret_of_env_program_arguments_or_results_reaches_the_recorded_command():
    line = command_line(_secret_command(), Redactor.of(_secret_spec().secrets()))
    assert leaks(line) == [] and leaks(json.dumps(line)) == []
    words = shlex.split(line)
    assert f"DB_PASS={REDACTED}" in words and f"-eDB_PASS={REDACTED}" in words
    assert f"--env=GITHUB_PAT={REDACTED}" in words
    assert f"ECHO_CMD=wandb login {REDACTED}" in words  # a secret repeated in a plain value
    assert f"s3://{REDACTED}@{BUCKET}/p" in words and "AKIAIOSFODNN7EXAMPLE" not in line
    assert words[words.index("--") :][:3] == ["--", "python", "t.py"]  # the rest as typed
    assert words[words.index("--api-key") + 1] == REDACTED


def test_the_manifest_records_the_command_with_no_secret_in_it(tmp_path, fixed_inventory):
    run_dir = RunDir(tmp_path / "cmd")
    run_dir.path.mkdir()
    write_manifest(run_dir, _secret_spec(), fixed_inventory, command=_secret_command())
    text = run_dir.manifest.read_text()
    assert leaks(text) == []
    assert shlex.split(json.loads(text)["command"])[:4] == ["dtrun", "bench", "--nodes", "1,2"]


def test_a_sweep_records_its_command_and_the_report_shows_it(tmp_path, fixed_inventory):
    spec = BenchSpec("shown", node_counts=(1, 2), steps=4, warmup=1, repeat=1)
    plan = sweep_plan(fixed_inventory, spec)
    args = ("bench", "--nodes", "1,2", "--env", "DB_PASS=Hunter2Password", "--steps", "4")
    run_sweep(plan, tmp_path, Recorded(), command=args)
    manifest = json.loads((tmp_path / "shown" / "manifest.json").read_text())
    typed = f"dtrun bench --nodes 1,2 --env 'DB_PASS={REDACTED}' --steps 4"
    assert manifest["command"] == typed
    report = (tmp_path / "shown" / "report.md").read_text()
    section = report[report.index("## Reproducing this run") :]
    assert f"```shell\n{typed}\n```" in section
    assert "Hunter2Password" not in report


def test_a_command_holding_backticks_cannot_end_its_code_block(tmp_path, fixed_inventory):
    run_dir = fake_run_dir(tmp_path / "ticks", BenchSpec("ticks"), fixed_inventory, {1: [1.0]})
    manifest = json.loads(run_dir.manifest.read_text())
    manifest["command"] = "dtrun bench -- python t.py '```' '````'"
    run_dir.manifest.write_text(json.dumps(manifest))
    build_report(run_dir)
    report = run_dir.report.read_text()
    assert f"`````shell\n{manifest['command']}\n`````" in report


@pytest.mark.parametrize(
    ("recorded", "shown"),
    [  # dtrun's own record: the word with a line break in bash's $'...', read back the same
        (shlex.join(["dtrun", "bench", "--env", "A=1\nrm -rf ~", "--", "t.py", "it's"]),
         "dtrun bench --env $'A=1\\nrm -rf ~' -- t.py 'it'\"'\"'s'"),
        # another tool's: a break between commands, a quote left open, shown as escapes
        ("dtrun bench\nrm -rf ~", "dtrun bench\\nrm -rf ~"),
        ("dtrun bench 'a\u2028b", "dtrun bench 'a\\u2028b"),
    ],
)  # fmt: skip
def test_a_recorded_command_with_a_line_break_is_shown_as_one_line(
    tmp_path, fixed_inventory, recorded, shown
):
    run_dir = fake_run_dir(tmp_path / "nl", BenchSpec("nl"), fixed_inventory, {1: [1.0]})
    manifest = json.loads(run_dir.manifest.read_text())
    manifest["command"] = recorded
    run_dir.manifest.write_text(json.dumps(manifest))
    build_report(run_dir)
    report = run_dir.report.read_text()
    assert f"```shell\n{shown}\n```" in report
    assert "\nrm -rf ~" not in report


def _without_command(path: Path, fixed_inventory) -> RunDir:
    """A run directory whose manifest was written before dtrun recorded the command."""
    spec = BenchSpec("old", node_counts=(1, 2), steps=4, warmup=1, repeat=1)
    run_dir = fake_run_dir(path / "old", spec, fixed_inventory, {1: [1.0]})
    manifest = json.loads(run_dir.manifest.read_text())
    del manifest["command"]
    run_dir.manifest.write_text(json.dumps(manifest))
    return run_dir


def test_a_manifest_without_the_command_still_reports(tmp_path, fixed_inventory):
    run_dir = _without_command(tmp_path, fixed_inventory)
    build_report(run_dir)
    section = run_dir.report.read_text().split("## Reproducing this run")[1]
    assert "```" not in section and "| nodes |" in section


def test_a_manifest_without_the_command_still_resumes(tmp_path, fixed_inventory):
    run_dir = _without_command(tmp_path, fixed_inventory)
    write_runs(run_dir, [], SweepStatus.INTERRUPTED, "interrupted")
    resumed = read_resume(run_dir.path, ())
    plan = sweep_plan(fixed_inventory, resumed.spec)
    run_sweep(plan, tmp_path, Recorded(), resumed=resumed, command=("bench", "--resume", "x"))
    manifest = json.loads(run_dir.manifest.read_text())
    assert "command" not in manifest  # the first run's command is not made up
    assert manifest["resumed"][-1]["command"] == "dtrun bench --resume x"
    assert json.loads(run_dir.runs.read_text())["status"] == SweepStatus.COMPLETE
