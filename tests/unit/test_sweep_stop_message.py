"""What `dtrun bench` says it kept when a sweep stops: the report only where one was written
(a stop during the report's build, after the last launch, leaves none; docs/bench.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

import pytest

from dtrun.cli.bench import _sweep
from dtrun.errors import RunInterruptedError
from dtrun.record.rundir import RunDir
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import BenchSpec
from tests.plans import sweep_plan


def _stopped_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inventory: Inventory, report: bool
) -> str:
    run_dir = RunDir(tmp_path / "stopped")
    run_dir.path.mkdir()
    if report:
        run_dir.report.write_text("# report\n")

    def stopped(
        plan: Any, output: Any, executor: Any, events: Any, *args: Any, **kw: Any
    ) -> NoReturn:
        events.on_begin(run_dir)
        raise RunInterruptedError("stopped by SIGTERM", why="the report may be unfinished")

    monkeypatch.setattr("dtrun.sweep.run.run_sweep", stopped)
    monkeypatch.setenv("COLUMNS", "200")
    engine = SimpleNamespace(drain=lambda cluster, run_id: None, evictable=False)
    cluster = SimpleNamespace(on_wait=None, executor=None, ready=None, engine=engine, answered=None)
    plan = sweep_plan(inventory, BenchSpec(run_id="stopped", node_counts=(1,), steps=4, warmup=1))
    with pytest.raises(RunInterruptedError):
        _sweep(cluster, plan, SimpleNamespace(quiet=True, output=tmp_path), False)  # type: ignore[arg-type]
    return str(run_dir.path)


def test_a_sweep_stopped_before_its_report_was_written_does_not_say_it_kept_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fixed_inventory: Inventory,
) -> None:
    path = _stopped_sweep(tmp_path, monkeypatch, fixed_inventory, report=False)
    out = capsys.readouterr().out
    assert f"finished launches are kept in {path}" in out
    assert "the report are kept" not in out


def test_a_sweep_stopped_with_its_report_written_says_both_are_kept(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fixed_inventory: Inventory,
) -> None:
    path = _stopped_sweep(tmp_path, monkeypatch, fixed_inventory, report=True)
    assert f"finished launches and the report are kept in {path}" in capsys.readouterr().out
