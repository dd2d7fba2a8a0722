"""`dtrun bench --until-decided` on the embedded cluster: a tiny 1,2-node sweep launches round
by round, each point between 2 and --max-launches times, says in its report why each point
stopped, and runs again the same way with --rerun (the option is in the manifest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtrun.report.sequential import look_confidence
from tests.conftest import run_dtrun

pytestmark = pytest.mark.e2e


def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _checked(run: Path) -> list[dict[str, Any]]:
    """The run's summary rows, after checking its launches ran round by round, each point
    between 2 and 3 launches, as many as its row, its Noise entry and its reason say (a launch
    in steal or other load left out: docs/report.md "Noise")."""
    runs = _read(run / "runs.json")
    assert runs["status"] == "complete"
    order = [(r["nodes"], r["repeat"]) for r in runs["runs"]]
    assert order == sorted(order, key=lambda launch: (launch[1], launch[0]))  # round by round
    summary = _read(run / "summary.json")
    rows: list[dict[str, Any]] = summary["rows"]
    assert [row["nodes"] for row in rows] == [1, 2]
    base, two = rows
    assert base["stopped"] == "baseline"
    assert two["stopped"] in ("decided", "maximum", "out of reach")
    taken = {n: sum(1 for nodes, _ in order if nodes == n) for n in (1, 2)}
    assert 2 <= taken[2] <= 3 and taken[1] <= 3
    noise = {p["nodes"]: p for p in summary["noise"]["points"]}
    for row in rows:  # every launch is in its row, left out for noise, or unused
        point = noise[row["nodes"]]
        assert row["launches_n"] + len(point["left_out"]) + point["unused"] == taken[row["nodes"]]
    noisy = "measured in noise" in two["verdict_reason"]
    if two["stopped"] == "decided":  # unless the Noise section took the verdict back
        assert two["verdict"] in ("scales", "loses") or noisy, two["verdict_reason"]
        said = "(stopped: decided, then set aside for noise)" if noisy else "(stopped: decided)"
    elif two["stopped"] == "maximum":
        assert two["launches_n"] == 3 and two["verdict"] == "inconclusive"
        said = "--max-launches reached"
    else:  # launches in noise (left out, or all kept: too few were quiet) left no look in reach
        limits = summary["noise"]["thresholds"]
        assert any(
            p["left_out"]
            or (p["steal_share"] or 0) > limits["steal_share"]
            or (p["other_cores"] or 0) > limits["other_cores"]
            for p in noise.values()
        ), summary["noise"]
        assert two["verdict"] == "inconclusive"
        said = "left its next look out of --max-launches' reach"
    # 2 looks (after 2 and 3 launches), spending 1/3 and 2/3 of the 5%
    assert two["confidence"] == pytest.approx(look_confidence(3, two["launches_n"]))
    assert said in (run / "report.md").read_text()
    return rows


def test_a_sweep_until_decided_stops_each_point_between_two_and_the_maximum(no_leftovers):
    out = no_leftovers / "runs"
    done = run_dtrun(
        "bench", "--nodes", "1,2", "--steps", "8", "--warmup", "2", "--until-decided",
        "--max-launches", "3", "--no-health-gate", "--quiet", "--output", str(out),
        "--run-id", "ud", "--port", "29770", cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _checked(out / "ud")
    manifest = _read(out / "ud" / "manifest.json")
    assert manifest["bench"]["until_decided"] is True and manifest["bench"]["max_launches"] == 3

    again = run_dtrun(
        "bench", "--rerun", str(out / "ud"), "--run-id", "ud2", "--quiet",
        cwd=no_leftovers, timeout=400,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    _checked(out / "ud2")
    assert _read(out / "ud2" / "manifest.json")["bench"]["until_decided"] is True
