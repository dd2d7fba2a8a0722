"""A secret --env value that is also a name dtrun writes (a node's name or address, a record's
key or status) would mask dtrun's own records: refused at input, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dtrun import redact
from dtrun.cli.app import app
from dtrun.cli.ownwords import record_words
from dtrun.redact import Redactor
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import BenchSpec
from tests.aws import BUCKET, stored
from tests.factories import fake_run_dir


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's dtrun knows only the secrets its own command was given, as a new process."""
    monkeypatch.setattr(redact, "_process", Redactor())


def dry_run(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["run", "--dry-run", "--output", str(tmp_path), *args, "--", "python", "t.py"]
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("node-0", "a node's name"),
        ("127.0.0.2", "a node's address"),
        ("running", "a key or value of its records"),
        ("status", "a key or value of its records"),
        ("log_path", "a key or value of its records"),
        ("unning", "a key or value of its records"),  # inside one: masked within it, and
        # said so (before, the message said "unning" was a name dtrun writes)
    ],
)
def test_a_secret_that_is_a_name_dtrun_writes_is_refused_at_input(
    tmp_path: Path, value: str, what: str
) -> None:
    code, output = dry_run(tmp_path, "-n", "1", "-e", f"DB_PASS={value}")
    assert code == 2, output
    how = "lies inside" if value == "unning" else "is also"
    assert f"the value of DB_PASS {how} a name dtrun writes in its records ({what})" in output
    assert "Traceback" not in output
    assert not list(tmp_path.iterdir())


def test_a_bench_is_refused_alike(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "--dry-run", "--nodes", "1", "--output", str(tmp_path), "-e",
              "API_KEY=node-0"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "the value of API_KEY is also a name dtrun writes" in result.output


@pytest.mark.parametrize("value", ["s3cr3t-value", "ok", "node-0"])
def test_other_values_still_run(tmp_path: Path, value: str) -> None:
    """A real secret; a short one, masked only as NAME=VALUE; a node's name under a name
    that is not secret."""
    name = "NODE_LABEL" if value == "node-0" else "DB_PASS"
    code, output = dry_run(tmp_path, "-n", "1", "-e", f"{name}={value}")
    assert code == 0, output


def test_the_record_words_are_derived_from_the_record_shapes_results_and_enums() -> None:
    words = record_words()
    assert {"log_path", "node", "address", "nodes_on_machine"} <= words  # keys
    assert {"running", "unrecorded", "complete", "ok"} <= words  # enum values
    assert not {"__builtins__", "ValueError"} & words


def test_a_secret_in_the_programs_arguments_that_is_a_name_dtrun_writes_is_refused(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(
        app, ["run", "--dry-run", "--output", str(tmp_path), "--", "python", "t.py", "--token",
              "running"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "a secret in the program's arguments is also a name dtrun writes" in result.output


def test_this_machines_secret_that_is_a_name_dtrun_writes_masks_no_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dtrun cannot refuse a variable it was not given: it stops looking for it, as for a
    value too short to look for."""
    monkeypatch.setenv("MY_API_KEY", "torchrun")
    code, output = dry_run(tmp_path, "-n", "1")
    assert code == 0, output
    assert "via torchrun" in output
    assert "<redacted>" not in output


def test_dtrun_report_writes_an_unmasked_report_under_such_a_machine_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_inventory: Inventory
) -> None:
    run = tmp_path / "run"
    fake_run_dir(run, BenchSpec(run_id="run", node_counts=(1, 2)), fixed_inventory,
                 {1: [1000.0], 2: [1800.0]})  # fmt: skip
    monkeypatch.setenv("MY_API_KEY", "launches")  # inside manifest.json's max_launches
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert '"launches":' in (run / "summary.json").read_text()
    for name in ("summary.json", "report.md", "report.html"):
        assert "<redacted>" not in (run / name).read_text(), name


def test_an_uploaded_copy_is_not_masked_by_this_machines_secret_that_dtrun_writes(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print('hello')\n")
    monkeypatch.setenv("MY_API_KEY", "status")  # run.json's key
    result = CliRunner().invoke(
        app, ["run", "-n", "1", "--output", str(tmp_path / "runs"), "--results",
              f"s3://{BUCKET}/runs", "--", "python", "t.py"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    copies = stored(s3, "runs/")
    run_json = next(body for key, body in copies.items() if key.endswith("/run.json"))
    assert b'"status": "ok"' in run_json
    (here,) = (tmp_path / "runs").glob("*/run.json")
    assert run_json == here.read_bytes()  # redacted as the record here is


def test_an_uploaded_copy_is_not_masked_by_this_machines_secret_that_is_a_node_s_name(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine's secret that is a node's name is spared once the cluster is open and its
    names known: the uploaded copy is redacted as the records here are. Before, the copy was
    redacted of it still, run.json's `"node": "<redacted>"` unreadable to `dtrun report`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print('hello')\n")
    monkeypatch.setenv("MY_API_KEY", "node-0")  # the embedded cluster's first node
    result = CliRunner().invoke(
        app, ["run", "-n", "1", "--output", str(tmp_path / "runs"), "--results",
              f"s3://{BUCKET}/runs", "--", "python", "t.py"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    copies = stored(s3, "runs/")
    run_json = next(body for key, body in copies.items() if key.endswith("/run.json"))
    (here,) = (tmp_path / "runs").glob("*/run.json")
    assert b'"node-0"' in here.read_bytes()
    assert run_json == here.read_bytes()  # redacted as the record here is


def test_the_record_words_hold_check_json_s_statuses_in_a_fresh_process() -> None:
    """The enum walk sees loaded enums only: in a fresh dtrun process check.json's statuses
    (CheckStatus, `completed`) were missing until something else had imported them."""
    import subprocess
    import sys

    code = "from dtrun.cli.ownwords import record_words; print('completed' in record_words())"
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "True", said.stderr
