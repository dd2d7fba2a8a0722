"""The command line: exit codes and messages for bad input, --dry-run, --help."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner.cli import app

runner = CliRunner(env={"COLUMNS": "200"})


def dtrun(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes needs node counts of at least 1"),
        (["--nodes", "two"], "--nodes 'two' is not a list of node counts"),
        (["--nodes", "1,2", "--local-nodes", "1"], "cannot run on 2 nodes"),
        (["--nodes", "64"], "the embedded cluster cannot simulate 64 nodes"),
        (["--local-nodes", "0"], "the embedded cluster cannot simulate 0 nodes"),
        (["--workload", "resnet"], "unknown workload 'resnet'"),
        (["--launcher", "torchrn"], "did you mean 'torchrun'"),
        (["--env", "NOVALUE"], "--env 'NOVALUE' is not KEY=VALUE"),
        (["--warmup", "30"], "--warmup must be at least 0 and less than --steps"),
        (["--run-id", "../x"], "cannot name a run directory"),
        (
            ["--mode", "strong", "--nodes", "1,3", "--global-batch", "8"],
            "cannot split a global batch of 8 over 3 processes",
        ),
    ],
)
def test_bad_input_gives_one_message_and_exit_code_2(tmp_path, args, message):
    result = dtrun("bench", "--output", str(tmp_path / "runs"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


def test_an_output_dir_that_cannot_be_written_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = dtrun("bench", "--output", str(blocker / "runs"), "--nodes", "1")
    assert result.exit_code == 2
    assert "cannot write the run directory" in result.stderr
    assert "--output" in result.stderr
    assert "Traceback" not in result.output


def test_an_existing_run_directory_is_never_overwritten(tmp_path):
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    result = dtrun("bench", "--output", str(tmp_path / "runs"), "--run-id", "taken")
    assert result.exit_code == 2
    assert "already exists" in result.stderr


def test_unknown_flags_and_non_numbers_are_usage_errors():
    assert dtrun("bench", "--frobnicate").exit_code == 2
    bad = dtrun("bench", "--steps", "many")
    assert bad.exit_code == 2
    assert "Invalid value for '--steps'" in bad.output


def test_dry_run_prints_every_node_script_and_runs_nothing(tmp_path):
    result = dtrun(
        "bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path / "runs"),
        "--env", "HF_TOKEN=hunter2", "--env", "NCCL_DEBUG=INFO",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if line.startswith("# ---- ")]
    assert len(headers) == 3  # 1 node + 2 nodes
    assert result.stdout.count("#!/usr/bin/env bash") == 3
    assert "--local-addr=127.0.0.3" in result.stdout
    assert "export NCCL_DEBUG=INFO" in result.stdout
    assert "hunter2" not in result.stdout
    assert not Path(tmp_path / "runs").exists()


def test_help_lists_every_command_with_a_line_of_help():
    result = dtrun("--help")
    assert result.exit_code == 0
    for command in ("bench", "report"):
        assert command in result.stdout


def test_report_on_a_directory_that_is_not_a_run_says_so(tmp_path):
    result = dtrun("report", str(tmp_path))
    assert result.exit_code == 1
    assert "manifest.json is missing" in result.stderr
    assert "Traceback" not in result.output
