"""A user's program whose rank ended early with no error (a ``sys.exit(0)`` on rank 1 alone):
the failed launch names that rank first, not the node whose rank then lost its peer."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
from pathlib import Path
from typing import Any, cast

import pytest

from dtrun.errors import NodeFailedError
from dtrun.execute import Executor
from dtrun.plan.sweep import Launch
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import STEP_DIR, LaunchPlan
from dtrun.spec.outcome import NodeResult, RunStatus
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from dtrun.sweep.runlaunch import Outcome, always_ready, run_launch
from tests.conftest import fill
from tests.paths import REPO
from tests.plans import sweep_plan

PEER_LOST = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer"


def record(rank: int, steps: int, ended_at_s: float, raised: str | None) -> dict[str, Any]:
    """A rank's step record as the hook writes it at exit, on node-<rank>."""
    return {
        "schema": "dtrun.steps/1", "rank": str(rank), "node": f"node-{rank}",
        "step_ends_s": [1.0 + step for step in range(steps)], "params": 10,
        "gradient_bytes": {"float32": 40}, "param_digest": "d0", "sharded": None,
        "errors": [], "ended_at_s": ended_at_s, "raised": raised,
    }  # fmt: skip


def launch_failing(tmp_path: Path, inventory: Inventory, records: list[dict[str, Any]]) -> Outcome:
    """A 2-node launch of a program whose ranks left ``records``; node-0 failed, node-1 was
    still running (torchrun waits for its peers before it exits) when node-0 stopped it."""
    program = Program(ProgramKind.SCRIPT, "/w/exit1.py")
    bench = BenchSpec("p", program=program, node_counts=(2,), warmup=2, repeat=1)
    launch = Launch(sweep_plan(inventory, bench).launches[0].plan, "n2/r0")

    class Failing:
        def run(self, plan: LaunchPlan, where: Path, **_: object) -> tuple[NodeResult, ...]:
            (where / STEP_DIR).mkdir(parents=True)
            for each in records:
                (where / STEP_DIR / f"rank-{each['rank']}.json").write_text(json.dumps(each))
            log = where / "node-0.log"
            log.write_text(f"[rank0]: {PEER_LOST}\n")
            failed = NodeFailedError("node-0", "127.0.0.2", 1, str(log), PEER_LOST)
            failed.node_results = (
                NodeResult("node-0", "127.0.0.2", 1, str(log), 3.0),
                NodeResult("node-1", "127.0.0.3", None, str(where / "node-1.log"), 0.0),
            )
            raise failed

    return run_launch(
        launch,
        tmp_path,
        cast(Executor, Failing()),
        timeout_s=60,
        on_line=lambda *_: None,
        ready=always_ready,
    )


def test_a_rank_that_exited_0_while_the_others_ran_on_is_named_before_their_failure(
    tmp_path: Path, fixed_inventory: Inventory
):
    records = [record(0, 2, 1000.5, "RuntimeError"), record(1, 2, 1000.0, None)]
    outcome = launch_failing(tmp_path, fixed_inventory, records)
    assert outcome.error is not None and outcome.run.status is RunStatus.FAILED
    said = outcome.error.message
    assert said.startswith(
        "node-1's rank 1 ended with no traceback after step 2 while the others ran on; the others "
        "then failed: node-0 (127.0.0.2) failed with exit code 1"
    )
    assert "Connection closed by peer" in said  # their failure follows, as it was
    assert f"read {tmp_path / 'n2' / 'r0' / 'node-1.log'}" in said
    assert outcome.run.error == said and len(outcome.run.node_results) == 2


def test_a_rank_that_ended_cleanly_after_the_failure_is_not_taken_for_its_cause(
    tmp_path: Path, fixed_inventory: Inventory
):
    records = [record(0, 2, 1000.0, "RuntimeError"), record(1, 2, 1000.5, None)]
    said = launch_failing(tmp_path, fixed_inventory, records).error
    assert isinstance(said, NodeFailedError) and said.node == "node-0"


