"""A run directory reached through a symbolic link (`dtrun report LINK`, `compare`, `predict`,
`bench -o LINK`): the link is resolved once, and every read and write goes to the directory it
named then, whatever the link names later."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.record.rundir import RunDir, create_run_dir
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir

runner = CliRunner(env={"COLUMNS": "200"})


def _two_runs(tmp_path: Path, inventory: Inventory) -> tuple[Path, Path, Path]:
    """runs/a and runs/b, and a link to runs/a."""
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    fake_run_dir(a, BenchSpec(run_id="a"), inventory, {1: [1000.0], 2: [1500.0]})
    fake_run_dir(b, BenchSpec(run_id="b"), inventory, {1: [1000.0], 2: [1900.0]})
    link = tmp_path / "latest"
    link.symlink_to(a)
    return a, b, link


def _retarget_after_reading(
    monkeypatch: pytest.MonkeyPatch, link: Path, to: Path, module: str
) -> None:
    """The link moved to ``to`` once ``module``'s analyse has read the run."""
    import importlib

    where = importlib.import_module(module)
    read = where.analyse

    def analyse_then_move(run_dir: RunDir) -> Any:
        report = read(run_dir)
        link.unlink()
        link.symlink_to(to)
        return report

    monkeypatch.setattr(where, "analyse", analyse_then_move)


def test_report_through_a_link_writes_where_the_link_pointed_when_given(
    tmp_path: Path, fixed_inventory: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, link = _two_runs(tmp_path, fixed_inventory)
    _retarget_after_reading(monkeypatch, link, b, "dtrun.report.build")
    done = runner.invoke(app, ["report", str(link), "--json"])
    assert done.exit_code == 0, done.output
    assert (a / "report.md").is_file() and (a / "summary.json").is_file()
    assert not (b / "report.md").exists() and not (b / "summary.json").exists()
    printed = json.loads(done.stdout)
    assert printed["run_id"] == "a"
    assert printed["run_dir"] == str(a)


def test_compare_predict_and_report_name_the_directory_a_link_resolves_to(
    tmp_path: Path, fixed_inventory: Inventory
) -> None:
    a, _, link = _two_runs(tmp_path, fixed_inventory)
    done = runner.invoke(app, ["report", str(link)])
    assert done.exit_code == 0, done.output
    assert f"rebuilt {a / 'report.md'}" in " ".join(done.output.split())
    same = runner.invoke(app, ["compare", str(link), str(a)])
    assert same.exit_code == 0, same.output
    assert "A and B are the same run" in same.output
    predicted = runner.invoke(app, ["predict", str(link), "--nodes", "4", "--json"])
    assert predicted.exit_code == 0, predicted.output


def test_a_link_to_a_folder_without_a_run_is_refused_naming_the_argument(
    tmp_path: Path,
) -> None:
    link = tmp_path / "etc"
    link.symlink_to("/etc")
    done = runner.invoke(app, ["report", str(link)])
    assert done.exit_code == 2
    assert f"{link} is not a `dtrun bench` run directory" in " ".join(done.output.split())
    assert "Traceback" not in done.output


def test_bench_output_through_a_link_is_resolved_once(tmp_path: Path) -> None:
    (tmp_path / "disk").mkdir()
    (tmp_path / "runs").symlink_to(tmp_path / "disk")
    run_dir = create_run_dir(tmp_path / "runs", "x")
    assert run_dir.path == tmp_path / "disk" / "x"
    assert run_dir.path.is_dir() and not run_dir.path.is_symlink()


def test_bench_output_with_no_link_on_the_way_keeps_the_path_as_given(tmp_path: Path) -> None:
    run_dir = create_run_dir(tmp_path / "runs", "x")
    assert run_dir.path == tmp_path / "runs" / "x"


def test_resume_through_a_link_reads_and_names_the_directory_it_resolves_to(
    tmp_path: Path, fixed_inventory: Inventory
) -> None:
    from tests.conftest import run_dtrun

    a, _, link = _two_runs(tmp_path, fixed_inventory)
    done = run_dtrun("bench", "--resume", str(link), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the sweep in {a} is complete" in " ".join(done.stdout.split())
