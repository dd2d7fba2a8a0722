"""benchmarks/verdict_rate.py --from --replay-max: a kept sitting read again, each run's launches
looked at as a sweep of another maximum would have (issue 41: an old and a new maximum on the
same launches)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dtrun.record.rundir import RunDir
from dtrun.report.build import build_report
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir, noise_data
from tests.paths import REPO


def _script() -> ModuleType:
    path = REPO / "benchmarks" / "verdict_rate.py"
    spec = importlib.util.spec_from_file_location("verdict_rate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _kept(where: Path, inventory: Inventory, index: int, tokens: dict[int, list[float]]) -> None:
    run_id = f"defaults-{index}"
    spec = BenchSpec(run_id=run_id, node_counts=(1, 2), max_launches=12, until_decided=True)
    build_report(RunDir(fake_run_dir(where / run_id, spec, inventory, tokens).path))


def test_a_kept_sitting_replayed_at_a_smaller_maximum_decides_fewer(
    tmp_path: Path, fixed_inventory: Inventory, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):  # fmt: skip
    # run 0: 2 nodes at 80% of 2x, launches 8% apart: 3 launches cannot decide, 12 do
    ones = [1000.0, 1090.0, 920.0, 1080.0, 930.0, 1070.0, 940.0, 1060.0, 950.0, 1050.0] * 2
    twos = [2 * 0.8 * t for t in [930.0, 1075.0, 1085.0, 925.0, 1065.0, 935.0, 1055.0, 945.0]]
    _kept(tmp_path, fixed_inventory, 0, {1: ones[:12], 2: twos + twos[:4]})
    # run 1: at 50%, steady: decided after 2 launches at either maximum
    _kept(tmp_path, fixed_inventory, 1, {1: [1000.0, 1002.0], 2: [1000.0, 1003.0]})
    argv = ["verdict_rate.py", "--rounds", "2", "--from", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--replay-max", "3", "--replay-max", "12"])
    _script().main()
    out = capsys.readouterr().out
    assert "replayed at most 3 launches: every interval decided in 1 of 2 runs" in out
    assert "replayed at most 12 launches: every interval decided in 2 of 2 runs" in out
    assert "defaults run 0: 2 nodes: loses" in out
    assert "wall time per run" not in out  # runs read again have none
    assert "defaults run 1: 2 nodes: loses" in out


def test_reading_a_sitting_again_and_keeping_one_are_refused_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    argv = ["verdict_rate.py", "--from", str(tmp_path), "--keep", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stopped:
        _script().main()
    assert stopped.value.code == 2


def test_a_run_says_how_many_launches_were_left_out_for_noise(
    tmp_path: Path, fixed_inventory: Inventory, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):  # fmt: skip
    spec = BenchSpec(run_id="defaults-0", node_counts=(1, 2), max_launches=12, until_decided=True)
    calm = [noise_data(["node-0"], steal=0.001)] * 3
    nodes = ["node-0", "node-1"]
    stolen = [noise_data(nodes, steal=0.001), noise_data(nodes, steal=0.09)]
    tokens = {1: [1000.0, 1002.0, 1001.0], 2: [1000.0, 1300.0, 1003.0]}
    noise = {1: calm, 2: [*stolen, noise_data(nodes, steal=0.001)]}
    run = fake_run_dir(tmp_path / "defaults-0", spec, fixed_inventory, tokens, noise=noise)
    build_report(RunDir(run.path))
    argv = ["verdict_rate.py", "--rounds", "1", "--from", str(tmp_path), "--replay-max", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    _script().main()
    out = capsys.readouterr().out
    assert "2 nodes: loses 50.0% [" in out  # the stolen launch at 1,300 left out
    assert "2 launches, decided (1 more left out for noise)" in out
    # at most 2: the first two launches, one of them stolen: no look, undecided
    assert "replayed at most 2 launches: every interval decided in 0 of 1 runs" in out