def test_records_of_a_hook_that_did_not_say_how_ranks_ended_leave_the_failure_as_it_was(
    tmp_path: Path, fixed_inventory: Inventory
):
    records = [record(0, 2, 1000.5, "RuntimeError"), record(1, 2, 1000.0, None)]
    for each in records:
        del each["ended_at_s"], each["raised"]
    said = launch_failing(tmp_path, fixed_inventory, records).error
    assert isinstance(said, NodeFailedError) and said.node == "node-0"


def test_a_rank_that_raised_its_own_error_is_not_said_to_have_lost_a_peer(
    tmp_path: Path, fixed_inventory: Inventory
):
    """Rank 1 finished cleanly; rank 0 then failed saving its checkpoint (OSError): rank 1's
    clean end is no cause of rank 0's failure."""
    records = [record(0, 2, 1000.5, "OSError"), record(1, 2, 1000.0, None)]
    said = launch_failing(tmp_path, fixed_inventory, records).error
    assert isinstance(said, NodeFailedError) and said.node == "node-0"


def test_a_rank_that_exited_0_under_horovod_is_named_before_the_shutdown_the_others_raised(
    tmp_path: Path, fixed_inventory: Inventory
):
    """Under Horovod a rank that left raises nothing in the others' collectives but
    HorovodInternalError ("Horovod has been shut down ... after one of the ranks finished
    execution", horovodrun --gloo, rank 1 sys.exit(0) at step 2). Before, that was taken for
    an error of the rank's own, and the rank that left was not named."""
    records = [record(0, 2, 1000.5, "HorovodInternalError"), record(1, 2, 1000.0, None)]
    said = launch_failing(tmp_path, fixed_inventory, records).error
    assert said is not None
    assert said.message.startswith("node-1's rank 1 ended with no traceback after step 2")


def test_a_rank_whose_checkpoint_a_full_disk_refused_failed_of_its_own(
    tmp_path: Path, fixed_inventory: Inventory
):
    """Rank 1 finished cleanly; rank 0's torch.save then met a full disk, which torch raises as
    a RuntimeError ("PytorchStreamWriter failed writing file data/0: file write failed"), the
    type a lost peer's error has too. The hook says the write failed (``raised_write``): rank
    0's own error stands. Before, rank 1 was named as the cause of a failure it had no part
    in."""
    records = [record(0, 2, 1000.5, "RuntimeError"), record(1, 2, 1000.0, None)]
    records[0]["raised_write"] = True
    said = launch_failing(tmp_path, fixed_inventory, records).error
    assert isinstance(said, NodeFailedError) and said.node == "node-0"


def steprecord() -> Any:
    """The step hook's record module, loaded by its path as the hook loads it."""
    path = REPO / "runner" / "workloads" / "stephook" / "_dtrun_steprecord.py"
    spec = importlib.util.spec_from_file_location("_dtrun_steprecord_tested", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SAVE_FAILED = (
    "[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing file "
    "data/0: file write failed"
)


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (RuntimeError(_SAVE_FAILED), True),
        (RuntimeError("basic_ios::clear: iostream error"), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), True),
        (RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer"), False),
        (OSError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)), False),
        (None, False),
    ],
)
def test_the_hook_says_an_exception_of_a_write_a_full_disk_refused(
    raised: BaseException | None, said: bool
):
    assert steprecord().raised_write(raised) is said


def test_the_hook_finds_a_full_disk_behind_the_exception_a_program_raised_from_it():
    def save() -> None:
        try:
            Path("/dev/full").write_bytes(b"checkpoint")  # ENOSPC, as a full disk says
        except OSError as exc:
            raise RuntimeError("saving the checkpoint failed") from exc

    with pytest.raises(RuntimeError) as raised:
        save()
    assert steprecord().raised_write(raised.value) is True


def test_the_hook_says_torch_save_on_a_full_disk_failed_to_write(small_disk: Any):
    """torch.save on a full tmpfs (torch 2.13): "basic_ios::clear: iostream error", then
    "unexpected pos 576 vs 534" raised while handling it; neither names the disk."""
    import torch

    disk = small_disk(64)
    fill(disk)
    with pytest.raises(RuntimeError) as raised:
        torch.save(torch.nn.Linear(4, 2).state_dict(), disk / "checkpoint.pt")
    assert steprecord().raised_write(raised.value) is True
