"""The report's Noise section and summary.json's ``noise``, from hand-made results."""

from __future__ import annotations

import json

import pytest

from dtrun.errors import DamagedRunError
from dtrun.record.rundir import RunDir, record_machine_noise
from dtrun.report.build import build_report
from dtrun.report.noise import point_noise
from dtrun.report.results import parse_train_result
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir, html_markdown, noise_data, result_data

NODES = ["node-0", "node-1"]


def noise_section(run_dir: RunDir, html: bool = False) -> str:
    """The Noise section of report.md, or with ``html`` of report.html (its <details> too)."""
    text = html_markdown(run_dir) if html else run_dir.report.read_text()
    return text[text.index("## Noise") : text.index("## Time to train")]


def build(tmp_path, inventory, noise, repeat=1):
    bench = BenchSpec(run_id="n", repeat=repeat)
    throughput = {1: [1000.0] * repeat, 2: [1900.0] * repeat}
    run_dir = fake_run_dir(tmp_path / "n", bench, inventory, throughput, noise=noise)
    build_report(run_dir)
    return run_dir


def quiet(nodes=NODES, probe_s=(0.030, 0.031)):
    return noise_data(nodes, steal=0.001, other_cores=0.05, probe_s=list(probe_s) or None)


def test_a_quiet_sweep_says_no_point_crossed_a_threshold(tmp_path, fixed_inventory):
    run_dir = build(
        tmp_path, fixed_inventory, {1: [noise_data(["node-0"], other_cores=0.05)], 2: [quiet()]}
    )
    section = noise_section(run_dir)
    assert "No measured point crossed a noise threshold" in section
    assert "|---" not in section  # quiet: the figures are in report.html and summary.json
    assert "Every point's noise figures: report.html and summary.json `noise`." in section
    rows = noise_section(run_dir, html=True).split("\n|---")[1].split("\n\n")[0]
    assert rows.count("| quiet |") == 2 and "unreliable" not in rows  # no row says it
    summary = json.loads(run_dir.summary.read_text())["noise"]
    assert [p["verdict"] for p in summary["points"]] == ["quiet", "quiet"]
    assert summary["thresholds"] == {
        "steal_share": 0.05,
        "other_cores": 0.2,
        "straggler_ratio": 1.25,
        "shared_straggler_ratio": 2.0,
    }


def test_other_load_on_one_node_makes_its_point_unreliable_and_names_the_node(
    tmp_path, fixed_inventory
):
    noisy = quiet()
    noisy["nodes"][1].update(other_cores=0.24, other_share=0.12)
    run_dir = build(tmp_path, fixed_inventory, {1: [quiet(["node-0"], ())], 2: [noisy]})
    section = noise_section(run_dir)
    assert (
        "The 2-node point is unreliable: node-1 spent 12% of its CPU on other work "
        "(0.24 cores over 1.0 s), launch 1 of 1" in section
    )
    assert "| 2 | 1 of 1 | 0.1% | 0.24 cores (12.0%) |" in noise_section(run_dir, html=True)
    point = json.loads(run_dir.summary.read_text())["noise"]["points"][1]
    assert (point["verdict"], point["other_where"], point["other_cores"]) == (
        "unreliable",
        "node-1",
        0.24,
    )


def test_a_slow_rank_is_named_a_straggler_with_its_node_and_ratio(tmp_path, fixed_inventory):
    slow = quiet(probe_s=(0.030, 0.048))
    run_dir = build(tmp_path, fixed_inventory, {1: [quiet(["node-0"], ())], 2: [slow]})
    section = noise_section(run_dir)
    assert (
        "Rank 1 on node-1 (127.0.0.3) is a straggler: it took 1.60x as long as the median of "
        "the other ranks to compute a step alone, launch 1 of 1." in section
    )
    shown = noise_section(run_dir, html=True)  # a noisy point's table is open in report.html
    row = "| 1.60x (rank 1 on node-1 (127.0.0.3), 3 passes) | unreliable |"
    assert shown.index(row) < shown.index(
        "details\ue000 How noise is measured"  # the one folded part: the method
    )
    assert "Every point's noise figures" not in shown  # not folded
    assert "Every point's noise figures: report.html" in section  # report.md points there
    point = json.loads(run_dir.summary.read_text())["noise"]["points"][1]
    assert point["stragglers"] == [
        {
            "rank": 1,
            "node": "node-1",
            "ratio": pytest.approx(1.6),
            "launch": 1,
            "host": "node-1 (127.0.0.3)",
            "what": "to compute a step alone",
        }
    ]


