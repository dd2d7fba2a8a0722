"""What each scaling point cost, the sweep's estimate and the prices, against figures worked
out by hand."""

from __future__ import annotations

import json

import pytest

from dtrun.azure.config import cluster_spec
from dtrun.azure.prices import Price, list_price, sweep_price
from dtrun.cli.cost import stack_hourly
from dtrun.errors import UsageError
from dtrun.plan.estimate import check_max_cost, estimate
from dtrun.report.build import build_report
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir, html_markdown

TEN = Price(10.0, "--price-per-node-hour")


@pytest.fixture
def priced_run(tmp_path, fixed_inventory):
    """1 and 2 nodes at 1,000 and 1,600 tokens/s (efficiency 0.8), one launch each of 360 s
    and 720 s, a sweep of 1,800 s on the 4-node cluster, at $10 a node-hour."""
    bench = BenchSpec(run_id="cost", node_counts=(1, 2), repeat=1)
    return fake_run_dir(
        tmp_path / "cost",
        bench,
        fixed_inventory,
        {1: [1000], 2: [1600]},
        price=TEN,
        launch_wall_s={1: 360.0, 2: 720.0},
        sweep_wall_s=1800.0,
    )


def test_each_point_costs_its_nodes_times_its_launches_wall_time(priced_run):
    cost = build_report(priced_run).cost
    assert cost is not None
    one, two = cost.points
    # 1 node x 360 s = 0.1 node-hours = $1; 2 nodes x 720 s = 0.4 node-hours = $4
    assert (one.node_hours, two.node_hours) == pytest.approx((0.1, 0.4))
    assert (one.cost_usd, two.cost_usd) == pytest.approx((1.0, 4.0))
    # nodes x $10 / (tokens/s x 3600) x 1e6: 10/3.6 and 20/5.76
    assert one.usd_per_million_tokens == pytest.approx(2.777778)
    assert two.usd_per_million_tokens == pytest.approx(3.472222)
    # step p50 = 8 x world x 64 / tokens/s: 0.512 s and 0.64 s; x nodes x $10 / 3600
    assert one.usd_per_step == pytest.approx(10 * 0.512 / 3600)
    assert two.usd_per_step == pytest.approx(2 * 10 * 0.64 / 3600)


def test_cost_efficiency_is_the_scaling_efficiency(priced_run):
    cost = build_report(priced_run).cost
    assert cost is not None
    two = cost.points[1]
    assert two.cost_per_token_vs_base == pytest.approx(1.25)  # 3.4722 / 2.7778 = 1 / 0.8
    assert two.cost_efficiency == pytest.approx(0.8) == two.efficiency


def test_the_sweep_pays_the_whole_cluster_for_its_wall_time(priced_run):
    cost = build_report(priced_run).cost
    assert cost is not None
    # 4 nodes x 1,800 s = 2 node-hours = $20, of which the points 0.5 ($5), idle 1.5 ($15)
    assert cost.paid_node_hours == pytest.approx(2.0)
    assert cost.total_cost_usd == pytest.approx(20.0)
    assert cost.launch_node_hours == pytest.approx(0.5)
    assert cost.idle_node_hours == pytest.approx(1.5)
    assert cost.idle_cost_usd == pytest.approx(15.0)


def test_summary_and_report_carry_the_cost(priced_run):
    build_report(priced_run)
    summary = json.loads(priced_run.summary.read_text())["cost"]
    assert summary["usd_per_node_hour"] == 10.0
    assert summary["price_source"] == "--price-per-node-hour"
    assert [p["cost_usd"] for p in summary["points"]] == pytest.approx([1.0, 4.0])
    assert summary["total_cost_usd"] == pytest.approx(20.0)
    text = priced_run.report.read_text()
    assert "## Cost" in text
    assert (
        "| 2 | 1 | 720.0 s | 0.4000 | $4.0000 | $3.4722 | $0.003556 | 1.25x | 80% | 80% |" in text
    )
    assert "| sweep wall time | 1800.0 s, of which the launches 1080.0 s" in text


def test_without_a_price_the_cost_columns_say_no_price(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="free", node_counts=(1, 2), repeat=1)
    run_dir = fake_run_dir(tmp_path / "free", bench, fixed_inventory, {1: [1000], 2: [1600]})
    cost = build_report(run_dir).cost
    assert cost is not None
    assert cost.total_cost_usd is None and cost.points[1].cost_usd is None
    assert cost.points[1].node_hours == pytest.approx(2 / 3600)  # still counted
    text = run_dir.report.read_text()
    assert "node-hours only;\n`--price-per-node-hour USD` prices a sweep" in text
    assert "| 2 | 1,600 | 1.60x | 80% (-) | **inconclusive** | 0.0006 node-h |" in text
    assert "| sweep wall time | not recorded" in html_markdown(run_dir)
    # no price: no cost columns, and the point's table behind <details> in report.html
    assert "| cost | per 1M tokens |" not in html_markdown(run_dir)
    assert "| 2 | 1 | 1.0 s | 0.0006 | 1.25x | 80% | 80% |" in html_markdown(run_dir)
    assert "| 2 | 1 | 1.0 s |" not in text


