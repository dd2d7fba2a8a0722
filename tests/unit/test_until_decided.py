"""`dtrun bench --until-decided`: each node count launches until its efficiency interval decides
against the target, at least twice and at most --max-launches times, each look spending an even
share of the 5% error (runner/report/sequential.py, docs/report.md "Stopping when decided")."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dtrun import errors
from dtrun.cli.app import app
from dtrun.engines.embedded.executor import LocalExecutor
from dtrun.errors import RunInterruptedError
from dtrun.execute import LineSink
from dtrun.record.resume import read_resume
from dtrun.record.rundir import RunDir
from dtrun.report.build import build_report
from dtrun.report.metrics import scaling_rows
from dtrun.report.results import parse_train_result
from dtrun.report.sequential import (
    look_confidence,
    looks,
    replay,
    rounds_left,
    runs_next,
    sequential_rows,
)
from dtrun.report.stats import Verdict
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import RESULT_FILE, LaunchPlan
from dtrun.spec.outcome import NodeResult
from dtrun.spec.request import DEFAULT_MAX_LAUNCHES, EMBEDDED_MAX_LAUNCHES, BenchSpec
from dtrun.sweep.run import run_sweep
from tests.factories import fake_run_dir, noise_data, result_data, train_result
from tests.plans import sweep_plan

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def no_stop_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "_stop_signal", [])


# Launches' tokens/s a node, steady to a tenth of a percent: 2 nodes at half the efficiency of
# one (clearly below a 90% target), or on the target itself, wobbling by 5% (never decided).
STEADY = [1000.0, 1001.0, 999.0, 1000.5, 1000.2, 999.7, 1000.1, 999.9]
WOBBLY = [1000.0, 1050.0, 950.0, 1040.0, 960.0, 1030.0, 970.0, 1010.0]


def point(tokens: list[float], nodes: int, efficiency: float = 1.0):
    return [train_result(world=nodes, tokens_per_s=t * nodes * efficiency) for t in tokens]


def test_the_looks_spend_the_five_percent_error_in_shares_rising_from_look_to_look():
    assert looks(6) == 5  # after 2, 3, 4, 5 and 6 launches
    errors = [1 - look_confidence(6, launches) for launches in range(2, 7)]
    assert errors == pytest.approx([0.05 * j / 15 for j in range(1, 6)])
    assert sum(errors) == pytest.approx(0.05)
    assert look_confidence(2, 2) == pytest.approx(0.95)  # one look: the plain interval
    assert sum(1 - look_confidence(11, k) for k in range(2, 12)) == pytest.approx(0.05)


def test_a_look_uses_the_wider_interval_of_its_share_of_the_error():
    results = {1: point(WOBBLY[:3], 1), 2: point(WOBBLY[3:6], 2, 0.8)}
    plain = scaling_rows(results)[1]
    looked = scaling_rows(results, confidence=look_confidence(6, 3))[1]
    assert looked.efficiency == plain.efficiency
    assert None not in (looked.efficiency_low, looked.efficiency_high)
    assert None not in (plain.efficiency_low, plain.efficiency_high)
    assert (looked.efficiency_low or 0) < (plain.efficiency_low or 0)
    assert (looked.efficiency_high or 0) > (plain.efficiency_high or 0)
    assert "99.33% CI" in looked.verdict_reason and "95% CI" in plain.verdict_reason


def test_a_clear_loss_is_decided_after_two_launches():
    results = {1: point(STEADY[:2], 1), 2: point(STEADY[2:4], 2, efficiency=0.5)}
    stops, rows = replay(results, 6)
    assert stops[2].launches == 2 and stops[2].why == "decided"
    assert rows[2].verdict is Verdict.LOSES
    assert not runs_next(results, 2, 2, 6)
    assert not runs_next(results, 1, 2, 6)  # the baseline stops with its last point


def test_a_point_on_the_target_runs_to_the_maximum_and_says_so():
    results = {1: point(WOBBLY[:6], 1), 2: point(WOBBLY[2:8], 2, efficiency=0.9)}
    for launches in range(2, 6):  # each round: the baseline's turn, then the point's
        first = {n: rs[:launches] for n, rs in results.items()}
        assert runs_next(first, 1, launches, 6)
        assert runs_next({**first, 1: results[1][: launches + 1]}, 2, launches, 6)
    assert not runs_next(results, 2, 6, 6)
    stops, _ = replay(results, 6)
    assert stops[2].launches == 6 and stops[2].why == "maximum"
    row = sequential_rows(results, 6)[1]
    assert row.stopped == "maximum" and row.verdict is Verdict.INCONCLUSIVE
    assert "to decide: more than 100 launches a point at this spread" in row.verdict_reason
    assert "--repeat" not in row.verdict_reason


def test_never_fewer_than_two_launches_however_clear_the_first():
    results = {1: point(STEADY[:1], 1), 2: point(STEADY[1:2], 2, efficiency=0.1)}
    assert runs_next(results, 1, 1, 6)
    assert runs_next(results, 2, 1, 6)
    assert replay(results, 6) == ({}, {})


def test_a_point_that_decided_keeps_its_look_while_the_baseline_runs_on_for_another():
    results = {
        1: point(STEADY[:4], 1),
        2: point(STEADY[2:4], 2, efficiency=0.5),  # decided after 2
        4: point(WOBBLY[:4], 4, efficiency=0.9),  # still running
    }
    assert runs_next({n: rs[:2] for n, rs in results.items()}, 1, 2, 6)
    rows = sequential_rows(results, 6)
    assert [row.stopped for row in rows] == ["baseline", "decided", "ended"]
    assert rows[1].launches_n == 2 and rows[1].verdict is Verdict.LOSES
    # as of its look: against the baseline's first two launches, not all four
    at_look = scaling_rows({n: rs[:2] for n, rs in results.items()}, 0.9, look_confidence(6, 2))
    assert rows[1].efficiency_low == at_look[1].efficiency_low
    # each at its look's level: the last look's for the baseline, after 4 for the one running
    expected = [look_confidence(6, 6), look_confidence(6, 2), look_confidence(6, 4)]
    assert [row.confidence for row in rows] == pytest.approx(expected)


class Scripted(LocalExecutor):
    """An executor that runs nothing: each launch writes rank 0's result at the next of
    ``tokens[nodes]`` (tokens/s a node), as a node would, and counts the launches. The
    launches in ``stolen`` ((nodes, k), k from 0) record 8% CPU steal on every node."""

    def __init__(
        self, tokens: dict[int, list[float]], stolen: frozenset[tuple[int, int]] = frozenset()
    ) -> None:
        super().__init__()
        self.tokens = {nodes: list(values) for nodes, values in tokens.items()}
        self.launched: list[int] = []
        self.stolen = stolen

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        stolen = (plan.nnodes, self.launched.count(plan.nnodes)) in self.stolen
        self.launched.append(plan.nnodes)
        workdir.mkdir(parents=True, exist_ok=True)
        tokens = self.tokens[plan.nnodes].pop(0) * plan.nnodes
        names = [launch.node.name for launch in plan.launches]
        noise = noise_data(names, steal=0.08 if stolen else 0.001)
        data = result_data(world=plan.world_size, tokens_per_s=tokens, noise=noise)
        (workdir / RESULT_FILE).write_text(json.dumps(data))
        return tuple(
            NodeResult(launch.node.name, launch.node.address, 0, f"{launch.node.name}.log", 0.1)
            for launch in plan.launches
        )


def bench(
    run_id: str, until_decided: bool = True, max_launches: int = 6, repeat: int = 5
) -> BenchSpec:
    return BenchSpec(
        run_id=run_id,
        node_counts=(1, 2),
        steps=4,
        warmup=1,
        repeat=repeat,
        max_launches=max_launches,
        until_decided=until_decided,
    )


def summary_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((path / "summary.json").read_text())["rows"]
    return rows


def test_a_sweep_stops_launching_a_point_once_it_decides(
    tmp_path: Path, fixed_inventory: Inventory
):
    executor = Scripted({1: STEADY, 2: [t * 0.5 for t in STEADY]})
    run_sweep(sweep_plan(fixed_inventory, bench("clear")), tmp_path, executor)
    assert executor.launched == [1, 2, 1, 2]  # round by round; decided after two each
    rows = summary_rows(tmp_path / "clear")
    assert [(r["nodes"], r["launches_n"], r["stopped"]) for r in rows] == [
        (1, 2, "baseline"),
        (2, 2, "decided"),
    ]
    assert rows[1]["verdict"] == "loses"
    assert rows[1]["confidence"] == pytest.approx(look_confidence(6, 2))
    report = (tmp_path / "clear" / "report.md").read_text()
    assert "2 nodes, n = 10 steps x 2 launches (stopped: decided): **loses**" in report
    assert "until its CI decided, 2 to 6 launches; each CI is at its last look's level" in report
    assert "99.67% CI" in report
    assert "untimed; 2 to 6 launches per node count, until decided |" in report
    shown = runner.invoke(app, ["report", str(tmp_path / "clear")])
    assert shown.exit_code == 0, shown.output
    assert "loses (decided)" in shown.output
    assert "per-look interval" in shown.output


def test_a_sweep_on_the_target_stops_at_the_maximum(tmp_path: Path, fixed_inventory: Inventory):
    executor = Scripted({1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]})
    run_sweep(sweep_plan(fixed_inventory, bench("ambiguous", max_launches=4)), tmp_path, executor)
    assert executor.launched == [1, 2] * 4
    rows = summary_rows(tmp_path / "ambiguous")
    assert rows[1]["stopped"] == "maximum" and rows[1]["launches_n"] == 4
    assert rows[1]["verdict"] == "inconclusive"


def test_a_launch_in_steal_is_left_out_and_the_sweep_launches_on_to_decide(
    tmp_path: Path, fixed_inventory: Inventory
):
    # the 2-node point's second launch ran in 8% steal: its look waits for a third, and the
    # baseline, which has its two, waits with it
    executor = Scripted({1: STEADY, 2: [t * 0.5 for t in STEADY]}, frozenset({(2, 1)}))
    run_sweep(sweep_plan(fixed_inventory, bench("stolen")), tmp_path, executor)
    assert executor.launched == [1, 2, 1, 2, 2]
    rows = summary_rows(tmp_path / "stolen")
    assert [(r["nodes"], r["launches_n"], r["stopped"]) for r in rows] == [
        (1, 2, "baseline"),
        (2, 2, "decided"),
    ]
    assert rows[1]["verdict"] == "loses"  # not set aside: its interval has no noisy launch
    assert rows[1]["confidence"] == pytest.approx(look_confidence(6, 2))
    report = (tmp_path / "stolen" / "report.md").read_text()
    assert "Launch 2 of 3 is left out of the 2-node point's interval: node-0 lost 8%" in report
    assert "x 2 launches (1 more left out for noise) (stopped: decided): **loses**" in report


def test_a_point_whose_rounds_cannot_reach_its_next_look_stops_out_of_reach(
    tmp_path: Path, fixed_inventory: Inventory
):
    # on the target, never decided; its second launch in steal: 4 rounds give it 3 quiet ones
    executor = Scripted({1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}, frozenset({(2, 1)}))
    run_sweep(sweep_plan(fixed_inventory, bench("reach", max_launches=4)), tmp_path, executor)
    # round 3: the baseline, with its two, waits for the point's second quiet launch
    assert executor.launched == [1, 2, 1, 2, 2, 1, 2]
    rows = summary_rows(tmp_path / "reach")
    assert [(r["nodes"], r["launches_n"], r["stopped"]) for r in rows] == [
        (1, 3, "baseline"),
        (2, 3, "out of reach"),
    ]
    assert rows[1]["confidence"] == pytest.approx(look_confidence(4, 3))  # its last look's
    report = (tmp_path / "reach" / "report.md").read_text()
    assert "left its next look out of --max-launches' reach" in report


def test_a_sweep_stopped_after_it_stopped_a_point_out_of_reach_reports_that_stop(
    tmp_path: Path, fixed_inventory: Inventory
):
    # as above, then SIGTERM after the last launch: runs.json says interrupted, and the
    # rebuilt report keeps the stop the sweep made (not "the sweep ended before it decided")
    executor = Scripted({1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}, frozenset({(2, 1)}))
    run_sweep(sweep_plan(fixed_inventory, bench("late", max_launches=4)), tmp_path, executor)
    runs_file = tmp_path / "late" / "runs.json"
    runs = json.loads(runs_file.read_text())
    runs_file.write_text(json.dumps({**runs, "status": "interrupted"}))
    build_report(RunDir(tmp_path / "late"))
    rows = summary_rows(tmp_path / "late")
    assert [(r["nodes"], r["launches_n"], r["stopped"]) for r in rows] == [
        (1, 3, "baseline"),
        (2, 3, "out of reach"),
    ]


def test_a_stopped_sweep_s_counts_keep_the_rounds_they_had_when_it_stopped():
    bench_ = {"until_decided": True, "max_launches": 4, "repeat": 5}
    ran = [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2)]  # stopped before round 1's 3-node launch
    recorded = [{"nodes": n, "repeat": r, "status": "ok"} for r, n in ran]
    under_way = {"nodes": 3, "repeat": 1, "status": "interrupted"}
    runs = {"status": "interrupted", "runs": [*recorded, under_way]}
    assert rounds_left(bench_, runs) == {1: 2, 2: 2, 3: 3}
    assert rounds_left(bench_, {"status": "complete", "runs": recorded}) == 2
    assert rounds_left(bench_, {"status": "interrupted", "runs": [under_way]}) is None


def test_a_count_with_the_next_look_s_launches_waits_for_the_others(
    tmp_path: Path, fixed_inventory: Inventory
):
    # 2 and 4 nodes lose clearly; the 4-node point's second launch ran in steal
    halves = [t * 0.5 for t in STEADY]
    executor = Scripted({1: STEADY, 2: halves, 4: halves}, frozenset({(4, 1)}))
    spec = replace(bench("wait"), node_counts=(1, 2, 4))
    run_sweep(sweep_plan(fixed_inventory, spec), tmp_path, executor)
    assert executor.launched == [1, 2, 4, 1, 2, 4, 4]  # not a third 2-node launch
    rows = summary_rows(tmp_path / "wait")
    assert [(r["nodes"], r["launches_n"], r["stopped"]) for r in rows] == [
        (1, 2, "baseline"),
        (2, 2, "decided"),
        (4, 2, "decided"),
    ]
    report = (tmp_path / "wait" / "report.md").read_text()
    assert "4 nodes, n = 10 steps x 2 launches (1 more left out for noise)" in report
    # the Verdict's line says a launch was left out, not that nothing crossed a threshold
    assert "- **Noise**: quiet once 1 launch timed in noise was left out (see Noise)" in report
    assert "2 nodes, n = 10 steps x 2 launches (stopped" in report


def test_no_count_launches_once_the_baseline_can_bring_no_look(
    tmp_path: Path, fixed_inventory: Inventory
):
    # the baseline's first launch in steal; at most 3: after round 2's baseline launch no
    # look at 3 can come, and the point does not launch for it
    tokens = {1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}
    executor = Scripted(tokens, frozenset({(1, 0)}))
    run_sweep(sweep_plan(fixed_inventory, bench("base", max_launches=3)), tmp_path, executor)
    assert executor.launched == [1, 2, 1, 2, 1]
    rows = summary_rows(tmp_path / "base")
    assert [(r["launches_n"], r["stopped"]) for r in rows] == [(2, "baseline"), (2, "out of reach")]


def test_a_point_s_launch_for_a_look_that_never_came_is_said_unused(
    tmp_path: Path, fixed_inventory: Inventory
):
    # the baseline's third and fourth launches in steal: the point's third was taken for a
    # look at 3 that the baseline's fourth could still have brought
    tokens = {1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}
    executor = Scripted(tokens, frozenset({(1, 2), (1, 3)}))
    run_sweep(sweep_plan(fixed_inventory, bench("unused", max_launches=4)), tmp_path, executor)
    assert executor.launched == [1, 2, 1, 2, 1, 2, 1]
    rows = summary_rows(tmp_path / "unused")
    assert [(r["launches_n"], r["stopped"]) for r in rows] == [(2, "baseline"), (2, "out of reach")]
    report = (tmp_path / "unused" / "report.md").read_text()
    assert "x 2 launches (1 more after its last look, unused) (stopped undecided" in report
    noise = json.loads((tmp_path / "unused" / "summary.json").read_text())["noise"]["points"]
    assert [(p["launches"], p["unused"], p["left_out"]) for p in noise] == [
        (4, 0, [3, 4]),
        (2, 1, []),
    ]


def test_a_point_s_last_launch_in_noise_is_named_left_out_where_it_stopped_out_of_reach(
    tmp_path: Path, fixed_inventory: Inventory
):
    # at most 3; the point's third launch in steal: no round is left for a quiet third
    tokens = {1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}
    executor = Scripted(tokens, frozenset({(2, 2)}))
    run_sweep(sweep_plan(fixed_inventory, bench("own", max_launches=3)), tmp_path, executor)
    assert executor.launched == [1, 2, 1, 2, 1, 2]
    rows = summary_rows(tmp_path / "own")
    assert [(r["launches_n"], r["stopped"]) for r in rows] == [(3, "baseline"), (2, "out of reach")]
    report = (tmp_path / "own" / "report.md").read_text()
    assert "x 2 launches (1 more left out for noise) (stopped undecided" in report
    assert "Launch 3 of 3 is left out of the 2-node point's interval: node-0 lost 8%" in report
    noise = json.loads((tmp_path / "own" / "summary.json").read_text())["noise"]["points"]
    assert [(p["launches"], p["unused"], p["left_out"]) for p in noise] == [
        (3, 0, []),
        (3, 0, [3]),
    ]


def test_no_quiet_launch_leaves_no_look_and_every_launch_in_the_row():
    stolen = noise_data(["node-0", "node-1"], steal=0.08)

    def launch(nodes: int, tokens: float):
        data = result_data(world=nodes, tokens_per_s=tokens * nodes, noise=stolen)
        return parse_train_result(data, "test")

    none = {1: [launch(1, t) for t in WOBBLY[:2]], 2: [launch(2, t) for t in WOBBLY[2:4]]}
    assert runs_next(none, 1, 2, 4) and replay(none, 4) == ({}, {})  # 2 rounds to get 2
    # the baseline's third in noise too: one round left cannot give it two quiet launches
    third = {**none, 1: [*none[1], launch(1, WOBBLY[4])]}
    assert not runs_next(third, 2, 2, 4)
    assert not runs_next(none, 2, 4, 4)
    assert replay(none, 2, rounds_left=0)[0][2].why == "out of reach"
    row = sequential_rows(none, 2, rounds_left=0)[1]
    assert (row.stopped, row.launches_n) == ("out of reach", 2)  # all kept: it is unreliable


def test_a_sweep_recorded_before_launches_were_left_out_replays_as_it_ran(
    tmp_path: Path, fixed_inventory: Inventory
):
    spec = BenchSpec(run_id="old", node_counts=(1, 2), max_launches=6, until_decided=True)
    nodes = ["node-0", "node-1"]
    stolen = noise_data(nodes, steal=0.08)
    noise = {1: [noise_data(["node-0"])] * 2, 2: [noise_data(nodes), stolen]}
    tokens = {1: [1000.0, 1001.0], 2: [1000.0, 1001.0]}  # 50%: decided after 2
    run_dir = fake_run_dir(tmp_path / "old", spec, fixed_inventory, tokens, noise=noise)
    manifest = json.loads(run_dir.manifest.read_text())
    assert read_resume(run_dir.path, ()).leave_out  # a --resume goes on as it began
    assert manifest["bench"].pop("noisy_launches") == "left out"
    run_dir.manifest.write_text(json.dumps(manifest))  # as a dtrun before it wrote it
    assert not read_resume(run_dir.path, ()).leave_out
    build_report(RunDir(run_dir.path))
    rows = summary_rows(run_dir.path)
    assert (rows[1]["stopped"], rows[1]["launches_n"]) == ("decided", 2)
    assert rows[1]["verdict"] == "inconclusive"  # set aside for noise, as it was


def test_a_fixed_sweep_keeps_its_order_and_says_nothing_of_stopping(
    tmp_path: Path, fixed_inventory: Inventory
):
    executor = Scripted({1: STEADY, 2: [t * 0.5 for t in STEADY]})
    run_sweep(sweep_plan(fixed_inventory, bench("fixed", False, repeat=3)), tmp_path, executor)
    assert executor.launched == [1, 1, 1, 2, 2, 2]
    rows = summary_rows(tmp_path / "fixed")
    assert [r["stopped"] for r in rows] == [None, None]
    assert rows[1]["confidence"] == 0.95
    assert "looks" not in (tmp_path / "fixed" / "report.md").read_text()


def test_the_report_rebuilt_later_replays_the_same_looks(
    tmp_path: Path, fixed_inventory: Inventory
):
    spec = BenchSpec(run_id="later", node_counts=(1, 2), max_launches=6, until_decided=True)
    # tokens/s of the whole point: about 90% efficiency, 5% apart, 2 of 6 launches
    run_dir = fake_run_dir(
        tmp_path / "later", spec, fixed_inventory, {1: [1000.0, 1050.0], 2: [1800.0, 1900.0]}
    )
    build_report(RunDir(run_dir.path))
    rows = summary_rows(run_dir.path)
    assert rows[1]["stopped"] == "ended"  # the sweep ended before it decided
    assert rows[1]["verdict"] == "inconclusive"
    assert math.isclose(rows[1]["confidence"], look_confidence(6, 2))
    report = (run_dir.path / "report.md").read_text()
    assert "x 2 launches (the sweep ended before it decided)" in report


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--until-decided", "--max-launches", "1"], "--max-launches 1 is out of range"),
        (["--until-decided", "--max-launches", "1001"], "--max-launches 1001 is out of range"),
        (["--max-launches", "4", "--repeat", "3"], "this sweep's launches are fixed by --repeat"),
        (["--max-launches", "4", "--nodes", "2"], "it has no scaling verdict to wait for"),
        (["--max-launches", "4", "--workload", "allreduce"], "no scaling verdict to wait for"),
        (["--until-decided", "--repeat", "3"], "--repeat fixes the launches"),
        (["--until-decided", "--workload", "allreduce"], "the allreduce workload gives none"),
        (["--until-decided", "--nodes", "1"], "--nodes gives one node count (1)"),
        (["--until-decided", "--nodes", "2,2"], "--nodes gives one node count (2)"),
    ],
)
def test_a_bad_stopping_option_is_one_clear_message_and_exit_2(
    tmp_path: Path, args: list[str], said: str
):
    done = runner.invoke(app, ["bench", "--dry-run", "--output", str(tmp_path), *args])
    assert done.exit_code == 2, done.output
    assert said in done.output
    assert "Traceback" not in done.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # training at 2+ node counts: until decided by default, on the embedded cluster up to
        # its own most (EmbeddedEngine.max_launches)
        ([], "up to 12 launches"),
        (["--nodes", "1,2,4", "--", "python", "train.py"], "up to 12 launches"),  # a program too
        (["--repeat", "5"], "5 launches"),  # a fixed --repeat is the way out
        (["--nodes", "2"], "5 launches"),  # one node count: no verdict to wait for
        (["--workload", "allreduce"], "5 launches"),  # no scaling verdict either
    ],
)
def test_a_sweep_launches_until_decided_by_default_where_it_can_decide(
    tmp_path: Path, args: list[str], said: str
):
    done = runner.invoke(app, ["bench", "--dry-run", "--output", str(tmp_path), *args])
    assert done.exit_code == 0, done.output
    assert said in done.output
    assert ("up to" in said) == ("up to" in done.output)


def test_only_the_embedded_cluster_launches_past_six_by_default():
    from dtrun.engines.registry import ENGINES

    most = {engine.name: engine.max_launches for engine in ENGINES}
    assert most.pop("embedded") == EMBEDDED_MAX_LAUNCHES == 12
    assert set(most.values()) == {DEFAULT_MAX_LAUNCHES}  # ssh, slurm, spark, ray: 6
    assert {"ssh", "slurm", "spark", "ray"} <= set(most)


def test_the_dry_run_plans_the_rounds_up_to_the_maximum(tmp_path: Path):
    done = runner.invoke(
        app,
        ["bench", "--dry-run", "--output", str(tmp_path), "--until-decided", "--max-launches", "3"],
    )
    assert done.exit_code == 0, done.output
    assert "up to 3 launches" in done.output


class StoppedAt(Scripted):
    """``Scripted``, with a Ctrl-C arriving as launch number ``at`` (from 1) begins."""

    def __init__(
        self,
        tokens: dict[int, list[float]],
        at: int,
        stolen: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        super().__init__(tokens, stolen)
        self.at = at

    def run(
        self,
        plan: LaunchPlan,
        workdir: Path,
        *,
        timeout_s: float,
        on_line: LineSink,
        tag: str | None = None,
    ) -> tuple[NodeResult, ...]:
        if len(self.launched) + 1 == self.at:
            raise KeyboardInterrupt
        return super().run(plan, workdir, timeout_s=timeout_s, on_line=on_line, tag=tag)


def test_a_resumed_sweep_runs_only_the_launches_the_rule_still_owes(
    tmp_path: Path, fixed_inventory: Inventory, no_stop_yet: None
):
    tokens = {1: STEADY, 2: [t * 0.5 for t in STEADY]}
    with pytest.raises(RunInterruptedError):  # stopped as the 2-node point's second launch began
        run_sweep(sweep_plan(fixed_inventory, bench("cut")), tmp_path, StoppedAt(tokens, 4))
    resumed = read_resume(tmp_path / "cut", ())
    assert resumed.spec.until_decided and resumed.spec.max_launches == 6
    executor = Scripted({1: STEADY[2:], 2: [t * 0.5 for t in STEADY[1:]]})
    run_sweep(sweep_plan(fixed_inventory, resumed.spec), tmp_path, executor, resumed=resumed)
    assert executor.launched == [2]  # the second 2-node launch, and then the point had decided
    rows = summary_rows(tmp_path / "cut")
    assert [(r["launches_n"], r["stopped"]) for r in rows] == [(2, "baseline"), (2, "decided")]


def test_a_resumed_sweep_does_not_go_back_to_a_round_where_a_count_waited(
    tmp_path: Path, fixed_inventory: Inventory, no_stop_yet: None
):
    tokens = {1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}  # on the target: undecided
    stolen = frozenset({(2, 1)})  # the baseline waits in round 2 for the point's second quiet
    with pytest.raises(RunInterruptedError):  # stopped as round 3's baseline launch began
        run_sweep(sweep_plan(fixed_inventory, bench("gap")), tmp_path, StoppedAt(tokens, 6, stolen))
    assert sorted(p.parent.name + "/" + p.name for p in (tmp_path / "gap").glob("n*/r*")) == [
        "n1/r0", "n1/r1", "n1/r3", "n2/r0", "n2/r1", "n2/r2",
    ]  # fmt: skip
    resumed = read_resume(tmp_path / "gap", ())
    executor = Scripted({1: WOBBLY[2:], 2: [t * 0.9 for t in reversed(WOBBLY)][3:]})
    run_sweep(sweep_plan(fixed_inventory, resumed.spec), tmp_path, executor, resumed=resumed)
    assert not (tmp_path / "gap" / "n1" / "r2" / "result.json").exists()  # not gone back to
    assert executor.launched[:2] == [1, 2]  # round 3's, again
    rows = summary_rows(tmp_path / "gap")
    # the round the baseline waited is spent: 5 quiet launches each, no look at 6
    assert [(r["launches_n"], r["stopped"]) for r in rows] == [(5, "baseline"), (5, "out of reach")]


def _as_recorded_before_max_launches(run_dir: Path) -> None:
    """The manifest as dtrun wrote it while ``repeat`` held --max-launches (no field of its own)."""
    manifest = run_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    data["bench"]["repeat"] = data["bench"].pop("max_launches")
    manifest.write_text(json.dumps(data))


def test_a_sweep_recorded_when_repeat_held_max_launches_resumes_to_that_maximum(
    tmp_path: Path, fixed_inventory: Inventory, no_stop_yet: None
):
    tokens = {1: WOBBLY, 2: [t * 0.9 for t in reversed(WOBBLY)]}  # on the target: never decides
    with pytest.raises(RunInterruptedError):  # stopped as the 2-node point's second launch began
        run_sweep(sweep_plan(fixed_inventory, bench("old", max_launches=3)), tmp_path,
                  StoppedAt(tokens, 4))  # fmt: skip
    _as_recorded_before_max_launches(tmp_path / "old")
    resumed = read_resume(tmp_path / "old", ())
    assert resumed.spec.until_decided and resumed.spec.max_launches == 3
    executor = Scripted({1: WOBBLY[2:], 2: [t * 0.9 for t in reversed(WOBBLY)][1:]})
    run_sweep(sweep_plan(fixed_inventory, resumed.spec), tmp_path, executor, resumed=resumed)
    assert executor.launched == [2, 1, 2]  # up to 3 launches a point, not the default 6
    rows = summary_rows(tmp_path / "old")
    assert [(r["launches_n"], r["stopped"]) for r in rows] == [(3, "baseline"), (3, "maximum")]
    assert "2 to 3 launches per node count" in (tmp_path / "old" / "report.md").read_text()


def test_a_recorded_max_launches_and_repeat_are_read_each_for_itself(
    tmp_path: Path, fixed_inventory: Inventory
):
    spec = BenchSpec(run_id="both", node_counts=(1, 2), repeat=2, max_launches=4,
                     until_decided=True)  # fmt: skip
    run_dir = fake_run_dir(tmp_path / "both", spec, fixed_inventory, {1: [1000.0], 2: [1800.0]})
    build_report(RunDir(run_dir.path))
    assert "2 to 4 launches per node count" in (run_dir.path / "report.md").read_text()
    assert read_resume(run_dir.path, ()).spec.max_launches == 4