def test_a_straggler_on_a_busy_node_names_the_likely_cause():
    busy = noise_data(NODES, other_cores=0.9, probe_s=[0.030, 0.066], shared=True)
    point = point_noise(2, [parse_train_result(result_data(world=2, tokens_per_s=1, noise=busy),
                                               "t").noise])  # fmt: skip
    assert "node-1 also had steal or other load then: a likely cause" in point.findings[-1]
    assert point.findings[0].startswith(
        "The 2-node point is unreliable: node-0 and node-1 (one machine) spent 45% of their CPU"
    )


def _point(noise):
    return point_noise(2, [parse_train_result(result_data(world=2, tokens_per_s=1, noise=noise),
                                              "t").noise])  # fmt: skip


def test_ranks_sharing_one_machine_slow_each_other_without_a_straggler_node():
    # 1.5x: what clean embedded 2-node sweeps read on the 2-core VM (up to 1.49x); a straggler
    # where the nodes are machines of their own, not where they share one machine's cores
    apart = _point(noise_data(NODES, probe_s=[0.030, 0.045]))
    assert apart.unreliable and "Rank 1 on node-1" in apart.findings[0]
    together = _point(noise_data(NODES, probe_s=[0.030, 0.045], shared=True))
    assert not together.unreliable and together.verdict == "quiet"
    assert together.probe_ratio == pytest.approx(1.5)  # still shown
    # a node held back to under half speed is a straggler on one machine too
    throttled = _point(noise_data(NODES, probe_s=[0.030, 0.066], shared=True))
    assert throttled.unreliable and "Rank 1 on node-1" in throttled.findings[0]
    assert "took 2.20x as long" in throttled.findings[0]


def test_steal_above_five_percent_is_reported(tmp_path, fixed_inventory):
    run_dir = build(
        tmp_path,
        fixed_inventory,
        {1: [quiet(["node-0"], ())], 2: [noise_data(NODES, steal=0.08, probe_s=[0.03, 0.03])]},
    )
    assert "node-0 lost 8% of its CPU time to steal" in noise_section(run_dir)


def test_the_worst_launch_of_a_point_is_the_one_reported(tmp_path, fixed_inventory):
    calm, loud = quiet(), noise_data(NODES, other_cores=0.5, probe_s=[0.03, 0.03])
    louder = noise_data(NODES, other_cores=0.7, probe_s=[0.03, 0.03])
    run_dir = build(
        tmp_path,
        fixed_inventory,
        {1: [quiet(["node-0"], ())] * 3, 2: [loud, calm, louder]},  # one quiet: all kept
        repeat=3,
    )
    section = noise_section(run_dir)
    assert "| 2 | 3 of 3 |" in noise_section(run_dir, html=True)
    assert "0.70 cores over 1.0 s), launch 3 of 3" in section
    assert "left out" not in section


def test_a_launch_in_other_load_is_left_out_while_two_others_were_quiet(tmp_path, fixed_inventory):
    calm, loud = quiet(), noise_data(NODES, other_cores=0.5, probe_s=[0.03, 0.03])
    bench = BenchSpec(run_id="n", repeat=3)
    throughput = {1: [1000.0] * 3, 2: [1900.0, 1000.0, 1900.0]}  # the loud launch: half speed
    noise = {1: [quiet(["node-0"], ())] * 3, 2: [calm, loud, calm]}
    run_dir = fake_run_dir(tmp_path / "n", bench, fixed_inventory, throughput, noise=noise)
    build_report(run_dir)
    section = noise_section(run_dir)
    assert (
        "- Launch 2 of 3 is left out of the 2-node point's interval: node-0 spent 25% of its CPU "
        "on other work." in section
    )
    assert "No other launch crossed a noise threshold" in section and "**" not in section
    assert "| 2 | 3 of 3 (1 left out) |" in noise_section(run_dir, html=True)
    summary = json.loads(run_dir.summary.read_text())
    point = summary["noise"]["points"][1]
    assert point["verdict"] == "quiet" and point["left_out"] == [2]
    assert point["other_cores"] == pytest.approx(0.05)  # the kept launches' worst
    (row,) = [r for r in summary["rows"] if r["nodes"] == 2]
    assert row["launches_n"] == 2 and row["efficiency"] == pytest.approx(0.95)
    assert "2 launches (1 more left out for noise)" in run_dir.report.read_text()


