"""The data-parallel engines' shared defaults live in one place (runner/workloads/engine.py,
DataParallelEngine): the data-parallel proof, no stages to time alone, no result fields of
their own unless an engine adds some (Horovod its version and controller)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore  # what torch.distributed re-exports

from dtrun.workloads import train
from dtrun.workloads.ddp import DdpEngine
from dtrun.workloads.engine import DataParallelEngine
from dtrun.workloads.fsdp import FsdpEngine
from dtrun.workloads.pipeline_parallel import SCHEDULES, PipelineEngine
from dtrun.workloads.stagecost import SCHEDULE_NAMES
from dtrun.workloads.train_deepspeed import DeepSpeedEngine
from dtrun.workloads.train_horovod import HorovodEngine

SHARED = ("prove", "describe", "probe_stages", "zero_stage")


@pytest.mark.parametrize(
    ("engine", "own"),
    [(DdpEngine, ()), (FsdpEngine, ()), (DeepSpeedEngine, ()), (HorovodEngine, ("describe",))],
)
def test_each_data_parallel_engine_takes_the_shared_defaults_from_one_place(engine, own):
    assert issubclass(engine, DataParallelEngine)
    restated = [name for name in SHARED if name in vars(engine)]
    assert restated == list(own)


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A one-rank gloo group in this process, gone after the test."""
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("engine", [DdpEngine, FsdpEngine])
def test_a_data_parallel_engine_alone_proves_one_process_and_adds_nothing(one_rank, engine):
    args = train.parse_args(
        ["--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "64", "--seq-len", "8"]
    )
    trained = engine(args, torch.device("cpu"))
    batch = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    trained.step(batch)
    assert trained.prove(batch).kind == "single process"
    assert trained.describe() == {}
    assert trained.probe_stages(3) is None
    assert (trained.zero_stage, trained.replicas, trained.data_rank) == (None, 1, 0)


def test_the_training_workload_imports_fsdp_and_pipelining_only_for_a_launch_that_uses_them():
    # a DDP rank (the default) paid 1.4 s of CPU importing both before: every rank, every launch
    probe = (
        "import sys; from dtrun.workloads import train; "
        "print(sorted(m for m in ('torch.distributed.fsdp', 'torch.distributed.pipelining') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("strategy", "kind"), [("fsdp", FsdpEngine), ("pipeline", PipelineEngine)])
def test_an_engine_imported_on_demand_is_the_one_its_strategy_names(one_rank, strategy, kind):
    args = train.parse_args(["--strategy", strategy, "--layers", "1", "--d-model", "32",
                             "--heads", "2", "--vocab", "64", "--seq-len", "8"])  # fmt: skip
    assert isinstance(train.ENGINES[strategy](args, torch.device("cpu")), kind)


def test_the_schedules_the_options_offer_are_the_ones_the_pipeline_runs():
    assert tuple(SCHEDULES) == SCHEDULE_NAMES
