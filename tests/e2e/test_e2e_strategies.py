"""Real launches of every training strategy on the embedded cluster (docs/workloads.md).

Each pipeline schedule trains the tiny GPT split over 2 nodes and proves its activations and
gradients crossed between them; FSDP and ZeRO 3 (DeepSpeed's engine under torchrun) shard the
model over 2 nodes and prove their reduced gradient averaged both ranks'; pipeline and FSDP also
train under mpirun, and FSDP under the deepspeed launcher. Each test has ports of its own
(29800-29899); each runs a few steps only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dtrun

pytestmark = pytest.mark.e2e

QUICK = ("--steps", "6", "--warmup", "2", "--repeat", "1", "--quiet")


def bench(run_id: str, port: int, cwd: Path, nodes: str, *extra: str) -> Path:
    out = cwd / "runs"
    done = run_dtrun(
        "bench", "--nodes", nodes, *QUICK, "--port", str(port), "--output", str(out),
        "--run-id", run_id, *extra, cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out / run_id


def result_at(run: Path, nodes: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / f"n{nodes}" / "r0" / "result.json").read_text())
    return data


def checks_of(result: dict[str, Any]) -> dict[str, bool]:
    return {check["name"]: check["ok"] for check in result["communication"]["checks"]}


def assert_on_two_nodes(result: dict[str, Any]) -> None:
    assert result["world_size"] == 2
    assert [r["node"] for r in result["ranks"]] == ["node-0", "node-1"]
    assert result["communication"]["ok"] is True
    assert result["samples_per_s"] > 0 and result["peak_memory_max_bytes"] > 0


@pytest.mark.parametrize(
    ("schedule", "port", "extra", "stages"),
    [
        ("gpipe", 29800, (), 2),
        # bf16 autocast on CPU: the last stage sends bf16 logits to the loss.
        ("1f1b", 29810, ("--dtype", "bfloat16"), 2),
        # Two stages per rank: 4 stages need 4 layers (the tiny preset has 2).
        ("interleaved-1f1b", 29820, ("--layers", "4"), 4),
    ],
)
def test_each_pipeline_schedule_trains_over_two_nodes_and_proves_what_crossed(
    no_leftovers, schedule, port, extra, stages
):
    run = bench(
        schedule, port, no_leftovers, "2", "--strategy", "pipeline", "--schedule", schedule,
        "--micro-batches", "2", *extra,
    )  # fmt: skip
    result = result_at(run, 2)
    assert_on_two_nodes(result)
    assert result["dtype"] == ("bfloat16" if "--dtype" in extra else "float32")
    assert (result["strategy"], result["schedule"], result["micro_batches"]) == (
        "pipeline",
        schedule,
        2,
    )
    assert (result["pp_size"], result["stages"], result["data_parallel"]) == (2, stages, 1)
    assert result["communication"]["proof"] == "pipeline"
    assert checks_of(result) == {
        "activations": True,
        "gradients": True,
        "tied embedding": True,
        "loss": True,
    }
    # Every boundary crossed between the two ranks: with 2 stages per rank, all 3 of them.
    crossed = f"{stages - 1} stage boundaries ({stages - 1} between ranks)"
    assert crossed in result["communication"]["checks"][0]["detail"]
    # The loss came from the last stage, on the second node, and is a real cross entropy.
    assert 0 < result["loss"]["last"] < 2 * result["loss"]["first"]
    report = (run / "report.md").read_text()
    layout = f"{stages} stages{' (2 per rank)' if stages == 4 else ''} over 2 ranks, 1 pipeline"
    assert f"| Strategy | pipeline ({schedule}, 2 micro-batches); at 2 nodes: {layout} |" in (
        report
    )
    assert "pipeline verified: 2 ranks on 2 nodes" in report
    proof = json.loads((run / "summary.json").read_text())["proof"]
    assert any(c["name"] == "activations" and c["ok"] for c in proof["checks"])


def test_a_pipeline_sweep_from_one_node_keeps_the_batch_per_pipeline(no_leftovers):
    run = bench(
        "sweep", 29830, no_leftovers, "1,2", "--strategy", "pipeline", "--schedule", "1f1b",
        "--micro-batches", "4",
    )  # fmt: skip
    one, two = result_at(run, 1), result_at(run, 2)
    assert (one["stages"], one["communication"]["proof"]) == (1, "single process")
    assert (two["stages"], two["communication"]["proof"]) == (2, "pipeline")
    assert one["global_batch"] == two["global_batch"] == 8  # one pipeline at both sizes
    summary = json.loads((run / "summary.json").read_text())
    assert summary["strategy"] == "pipeline (1f1b, 4 micro-batches)"
    assert [row["samples_per_s"] > 0 for row in summary["rows"]] == [True, True]


def test_fsdp_shards_over_two_nodes_and_its_reduced_gradient_averages_both(no_leftovers):
    run = bench("fsdp", 29840, no_leftovers, "2", "--strategy", "fsdp")
    result = result_at(run, 2)
    assert_on_two_nodes(result)
    assert (result["strategy"], result["engine"], result["zero_stage"]) == ("fsdp", "fsdp", None)
    assert checks_of(result) == {"weights": True, "gradients": True}
    assert result["communication"]["initial_params_differed"] is True
    assert "| Strategy | fsdp |" in (run / "report.md").read_text()


def test_zero3_runs_deepspeed_under_torchrun_over_two_nodes(no_leftovers):
    # The first DeepSpeed launch on a machine compiles its shared-memory op (~30 s, cached).
    run = bench("zero3", 29850, no_leftovers, "2", "--strategy", "zero3")
    result = result_at(run, 2)
    assert_on_two_nodes(result)
    assert (result["strategy"], result["engine"], result["zero_stage"]) == (
        "zero3",
        "deepspeed",
        3,
    )
    assert checks_of(result) == {"weights": True, "gradients": True}
    config = json.loads((run / "n2" / "r0" / "ds_config.json").read_text())
    assert config["zero_optimization"] == {"stage": 3}
    assert "| Strategy | zero3 (DeepSpeed ZeRO stage 3) |" in (run / "report.md").read_text()


@pytest.mark.parametrize(
    ("launcher", "strategy", "port", "proof", "checks"),
    [
        (
            "mpirun",
            "pipeline",
            29860,
            "pipeline",
            {"activations", "gradients", "tied embedding", "loss"},
        ),
        ("mpirun", "fsdp", 29870, "data parallel", {"weights", "gradients"}),
        ("deepspeed", "fsdp", 29880, "data parallel", {"weights", "gradients"}),
    ],
)
def test_strategies_train_under_the_other_launchers_too(
    no_leftovers, launcher, strategy, port, proof, checks
):
    # The launcher only starts the ranks (mpirun's wrapper maps OMPI_* to the PyTorch contract;
    # DeepSpeed's launcher sets it itself); the strategy's process groups form as under torchrun.
    run = bench(
        f"{launcher}-{strategy}", port, no_leftovers, "2", "--launcher", launcher,
        "--strategy", strategy, "--no-busbw",
    )  # fmt: skip
    result = result_at(run, 2)
    assert_on_two_nodes(result)
    assert (result["strategy"], result["communication"]["proof"]) == (strategy, proof)
    assert checks_of(result) == dict.fromkeys(checks, True)
    assert launcher in (run / "n2" / "r0" / "node-0.sh").read_text()
