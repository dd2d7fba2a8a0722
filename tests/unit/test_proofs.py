"""The proofs that ranks communicated: the pipeline's checks on recorded fingerprints (pure), and
a real launch whose ranks never communicate, which must fail its proof and exit 3."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any

from dtrun.workloads.pipeline_proof import Layout, pipeline_proof
from tests.paths import REPO

ROOT = REPO


def stage(sent: list[float], got: list[float], grads_out: list[float], grads_in: list[float],
          **fields: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "activations_sent": sent,
        "activations_received": got,
        "gradients_sent": grads_out,
        "gradients_received": grads_in,
        "tied": None,
        "initial": 1.0,
        "final": 2.0,
        "losses": 0,
        **fields,
    }


def two_stage_records(replica: int = 0, initial: float = 1.0) -> list[dict[str, Any]]:
    """One pipeline of 2 ranks, 2 micro-batches: what rank 0 sent, rank 1 received."""
    acts, grads = [0.5, 0.25], [-0.125, 0.0625]
    first = stage(list(acts), [], [], list(grads), tied=3.0, initial=initial)
    last = stage([], list(acts), list(grads), [], tied=3.0, losses=2, initial=initial + 1)
    return [
        {"replica": replica, "stages": {0: first}, "initial": initial, "final": 2.0},
        {"replica": replica, "stages": {1: last}, "initial": initial + 1, "final": 2.0},
    ]


LAYOUT = Layout(pp=2, replicas=1, stages_per_rank=1, micro_batches=2)


def failed(records: list[dict[str, Any]], layout: Layout = LAYOUT) -> list[str]:
    proof = pipeline_proof(layout, records)
    return [check.name for check in proof.checks if not check.ok]


def test_a_pipeline_whose_stages_passed_everything_on_is_verified():
    proof = pipeline_proof(LAYOUT, two_stage_records())
    assert proof.ok and proof.kind == "pipeline"
    assert [c.name for c in proof.checks] == ["activations", "gradients", "tied embedding", "loss"]
    assert "1 stage boundaries (1 between ranks)" in proof.checks[0].detail


def test_an_activation_that_arrived_changed_fails_the_activations_check():
    records = two_stage_records()
    records[1]["stages"][1]["activations_received"][1] += 1e-9
    assert failed(records) == ["activations"]


def test_a_micro_batch_that_never_arrived_fails_it_too():
    records = two_stage_records()
    records[1]["stages"][1]["activations_received"].pop()
    assert failed(records) == ["activations"]


def test_a_gradient_sent_back_that_differs_fails_the_gradients_check():
    records = two_stage_records()
    records[0]["stages"][0]["gradients_received"][0] *= 2
    assert failed(records) == ["gradients"]


def test_tied_embedding_copies_that_drifted_apart_fail():
    records = two_stage_records()
    records[1]["stages"][1]["tied"] = 3.1
    assert failed(records) == ["tied embedding"]


def test_a_loss_computed_anywhere_but_the_last_stage_fails():
    records = two_stage_records()
    records[0]["stages"][0]["losses"] = 2
    assert failed(records) == ["loss"]


def test_pipelines_side_by_side_must_end_equal_after_starting_apart():
    layout = Layout(pp=2, replicas=2, stages_per_rank=1, micro_batches=2)
    records = two_stage_records(0, initial=1.0) + two_stage_records(1, initial=5.0)
    proof = pipeline_proof(layout, records)
    assert proof.ok and proof.initial_params_differed is True
    drifted = copy.deepcopy(records)
    drifted[3]["stages"][1]["final"] = 2.5
    assert failed(drifted, layout) == ["replicas"]


def test_ranks_that_never_communicate_fail_the_proof_and_exit_3(tmp_path):
    # Two real processes of the training workload, with a DDP engine that never all-reduces.
    port = "29860"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}  # fmt: skip
    args = ["--steps", "3", "--warmup", "1", "--timeout", "60", "--out", str(tmp_path / "r.json")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.lonely_training", *args],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [3, 3], outputs
    assert "weights: the full parameters agree" in outputs[0][1]
    result = json.loads((tmp_path / "r.json").read_text())
    comm = result["communication"]
    assert comm["ok"] is False and comm["params_in_sync"] is False
    assert {c["name"]: c["ok"] for c in comm["checks"]} == {"weights": False, "gradients": False}
