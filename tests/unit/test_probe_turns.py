"""The straggler probe's turns: ranks on one machine's CPU cores are timed one at a time, so
that a rank is never timed while its neighbour computes on the same cores (docs/report.md
"Noise"); ranks on other machines, or on accelerators, are timed together as before."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

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
    """An engine whose pass alone sleeps 50 ms and notes when it ran."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def compute_alone(self, batch: object) -> None:
        start = time.time()
        time.sleep(0.05)
        self.spans.append((start, time.time()))


def _rank(rank: int, store: str, machine: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from dtrun.workloads import noise, train

    noise.machine_id = lambda: machine  # each rank's "machine"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    engine = _Recorder()
    cpu = torch.device("cpu")
    median, why = train.probe_compute(engine, torch.zeros(1), 3, cpu)  # type: ignore[arg-type]
    assert why is None and median is not None
    Path(out).write_text(json.dumps(engine.spans))
    dist.destroy_process_group()


def _spans(tmp_path: Path, machines: tuple[str, str]) -> list[list[tuple[float, float]]]:
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
    return [[tuple(span) for span in json.loads(out.read_text())] for out in outs]


@pytest.mark.parametrize(
    ("machines", "overlap"), [(("m", "m"), False), (("a", "b"), True)], ids=["one", "two"]
)
def test_ranks_of_one_machine_are_timed_one_after_the_other(tmp_path, machines, overlap):
    first, second = _spans(tmp_path, machines)
    both = first[0][0] < second[-1][1] and second[0][0] < first[-1][1]
    assert both is overlap, (first, second)