def test_steal_in_two_launches_of_three_keeps_them_all_and_the_point_unreliable(
    tmp_path, fixed_inventory
):
    calm, stolen = quiet(), noise_data(NODES, steal=0.07, probe_s=[0.03, 0.03])
    run_dir = build(
        tmp_path, fixed_inventory, {1: [quiet(["node-0"], ())] * 3, 2: [stolen, calm, stolen]}, 3
    )
    summary = json.loads(run_dir.summary.read_text())
    point = summary["noise"]["points"][1]
    assert point["verdict"] == "unreliable" and point["left_out"] == []
    assert "node-0 lost 7% of its CPU time to steal" in noise_section(run_dir)
    (row,) = [r for r in summary["rows"] if r["nodes"] == 2]
    assert row["launches_n"] == 3


def test_the_embedded_cluster_is_said_to_share_one_machine(tmp_path, fixed_inventory):
    shared = noise_data(NODES, probe_s=[0.03, 0.03], shared=True)
    one = noise_data(["node-0"], shared=True)
    run_dir = build(tmp_path, fixed_inventory, {1: [one], 2: [shared]})
    assert "every node is a process group on this one machine" in noise_section(run_dir, html=True)
    assert "How noise is measured: docs/report.md#noise." in noise_section(run_dir)


def test_results_without_noise_figures_say_so(tmp_path, fixed_inventory):
    run_dir = build(tmp_path, fixed_inventory, None)
    assert "The results carry no noise figures" in noise_section(run_dir)
    points = json.loads(run_dir.summary.read_text())["noise"]["points"]
    assert [p["verdict"] for p in points] == ["not measured", "not measured"]


def test_windows_too_short_to_judge_say_so_not_that_there_are_no_figures(tmp_path, fixed_inventory):
    """A program's 0.14 s after its warm-up: the report said its ranks never stepped past it."""

    def short(nodes):
        data = noise_data(nodes, window_s=0.14)
        for node in data["nodes"]:
            node.update(steal_share=None, busy_share=None, other_cores=None, other_share=None)
        return data

    run_dir = build(tmp_path, fixed_inventory, {1: [short(["node-0"])], 2: [short(NODES)]})
    section = noise_section(run_dir)
    assert "No launch held a window long enough to judge" in section
    assert "carry no noise figures" not in section


def test_a_busy_machine_before_the_sweep_is_reported(tmp_path, fixed_inventory):
    run_dir = build(tmp_path, fixed_inventory, {1: [quiet(["node-0"], ())], 2: [quiet()]})
    before = {
        "sample_s": 0.5,
        "cpus": 2,
        "loadavg_1m": 1.9,
        "dtrun_cpu_s": 0.1,
        "steal_share": 0.0,
        "busy_share": 0.8,
        "other_cores": 1.3,
        "other_share": 0.65,
    }
    record_machine_noise(run_dir, before)
    build_report(run_dir)
    section = noise_section(run_dir)
    assert "This machine was already busy before the sweep: other work used 1.30 cores" in section
    assert (  # one finding line under the verdict table says it too
        "- **Noise**: quiet, no point crossed a noise threshold; this machine was already busy "
        "before the sweep: other work used 1.30 cores." in run_dir.report.read_text()
    )
    assert "load average (1 minute) was 1.90 on 2 cores" in noise_section(run_dir, html=True)
    assert json.loads(run_dir.summary.read_text())["noise"]["before"] == before


