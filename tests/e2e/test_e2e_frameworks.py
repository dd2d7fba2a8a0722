"""`dtrun bench -- PROGRAM` on programs written against a training framework rather than bare
torch.distributed: a Lightning Trainer under DDP and a Hugging Face Trainer with gradient
accumulation, each unchanged, at 1 and 2 embedded nodes. The step hook must count one step per
optimizer step, at the times the program's own clock gives."""

from __future__ import annotations

import pytest

from tests.e2e.test_e2e_program import (
    PROGRAMS,
    assert_timed_as_its_own_clock,
    assert_verdicts,
    bench,
    result,
)

pytestmark = pytest.mark.e2e


def test_a_lightning_trainer_is_timed_once_per_optimizer_step(no_leftovers):
    done, run = bench(
        no_leftovers, "--", "python", str(PROGRAMS / "lightning_loop.py"), "--steps", "8",
        "--accumulate", "2", "--sleep", "0.02", run_id="lightning", port=29860,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for nodes in (1, 2):
        assert_timed_as_its_own_clock(run, nodes, 8)  # 8 optimizer steps, not 16 micro-batches
    assert result(run, 2)["proof"]["answer"] == "in sync"
    assert_verdicts(run)


def test_an_hf_trainer_with_gradient_accumulation_is_timed_once_per_optimizer_step(
    no_leftovers,
):
    done, run = bench(
        no_leftovers, "--", "python", str(PROGRAMS / "hf_trainer_loop.py"), "--steps", "8",
        "--accumulate", "4", run_id="hf", port=29862,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for nodes in (1, 2):
        assert_timed_as_its_own_clock(run, nodes, 8)  # 8 optimizer steps, not 32 micro-batches
    assert result(run, 2)["proof"]["answer"] == "in sync"
    assert_verdicts(run)
