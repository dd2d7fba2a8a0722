"""How noisy a node was: /proc/stat and /proc/loadavg read, shares of CPU time, the straggler;
and the manifest's sample of this machine before a sweep.

The recorded files in tests/data/noise/ are this machine's /proc/stat one second apart (2 CPUs,
USER_HZ 100) and its /proc/loadavg.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dtrun.record.noise_sample import MachineSample, tree_cpu_s
from dtrun.workloads.noise import (
    MIN_WINDOW_TICKS,
    STRAGGLER_RATIO,
    CpuTimes,
    Snapshot,
    clock_ticks,
    launch_noise,
    machine_figures,
    node_noise,
    parse_loadavg,
    parse_proc_stat,
    rank_window,
    read_cpu_times,
    read_loadavg,
    snapshot,
    straggler_ratios,
    stragglers,
    window_own_s,
)
from tests.paths import TESTS

DATA = TESTS / "data" / "noise"
# A child that burns some CPU and prints how much it used (user and system seconds).
BUSY_CHILD = "import os\nsum(range(3_000_000))\nt = os.times()\nprint(t.user + t.system)"


def recorded(name: str) -> CpuTimes:
    times = parse_proc_stat((DATA / name).read_text())
    assert times is not None
    return times


def test_the_aggregate_cpu_line_is_read_not_a_single_cpus():
    start = recorded("proc_stat_start.txt")
    assert start == CpuTimes(1085597, 30664, 249688, 1239934, 8742, 0, 4100, 2096)


def test_a_window_is_the_difference_of_two_readings():
    window = recorded("proc_stat_end.txt").minus(recorded("proc_stat_start.txt"))
    # user +102, system +15, idle +85, the rest unchanged: 202 ticks, about 1 s on 2 CPUs
    assert (window.user, window.system, window.idle) == (102, 15, 85)
    assert window.total == 202
    assert window.busy == 117
    assert window.steal == 0


def test_guest_time_is_not_counted_twice():
    # the kernel counts guest time in user already: fields 9 and 10 change nothing
    with_guest = parse_proc_stat("cpu  100 0 50 800 10 0 5 35 400 7\n")
    without = parse_proc_stat("cpu  100 0 50 800 10 0 5 35\n")
    assert with_guest == without
    assert with_guest is not None and with_guest.total == 1000
    assert with_guest.busy == 1000 - 800 - 10 - 35


def test_a_kernel_with_fewer_fields_reads_the_missing_ones_as_zero():
    old = parse_proc_stat("cpu 10 20 30 40\ncpu0 10 20 30 40\n")
    assert old == CpuTimes(10, 20, 30, 40, 0, 0, 0, 0)


@pytest.mark.parametrize("text", ["", "cpu0 1 2 3 4\n", "cpu 1 2 x 4\n", "cpu 1 2\n"])
def test_text_without_a_usable_cpu_line_reads_as_nothing(text):
    assert parse_proc_stat(text) is None


def test_a_machine_without_proc_gives_none_instead_of_failing(tmp_path):
    assert read_cpu_times(str(tmp_path / "no-such-stat")) is None
    assert read_loadavg(str(tmp_path / "no-such-loadavg")) is None
    window = rank_window(Snapshot(None, 1.0, 10.0), Snapshot(None, 1.5, 11.0))
    assert window["ticks"] is None
    assert window["own_cpu_s"] == pytest.approx(0.5)
    figures = machine_figures(window["ticks"], 100, 1.0, 0.5)
    assert set(figures.values()) == {None}


def test_the_load_average_is_the_one_minute_figure():
    assert parse_loadavg((DATA / "loadavg.txt").read_text()) == 2.32
    assert parse_loadavg("") is None
    assert parse_loadavg("busy 1 2") is None


def test_shares_of_the_machines_cpu_time_and_the_other_load_in_cores():
    # 2 CPUs for 1 s at 100 ticks/s: 200 ticks; 150 busy, 20 stolen; the launch used 1.0 s
    figures = machine_figures({"total": 200, "busy": 150, "steal": 20}, 100, 1.0, 1.0)
    assert figures["steal_share"] == pytest.approx(0.10)
    assert figures["busy_share"] == pytest.approx(0.75)
    assert figures["other_cores"] == pytest.approx(0.5)  # 1.5 busy seconds - 1.0 the launch's
    assert figures["other_share"] == pytest.approx(0.25)  # of the machine's 2 CPU seconds


def test_other_load_is_never_negative_when_ticks_round_below_the_launchs_own_time():
    figures = machine_figures({"total": 200, "busy": 98, "steal": 0}, 100, 1.0, 1.0)
    assert figures["other_cores"] == 0.0


def test_a_window_too_short_for_the_tick_clock_reads_as_not_measured():
    # a program of 5 short steps timed 19 ms: 3 ticks of 10 ms on 2 CPUs, one tick either way
    # in /proc/stat's sampling is a third of the window, not load (it read 0.52 other cores)
    figures = machine_figures({"total": 3, "busy": 3, "steal": 0}, 100, 0.019, 0.02)
    assert set(figures.values()) == {None}
    entries = node_noise([{**window("boot-1", 0.01), "wall_s": 0.019}], ["node-0"])
    assert entries[0]["other_cores"] is None and entries[0]["steal_share"] is None


def window(machine: str, own_cpu_s: float, busy: int = 150) -> dict[str, object]:
    return {
        "machine": machine,
        "cpus": 2,
        "wall_s": 1.0,
        "ticks": {"total": 200, "busy": busy, "steal": 0},
        "own_cpu_s": own_cpu_s,
        "loadavg_1m": 1.5,
    }


def test_nodes_on_one_machine_share_its_figures_and_add_up_their_ranks_cpu_time():
    # the embedded cluster: two nodes, one kernel; each rank used 0.6 s of the 1.5 busy
    entries = node_noise([window("boot-1", 0.6), window("boot-1", 0.6)], ["node-0", "node-1"])
    assert [e["node"] for e in entries] == ["node-0", "node-1"]
    for entry in entries:
        assert entry["nodes_on_machine"] == ["node-0", "node-1"]
        assert entry["launch_cpu_s"] == pytest.approx(1.2)
        assert entry["other_cores"] == pytest.approx(0.3)


def test_nodes_on_their_own_machines_are_judged_apart():
    entries = node_noise(
        [window("boot-a", 0.7), window("boot-b", 0.7, busy=190)], ["node-0", "node-1"]
    )
    assert entries[0]["nodes_on_machine"] == ["node-0"]
    assert entries[0]["other_cores"] == pytest.approx(0.8)
    assert entries[1]["other_cores"] == pytest.approx(1.2)


def test_ranks_of_one_node_give_one_entry():
    entries = node_noise(
        [window("a", 0.5), window("a", 0.5), window("b", 0.5), window("b", 0.5)],
        ["node-0", "node-0", "node-1", "node-1"],
    )
    assert [e["node"] for e in entries] == ["node-0", "node-1"]
    assert entries[0]["launch_cpu_s"] == pytest.approx(1.0)


def test_a_rank_slower_than_the_median_of_the_others_is_named_with_its_node():
    medians = [0.100, 0.100, 0.110, 0.160]
    assert straggler_ratios(medians)[3] == pytest.approx(1.6)
    found = stragglers(medians, ["node-0", "node-0", "node-1", "node-1"])
    assert [(s["rank"], s["node"]) for s in found] == [(3, "node-1")]
    assert found[0]["ratio"] == pytest.approx(1.6)


def test_with_two_ranks_the_slower_is_compared_with_its_peer_not_with_their_mean():
    # the median of all would be 0.13: 0.16 / 0.13 = 1.23, under the threshold
    found = stragglers([0.10, 0.16], ["node-0", "node-1"])
    assert [(s["rank"], round(s["ratio"], 2)) for s in found] == [(1, 1.6)]


def test_two_slow_ranks_of_four_are_both_named():
    found = stragglers([0.1, 0.1, 0.2, 0.2], ["a", "b", "c", "d"])
    assert [s["rank"] for s in found] == [2, 3]


def test_ranks_within_the_threshold_are_not_stragglers():
    just_under = 0.1 * STRAGGLER_RATIO * 0.99
    assert stragglers([0.1, 0.1, just_under], ["a", "b", "c"]) == []
    assert stragglers([0.1], ["a"]) == []  # one rank is its own median


def test_a_launch_records_each_nodes_figures_and_each_ranks_probe():
    gathered = [
        {**window("m", 0.6), "alone_s": 0.03, "alone_why": None},
        {**window("m", 0.6), "alone_s": 0.05, "alone_why": None},
    ]
    noise = launch_noise(gathered, ["node-0", "node-1"], 3)
    assert noise["window_s"] == 1.0
    assert [n["node"] for n in noise["nodes"]] == ["node-0", "node-1"]
    assert noise["probe"] == {"steps": 3, "rank_s": [0.03, 0.05], "why": None}


def test_a_strategy_that_cannot_compute_alone_records_why_and_no_times():
    why = "FSDP's forward all-gathers each block's parameters from every rank"
    gathered = [{**window("m", 0.6), "alone_s": None, "alone_why": why}] * 2
    noise = launch_noise(gathered, ["node-0", "node-1"], 3)
    assert noise["probe"] == {"steps": 0, "rank_s": None, "why": why}


def test_a_ranks_cpu_time_counts_its_workers_alive_and_reaped_once():
    # a program's DataLoader workers are its own work, not other load: 2 spawn workers read
    # 1.97 other cores over 2.2 s on a quiet machine when a rank counted itself alone
    before = snapshot()
    worker = subprocess.Popen(
        [sys.executable, "-c", BUSY_CHILD.replace("3_000_000", "30_000_000") + "\ninput()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert worker.stdout is not None and worker.stdin is not None
    used = float(worker.stdout.readline())  # what the worker measured of itself, still alive
    alive = window_own_s(before, snapshot())
    worker.stdin.close()
    worker.wait(timeout=30)
    reaped = window_own_s(before, snapshot())
    assert alive >= used - 0.02  # ticks of 10 ms, at most one each way
    assert used - 0.02 <= reaped <= alive + 0.1  # once, not twice


# A worker that starts a grandchild, which burns CPU and then waits; the worker prints what
# the grandchild used and its pid, then leaves without waiting for it (init takes it).
GRANDCHILD = BUSY_CHILD.replace("3_000_000", "30_000_000") + "\nimport time\ntime.sleep(60)"
DOUBLE_FORK = (
    "import os, subprocess, sys\n"
    f"g = subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}], stdout=subprocess.PIPE, "
    "text=True)\n"
    "print(g.stdout.readline().strip(), g.pid, flush=True)\n"
    "sys.stdin.readline()\n"
    "os._exit(0)\n"
)


def test_a_descendant_init_took_over_takes_nothing_off_the_ranks_cpu_time():
    # a double fork's daemon that burnt its CPU before the window: the window read its rank's
    # own CPU as -1.12 s (more "other load" than there was) when its time left the count
    worker = subprocess.Popen([sys.executable, "-c", DOUBLE_FORK], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert worker.stdout is not None and worker.stdin is not None
    used, grandchild = worker.stdout.readline().split()
    try:
        start = snapshot()
        assert int(grandchild) in start.tree and float(used) > 0.1
        worker.stdin.write("go\n")
        worker.stdin.close()
        worker.wait(timeout=30)
        end = snapshot()
        assert int(grandchild) not in end.tree  # init's now
        assert 0.0 <= window_own_s(start, end) <= 0.1
    finally:
        os.kill(int(grandchild), signal.SIGKILL)


def test_dtruns_own_cpu_time_counts_its_children_once_they_are_reaped():
    before = tree_cpu_s()
    child = subprocess.run(
        [sys.executable, "-c", BUSY_CHILD], capture_output=True, text=True, check=True
    )
    used = float(child.stdout)  # what the child measured of itself
    assert tree_cpu_s() - before >= used - 0.02  # ticks of 10 ms, at most one each way


def test_the_machine_sample_gives_shares_of_cpu_time_and_the_load_average():
    sample = MachineSample(MIN_WINDOW_TICKS / clock_ticks()).result()
    assert sample is not None
    assert sample["cpus"] == os.cpu_count()
    assert sample["sample_s"] >= 0.05
    for share in ("steal_share", "busy_share", "other_share"):
        assert 0.0 <= sample[share] <= 1.0
    assert sample["loadavg_1m"] is not None and sample["loadavg_1m"] >= 0