def test_a_damaged_noise_figure_is_refused_naming_the_field(tmp_path, fixed_inventory):
    run_dir = build(tmp_path, fixed_inventory, {1: [quiet(["node-0"], ())], 2: [quiet()]})
    path = run_dir.point(2, 0) / "result.json"
    data = json.loads(path.read_text())
    data["noise"]["probe"]["rank_s"] = ["fast", 0.03]
    path.write_text(json.dumps(data))
    with pytest.raises(DamagedRunError) as caught:
        build_report(run_dir)
    assert "noise.probe.rank_s[0]" in str(caught.value)


def test_dtrun_report_prints_each_unreliable_point_under_its_table(tmp_path, fixed_inventory):
    from typer.testing import CliRunner

    from dtrun.cli.app import app

    slow = quiet(probe_s=(0.030, 0.048))
    run_dir = build(tmp_path, fixed_inventory, {1: [quiet(["node-0"], ())], 2: [slow]})
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["report", str(run_dir.path)])
    assert result.exit_code == 0, result.output
    assert "noise: Rank 1 on node-1 (127.0.0.3) is a straggler: it took 1.60x as" in result.output
    assert "noise: The 1-node point" not in result.output  # a quiet point says nothing


@pytest.mark.parametrize(("noisy_at", "verdict"), [(None, "loses"), (2, "inconclusive"),
                                                   (1, "inconclusive")])  # fmt: skip
