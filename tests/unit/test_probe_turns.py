"""The straggler probe's turns: ranks on one machine's CPU cores are timed one at a time, so
that a rank is never timed while its neighbour computes on the same cores (docs/report.md
"Noise"); ranks on other machines, or on accelerators, are timed together as before."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

from dtrun.workloads.noise import probe_turns


def test_ranks_on_one_machines_cpus_take_a_turn_each():
    assert [probe_turns(["m", "m", "m"], rank, "cpu") for rank in range(3)] == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]


def test_ranks_on_their_own_machines_share_one_turn():
    assert [probe_turns(["a", "b"], rank, "cpu") for rank in range(2)] == [(0, 1), (0, 1)]


def test_two_machines_of_two_ranks_take_two_turns_one_rank_per_machine_at_a_time():
    machines = ["a", "a", "b", "b"]
    assert [probe_turns(machines, rank, "cpu") for rank in range(4)] == [
        (0, 2),
        (1, 2),
        (0, 2),
        (1, 2),
    ]


def test_ranks_on_accelerators_take_no_turns():
    assert probe_turns(["m", "m"], 1, "cuda") == (0, 1)


class _Recorder:
    """An engine whose passes alone sleep ``durations`` in turn and note when they ran."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = durations
        self.spans: list[tuple[float, float]] = []

    def compute_alone(self, batch: object) -> None:
        start = time.time()
        time.sleep(self.durations[len(self.spans)])
        self.spans.append((start, time.time()))


# Rank 1's first two passes are held up (by a neighbour's work, say), its third is not.
DURATIONS = ([0.05, 0.05, 0.05], [0.3, 0.3, 0.05])


def _rank(rank: int, store: str, machine: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from dtrun.workloads import noise, train

    noise.machine_id = lambda: machine  # each rank's "machine"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    engine = _Recorder(DURATIONS[rank])
    cpu = torch.device("cpu")
    timed, why = train.probe_compute(engine, torch.zeros(1), 3, cpu)  # type: ignore[arg-type]
    assert why is None
    Path(out).write_text(json.dumps({"spans": engine.spans, "timed": timed}))
    dist.destroy_process_group()


def _probed(tmp_path: Path, machines: tuple[str, str]) -> list[dict[str, Any]]:
    spawn = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"rank{rank}" for rank in range(2)]
    store = str(tmp_path / "store")
    ranks = [
        spawn.Process(target=_rank, args=(rank, store, machines[rank], str(outs[rank])))
        for rank in range(2)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
        assert process.exitcode == 0
    return [json.loads(out.read_text()) for out in outs]


def test_ranks_of_one_machine_are_timed_one_after_the_other_at_their_fastest_pass(tmp_path):
    first, second = _probed(tmp_path, ("m", "m"))
    assert first["spans"][-1][1] <= second["spans"][0][0]  # rank 1 began once rank 0 was done
    assert second["timed"] < 0.2  # its held-up passes are not its node's speed


def test_ranks_of_their_own_machines_are_timed_together_at_their_median_pass(tmp_path):
    first, second = _probed(tmp_path, ("a", "b"))
    assert second["spans"][0][0] < first["spans"][-1][1]  # both at once, as before
    assert second["timed"] >= 0.3  # two of three passes slow: a straggler, as before