def test_list_prices_are_per_size_and_region():
    price = list_price("Standard_ND96isr_H100_v5", "EastUS")
    assert price is not None and price.usd_per_node_hour == 98.32
    assert "docs/facts.md" in price.source
    assert list_price("Standard_ND96isr_H100_v5", "westeurope") is None  # not read: left out
    assert list_price(None, "eastus") is None
    override = sweep_price(3.0, "Standard_ND96isr_H100_v5", "eastus")
    assert override == Price(3.0, "--price-per-node-hour")


def test_the_estimate_bills_the_cluster_for_every_launch():
    guess = estimate(
        (1, 2, 4), 3, workload="train", steps=60, timeout_s=600, cluster_nodes=4, price=TEN
    )
    # 9 launches x (60 s + 60 x 1 s) = 1,080 s; the points 7 x 3 x 120 s = 0.7 node-hours;
    # billed 4 nodes x 1,080 s = 1.2 node-hours = $12; at most 4 x 9 x 600 s = 6 = $60
    assert guess.launches == 9 and guess.launch_s == 120
    assert guess.point_node_hours == pytest.approx(0.7)
    assert guess.billed_node_hours == pytest.approx(1.2)
    assert guess.cost == pytest.approx(12.0)
    assert guess.ceiling_cost == pytest.approx(60.0)
    assert "a guess" in guess.lines()[0] and "$12.00" in guess.lines()[1]


def test_max_cost_refuses_an_estimate_above_it_saying_how_it_was_made():
    guess = estimate((1, 2), 5, workload="train", steps=60, timeout_s=600, cluster_nodes=2,
                     price=TEN)  # fmt: skip
    check_max_cost(guess, 7.0)  # $6.67: under
    with pytest.raises(UsageError) as refused:
        check_max_cost(guess, 5.0)
    assert refused.value.exit_code == 2
    message = refused.value.message
    assert "$6.67 is above --max-cost 5" in message
    assert "60 s start-up + 60 steps x 1 s, guessed" in message
    assert "--repeat" in message


def test_a_guess_longer_than_the_timeout_is_cut_to_it_and_never_above_the_ceiling():
    # 600 steps guess 60 s + 600 x 1 s = 660 s a launch, but --timeout 60 stops each at 60 s:
    # 10 launches x 60 s on the cluster's 2 nodes = 1,200 node-seconds = 1/3 node-hour = $3.33
    # at $10, and at most the same (before: 660 s a launch, $36.67, refused under --max-cost 5)
    guess = estimate((1, 2), 5, workload="train", steps=600, timeout_s=60, cluster_nodes=2,
                     price=TEN)  # fmt: skip
    assert guess.launch_s == 60
    assert guess.billed_node_hours == pytest.approx(1 / 3)
    assert guess.cost == pytest.approx(10 / 3) and guess.ceiling_cost == pytest.approx(10 / 3)
    assert "660 s, cut to --timeout 60 s" in guess.lines()[0]
    check_max_cost(guess, 5.0)  # the worst case, $3.33, is under the limit
    with pytest.raises(UsageError, match="a shorter --timeout"):
        check_max_cost(guess, 3.0)
    # an all-reduce sweep: a flat 120 s cut to --timeout 30: 3 launches x 30 s on 1 node =
    # 0.025 node-hours = $0.30 at $12
    twelve = Price(12.0, "--price-per-node-hour")
    flat = estimate((1,), 3, workload="allreduce", steps=60, timeout_s=30, cluster_nodes=1,
                    price=twelve)  # fmt: skip
    assert flat.cost == pytest.approx(0.30) and flat.ceiling_cost == pytest.approx(0.30)


def test_the_estimate_under_the_timeout_keeps_the_guess_and_the_ceiling_above_it():
    # 120 s guessed under --timeout 600: estimate $12 (as above), at most 4 x 9 x 600 s = $60
    guess = estimate(
        (1, 2, 4), 3, workload="train", steps=60, timeout_s=600, cluster_nodes=4, price=TEN
    )
    assert guess.launch_s == 120 and "cut to" not in guess.lines()[0]
    assert guess.cost == pytest.approx(12.0) and guess.ceiling_cost == pytest.approx(60.0)