def test_a_verdict_stands_only_on_points_measured_quietly(
    tmp_path, fixed_inventory, noisy_at, verdict
):
    """2 nodes at two thirds of the 1-node speed, clearly below the target: *loses*, unless
    the point or its baseline was measured in noise, which makes it *inconclusive*. Each
    launch a little slower than the last: launches that never differ give no interval."""
    steps = {
        1: [[0.030 + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(3)],
        2: [[0.045 + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(3)],
    }
    loud = noise_data(["node-0"], other_cores=0.6, probe_s=[0.03])
    noise = {
        1: [loud if noisy_at == 1 else quiet(["node-0"], ())] * 3,
        2: [noise_data(NODES, other_cores=0.6, probe_s=[0.03, 0.03]) if noisy_at == 2
            else quiet()] * 3,
    }  # fmt: skip
    bench = BenchSpec(run_id="v", repeat=3)
    run_dir = fake_run_dir(
        tmp_path / "v", bench, fixed_inventory, {}, step_times=steps, noise=noise
    )
    build_report(run_dir)
    row = json.loads(run_dir.summary.read_text())["rows"][1]
    assert row["verdict"] == verdict
    if noisy_at is not None:
        assert "which would be a loss, but" in row["verdict_reason"]
        assert f"the {noisy_at}-node point was measured in noise" in row["verdict_reason"]
        assert f"**inconclusive**: {row['verdict_reason']}" in run_dir.report.read_text()


@pytest.mark.parametrize(
    ("two_node_s", "would"),
    [(0.045, "which would be a loss, but the"), (0.030, "which would scale, but the")],
)
def test_a_verdict_made_inconclusive_by_noise_says_in_english_what_it_would_have_been(
    tmp_path, fixed_inventory, two_node_s, would
):
    steps = {
        1: [[0.030 + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(3)],
        2: [[two_node_s + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(3)],
    }
    loud = noise_data(NODES, other_cores=0.6, probe_s=[0.03, 0.03])
    noise = {1: [quiet(["node-0"], ())] * 3, 2: [loud] * 3}
    run_dir = fake_run_dir(
        tmp_path / "v", BenchSpec(run_id="v", repeat=3), fixed_inventory, {}, step_times=steps,
        noise=noise,
    )  # fmt: skip
    build_report(run_dir)
    row = json.loads(run_dir.summary.read_text())["rows"][1]
    assert row["verdict"] == "inconclusive"
    assert f"{would} 2-node point was measured in noise" in row["verdict_reason"]
    assert "would be loses" not in row["verdict_reason"]


def test_a_point_that_stopped_decided_in_noise_says_its_verdict_was_set_aside(
    tmp_path, fixed_inventory
):
    """--until-decided stops a point once its interval decides; more launches cannot make a
    point with a straggler quiet (a straggler is the cluster's, not a disturbed launch's), so
    it stays stopped, and the report says why a point that 'decided' reads inconclusive."""
    steps = {n: [[s + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(2)]
             for n, s in ((1, 0.030), (2, 0.045))}  # fmt: skip
    slow = noise_data(NODES, probe_s=[0.03, 0.045])  # rank 1 at 1.5x: a straggler
    noise = {1: [quiet(["node-0"], ())] * 2, 2: [slow] * 2}
    bench = BenchSpec(run_id="v", max_launches=6, until_decided=True)
    run_dir = fake_run_dir(
        tmp_path / "v", bench, fixed_inventory, {}, step_times=steps, noise=noise
    )
    build_report(run_dir)
    row = json.loads(run_dir.summary.read_text())["rows"][1]
    assert (row["stopped"], row["verdict"]) == ("decided", "inconclusive")
    said = "(stopped: decided, then set aside for noise): **inconclusive**: "
    assert said + row["verdict_reason"] in run_dir.report.read_text()


def test_where_scaling_is_lost_names_the_straggler_s_host(tmp_path, fixed_inventory):
    """A point that lost scaling with a straggler: its finding names the rank and the host it
    ran on, not only "look for stragglers"."""
    bench = BenchSpec(run_id="s", repeat=1)
    noise = {1: [quiet(["node-0"], ())], 2: [quiet(probe_s=(0.030, 0.075))]}
    run_dir = fake_run_dir(tmp_path / "s", bench, fixed_inventory, {1: [1000.0], 2: [1200.0]},
                           noise=noise)  # fmt: skip
    build_report(run_dir)
    text = run_dir.report.read_text()
    said = (
        "2 nodes: 40% lost: rank 1 on host node-1 (127.0.0.3) took 2.50x as long as the median "
        "of the other ranks to compute a step alone (launch 1), and every rank waits for it "
        "each step"
    )
    assert f"- **Where scaling is lost**: {said}" in text
    (_, lost) = json.loads(run_dir.summary.read_text())["where_scaling_is_lost"]
    assert lost["finding"].startswith(said.removeprefix("2 nodes: "))


def test_where_scaling_is_lost_names_no_host_without_a_straggler(tmp_path, fixed_inventory):
    bench = BenchSpec(run_id="q", repeat=1)
    noise = {1: [quiet(["node-0"], ())], 2: [quiet(probe_s=(0.030, 0.031))]}
    run_dir = fake_run_dir(tmp_path / "q", bench, fixed_inventory, {1: [1000.0], 2: [1200.0]},
                           noise=noise)  # fmt: skip
    build_report(run_dir)
    (_, lost) = json.loads(run_dir.summary.read_text())["where_scaling_is_lost"]
    assert lost["finding"].startswith("40% lost") and "host" not in lost["finding"]


def test_a_straggler_below_the_host_ratio_is_noise_not_where_scaling_is_lost(
    tmp_path, fixed_inventory
):
    """1.3x makes the point unreliable (above 1.25x), but is no host to blame: a clean shared
    machine's slowest rank read up to 1.49x."""
    bench = BenchSpec(run_id="m", repeat=1)
    noise = {1: [quiet(["node-0"], ())], 2: [quiet(probe_s=(0.030, 0.039))]}
    run_dir = fake_run_dir(tmp_path / "m", bench, fixed_inventory, {1: [1000.0], 2: [1200.0]},
                           noise=noise)  # fmt: skip
    build_report(run_dir)
    said = "Rank 1 on node-1 (127.0.0.3) is a straggler: it took 1.30x"
    assert said in run_dir.report.read_text()
    (_, lost) = json.loads(run_dir.summary.read_text())["where_scaling_is_lost"]
    assert "host" not in lost["finding"]


@pytest.mark.parametrize("written", ["garbage", "[1, 2]", "[" * 100_000])
def test_a_manifest_the_program_wrote_over_is_a_damaged_run_not_a_traceback(
    tmp_path, fixed_inventory, written
):
    """The program runs two levels below manifest.json: one that writes over it leaves the
    sweep's end with exit 2 naming the file, not a JSONDecodeError."""
    run_dir = build(tmp_path, fixed_inventory, None)
    run_dir.manifest.write_text(written)
    with pytest.raises(DamagedRunError, match=r"manifest\.json is damaged"):
        record_machine_noise(run_dir, None)


def short_window(nodes=NODES, probe_s=(0.030, 0.031)):
    """A launch timed over 19 ms: /proc/stat's ticks read the sampling, so the node entries
    carry no steal or other load (runner/workloads/noise.py MIN_WINDOW_TICKS), only the probe."""
    noise = noise_data(nodes, probe_s=list(probe_s) or None, window_s=0.019)
    for node in noise["nodes"]:
        node.update(steal_share=None, busy_share=None, other_cores=None, other_share=None)
        node.update(wall_s=0.019, clock_ticks=100, ticks={"total": 4, "busy": 3, "steal": 0})
    return noise


def test_a_point_whose_load_was_not_measured_is_never_called_quiet(tmp_path, fixed_inventory):
    """Only the slow-rank check measured: the section, the findings, summary.json and the
    verdict say the load was not measured and why, never that the point was quiet."""
    steps = {
        1: [[0.030 + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(3)],
        2: [[0.045 + 0.0001 * (i % 5 + k) for i in range(50)] for k in range(3)],
    }
    noise = {1: [quiet(["node-0"], ())] * 3, 2: [short_window()] * 3}
    run_dir = fake_run_dir(
        tmp_path / "s", BenchSpec(run_id="s", repeat=3), fixed_inventory, {}, step_times=steps,
        noise=noise,
    )  # fmt: skip
    build_report(run_dir)
    why = "window too short: 19 ms, under 20 clock ticks"
    section = noise_section(run_dir)
    assert (
        f"- The 2-node point's CPU steal and other load were not measured ({why}): only its "
        "slowest rank was, so nothing shows it was timed without other load." in section
    )
    assert "| partly measured |" in noise_section(run_dir, html=True)
    report = run_dir.report.read_text()
    assert "- **Noise**: quiet" not in report
    assert (
        "- **Noise**: no measured figure crossed a noise threshold, but CPU steal and other load "
        f"were not measured at 2 nodes ({why}): only the slowest rank was (see Noise)." in report
    )
    summary = json.loads(run_dir.summary.read_text())
    point = summary["noise"]["points"][1]
    assert (point["verdict"], point["load_missing"], point["load_why"]) == (
        "partly measured",
        [1, 2, 3],
        why,
    )
    row = summary["rows"][1]
    assert row["verdict"] == "loses"
    assert row["verdict_reason"].endswith(
        f"; the 2-node point's CPU steal and other load were not measured ({why}), only its "
        "slowest rank was"
    )


def test_a_launch_without_load_figures_is_named_beside_the_launches_measured():
    launches = [parse_train_result(result_data(world=2, tokens_per_s=1, noise=n), "t").noise
                for n in (quiet(), short_window(), quiet())]  # fmt: skip
    point = point_noise(2, launches)
    assert point.verdict == "quiet"  # the other launches' load was measured and low
    assert point.load_note == (
        "The 2-node point's CPU steal and other load were not measured in launch 2 "
        "(window too short: 19 ms, under 20 clock ticks)"
    )


def test_a_point_left_out_in_noise_and_one_partly_measured_say_both(tmp_path, fixed_inventory):
    """The findings' line said "no measured figure crossed a noise threshold" where a launch
    crossed one and was left out: each is said."""
    calm, loud = quiet(["node-0"], ()), noise_data(["node-0"], other_cores=0.5, probe_s=None)
    throughput = {1: [1000.0, 500.0, 1000.0], 2: [1900.0] * 3}
    noise = {1: [calm, loud, calm], 2: [short_window()] * 3}
    bench = BenchSpec(run_id="b", repeat=3)
    run_dir = fake_run_dir(tmp_path / "b", bench, fixed_inventory, throughput, noise=noise)
    build_report(run_dir)
    summary = json.loads(run_dir.summary.read_text())
    assert [p["left_out"] for p in summary["noise"]["points"]] == [[2], []]
    report = run_dir.report.read_text()
    assert "no measured figure crossed" not in report
    assert (
        "- **Noise**: quiet once 1 launch timed in noise was left out, but CPU steal and other "
        "load were not measured at 2 nodes (window too short: 19 ms, under 20 clock ticks): "
        "only the slowest rank was (see Noise)." in report
    )
