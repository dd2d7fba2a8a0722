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

# program, its options, port: 8 optimizer steps, not 16 (Lightning) or 32 (HF) micro-batches
FRAMEWORKS = {
    "lightning": ("lightning_loop.py", ("--accumulate", "2", "--sleep", "0.02"), 29860),
    "hf": ("hf_trainer_loop.py", ("--accumulate", "4"), 29862),
}


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_a_framework_trainer_is_timed_once_per_optimizer_step(no_leftovers, name):
    program, options, port = FRAMEWORKS[name]
    done, run = bench(
        no_leftovers, "--", "python", str(PROGRAMS / program), "--steps", "8", *options,
        run_id=name, port=port,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for nodes in (1, 2):
        assert_timed_as_its_own_clock(run, nodes, 8)
    assert result(run, 2)["proof"]["answer"] == "in sync"
    assert_verdicts(run)