def test_max_cost_accepts_a_sweep_the_timeout_bounds_under_it(tmp_path):
    from typer.testing import CliRunner

    from dtrun.cli.app import app

    result = CliRunner().invoke(
        app,
        ["bench", "--dry-run", "--output", str(tmp_path / "runs"), "--nodes", "1,2",
         "--repeat", "5", "--steps", "600", "--timeout", "60",
         "--price-per-node-hour", "10", "--max-cost", "5"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "estimated cost: $3.33 at $10 a node-hour (--price-per-node-hour); at most $3.33" in (
        result.stdout
    )


def test_up_says_the_hourly_cost_of_nodes_and_head():
    spec = cluster_spec(
        {"dtrun:adminCidrs": ["203.0.113.4/32"], "dtrun:nodeCount": 4, "dtrun:location": "eastus"}
    )
    line = stack_hourly(spec)
    assert "4 x Standard_ND96isr_H100_v5 at $98.32 an hour" in line
    assert "= $393.28 an hour" in line  # the head has no list price here: not added
    assert "head VM Standard_D4s_v5 (not in dtrun's price list)" in line


def test_up_without_a_list_price_says_so_and_where_there_is_one():
    spec = cluster_spec({"dtrun:adminCidrs": ["203.0.113.4/32"], "dtrun:location": "westeurope"})
    line = stack_hourly(spec)
    assert "no list price for Standard_ND96isr_H100_v5 in westeurope" in line
    assert "eastus, eastus2, westus" in line


def test_up_prints_the_hourly_cost_before_pulumi_creates_anything(monkeypatch):
    from typer.testing import CliRunner

    from dtrun.azure.stack import StackError
    from dtrun.cli.app import app

    said_before_up: list[bool] = []

    def pulumi_up_stopped(stack, on_output, on_config=None):
        # the real up checks the settings, calls on_config, then runs `pulumi up`
        on_config(cluster_spec({"dtrun:adminCidrs": ["203.0.113.4/32"]}))
        said_before_up.append(True)
        raise StackError("`dtrun up --stack dev` failed", why="stopped before pulumi up")

    monkeypatch.setattr("dtrun.azure.stack.up", pulumi_up_stopped)
    result = CliRunner().invoke(app, ["up", "--stack", "dev"])
    assert said_before_up and result.exit_code == 1
    assert "cost: 2 x Standard_ND96isr_H100_v5 at $98.32 an hour" in result.stdout


def test_an_allreduce_sweep_costs_its_points_but_no_tokens(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="ar", node_counts=(1, 2), repeat=1, workload="allreduce")
    run_dir = fake_run_dir(
        tmp_path / "ar", bench, fixed_inventory, {1: [10.0], 2: [8.0]}, price=TEN,
        launch_wall_s={1: 36.0, 2: 36.0},
    )  # fmt: skip
    cost = build_report(run_dir).cost
    assert cost is not None
    assert [point.cost_usd for point in cost.points] == pytest.approx([0.1, 0.2])
    assert cost.points[1].usd_per_million_tokens is None and cost.points[1].cost_efficiency is None
    assert "| 2 | 1 | 36.0 s | 0.0200 | $0.2000 | - | - | - | - | - |" in run_dir.report.read_text()


def test_a_program_s_launches_are_estimated_at_the_timeout_with_the_probe_s_after_them():
    # nothing says how long a user's program trains: 2 points x 3 launches x 300 s on 2 nodes
    # = 1 node-hour = $10, its own ceiling
    guess = estimate((1, 2), 3, workload="program", steps=60, timeout_s=300, cluster_nodes=2,
                     price=TEN)  # fmt: skip
    assert guess.launch_s == 300 and guess.cost == pytest.approx(10.0)
    assert guess.ceiling_cost == pytest.approx(10.0)
    assert "your program's length is unknown before it runs" in guess.lines()[0]
    # --probe at the 2-node point only (1 process at 1 node): 1.5 launches' time a launch
    probed = estimate((1, 2), 3, workload="program", steps=60, timeout_s=300, cluster_nodes=2,
                      price=TEN, probed=(2,))  # fmt: skip
    assert probed.launch_s == 450 and probed.cost == pytest.approx(15.0)
    assert probed.ceiling_cost == pytest.approx(15.0)
    assert "--probe's launch after each at 1 of 2 points" in probed.lines()[0]
    with pytest.raises(UsageError) as refused:
        check_max_cost(probed, 5.0)
    assert "--steps" not in refused.value.fix  # the program decides how long it trains


def test_the_probe_s_node_hours_count_at_the_points_it_follows():
    # --probe at 1 process per node: no probe after the 1-node point's launches, one after
    # each 8-node launch; 3 launches of 300 s each: 1 x 3 x 300 + 8 x 3 x 600 = 4.25
    # node-hours (the mean over the points gave 9 x 3 x 450 s = 3.375)
    from dataclasses import replace

    from dtrun.cli.cost import bench_estimate
    from dtrun.spec.request import BenchSpec, Program, ProgramKind

    spec = BenchSpec(run_id="r", node_counts=(1, 8), repeat=3, timeout_s=300,
                     price_per_node_hour=10.0)  # fmt: skip
    spec = replace(spec, program=Program(ProgramKind.SCRIPT, "train.py", ()), probe=True)
    guess = bench_estimate(spec, None, 8)
    assert guess.point_node_hours == pytest.approx(4.25)
    assert guess.billed_node_hours == pytest.approx(8 * 6 * 450 / 3600)  # the cluster's 8 nodes
    assert "--probe's launch after each at 1 of 2 points" in guess.how
    # 2 processes a node: the 1-node point has two ranks, and the probe follows it too
    two = bench_estimate(replace(spec, procs_per_node=2), None, 8)
    assert two.point_node_hours == pytest.approx(9 * 3 * 600 / 3600)
