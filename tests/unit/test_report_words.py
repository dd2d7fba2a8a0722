"""A report people finish: a default-shaped sweep's report.md stays within 900 words, noise
findings included (issue 40), on sweeps recorded on a loaded machine (tests/data/sweeps/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dtrun.record.rundir import RunDir
from dtrun.report.build import build_report
from tests.paths import TESTS

SWEEPS = TESTS / "data" / "sweeps"
MOST_WORDS = 900


def rebuilt(name: str, tmp_path: Path) -> tuple[str, dict[str, object]]:
    """The recorded sweep's report.md and summary.json, built afresh from its records."""
    run_dir = RunDir(tmp_path / name)
    shutil.copytree(SWEEPS / name, run_dir.path)
    build_report(run_dir)
    return run_dir.report.read_text(), json.loads(run_dir.summary.read_text())


@pytest.mark.parametrize("name", ["default-noisy", "repeat2-noisy"])
def test_a_noisy_sweep_s_report_md_stays_within_900_words(name: str, tmp_path: Path) -> None:
    text, summary = rebuilt(name, tmp_path)
    # the case the limit is for: noise findings on every point, the verdict set aside
    noise = summary["noise"]
    assert isinstance(noise, dict)
    assert [p["verdict"] for p in noise["points"]] == ["unreliable", "unreliable"]
    assert "- **Noise**: unreliable at 1 node" in text and "## Noise" in text
    assert len(text.split()) <= MOST_WORDS  # what `wc -w` counts


def test_the_default_sweep_recorded_is_default_shaped(tmp_path: Path) -> None:
    manifest = json.loads((SWEEPS / "default-noisy" / "manifest.json").read_text())
    bench = manifest["bench"]
    assert bench["node_counts"] == [1, 2] and bench["steps"] == 60 and bench["warmup"] == 10
    assert bench["until_decided"] is True and bench["repeat"] == 6
    text, _ = rebuilt("default-noisy", tmp_path)
    assert "until its CI decided, 2 to 6 launches" in text
    # its findings: other load at both points; its ranks' 1.46x on one machine's two cores is
    # a neighbour's slowing there, no straggler (runner/workloads/noise.py)
    assert "node-0 and node-1 (one machine) spent 79% of their CPU on other work" in text
    assert "straggler" not in text.split("## Noise")[1].split("\n## ")[0]
