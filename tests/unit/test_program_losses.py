"""Where a program's scaling is lost: its gradient sync counted as its parameters are sharded
(the step hook's `sharded`), and the report saying which factor it used."""

from __future__ import annotations

import json

import pytest

from dtrun.report.build import analyse, build_report
from dtrun.report.losses import allreduce_seconds
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from tests.factories import GRADIENT_BYTES, program_run_dir

PROGRAM = Program(ProgramKind.SCRIPT, "/w/train.py")
STEPS = {1: [[0.1] * 20], 2: [[0.125] * 20]}


@pytest.mark.parametrize(
    ("sharded", "factor"),
    [
        (None, 1.0),
        ("FSDP (DTensor shards)", 1.5),
        ("FSDP (flat parameter shards)", 1.5),
        ("DeepSpeed ZeRO stage 3", 1.5),
        ("DeepSpeed ZeRO stage 2", 1.0),
        ("DeepSpeed ZeRO stage 1", 1.0),
    ],
)
def test_a_program_s_gradient_sync_counts_as_its_parameters_are_sharded(
    tmp_path, fixed_inventory, sharded, factor
):
    bench = BenchSpec("p", program=PROGRAM, warmup=2, repeat=1, probe=True)
    run_dir = program_run_dir(
        tmp_path / "p", bench, fixed_inventory, STEPS, sharded=sharded, busbw={2: 2.0}
    )
    losses = {row.nodes: row for row in analyse(run_dir).losses}
    two = losses[2]
    assert two.comm_s == pytest.approx(factor * allreduce_seconds(GRADIENT_BYTES, 2.0, 2))
    assert two.sync_factor == factor
    assert (sharded or "whole on every rank") in two.sync_basis
    assert losses[1].sync_factor is None  # one process: no gradient sync


def test_the_report_says_which_factor_a_program_s_gradient_sync_used(tmp_path, fixed_inventory):
    bench = BenchSpec("p", program=PROGRAM, warmup=2, repeat=1, probe=True)
    run_dir = program_run_dir(
        tmp_path / "p", bench, fixed_inventory, STEPS, sharded="DeepSpeed ZeRO stage 3",
        busbw={2: 2.0},
    )  # fmt: skip
    build_report(run_dir)
    report = run_dir.report.read_text()
    assert (
        "- 2 nodes: **1.5**, parameters sharded (DeepSpeed ZeRO stage 3): 1.5 all-reduces' "
        "volume" in report
    )
    assert "one all-reduce of the gradient for DDP and ZeRO 1-2" not in report  # the built-in's
    summary = json.loads(run_dir.summary.read_text())
    assert [row["sync_factor"] for row in summary["where_scaling_is_lost"]] == [None, 1.5]
    assert summary["rows"][1]["sharded"] == "DeepSpeed ZeRO stage 3"


def test_a_program_s_report_calls_its_dtype_its_parameters_not_its_precision(
    tmp_path, fixed_inventory
):
    # an HF Trainer under --bf16 keeps float32 parameters and computes under autocast, which the
    # step hook does not see (seen on an H200, docs/benchmarks.md)
    bench = BenchSpec("p", program=PROGRAM, warmup=2, repeat=1)
    run_dir = program_run_dir(tmp_path / "p", bench, fixed_inventory, STEPS)
    build_report(run_dir)
    report = run_dir.report.read_text()
    (backend,) = [line for line in report.splitlines() if line.startswith("| Backend |")]
    assert backend.endswith(" parameters (a mixed-precision autocast is not recorded), torch n/a |")


def test_a_program_run_without_a_probe_is_told_to_rerun_with_probe(tmp_path, fixed_inventory):
    """A program's all-reduce probe is --probe; --no-busbw is the built-in workloads' flag."""
    bench = BenchSpec("p", program=PROGRAM, warmup=2, repeat=1)
    run_dir = program_run_dir(tmp_path / "p", bench, fixed_inventory, STEPS)
    two = {row.nodes: row for row in analyse(run_dir).losses}[2]
    assert two.finding.endswith("no all-reduce probe to say why (rerun with --probe)")
