"""Result files: schema version, required fields, the communication proof."""

from __future__ import annotations

import json

import pytest

from dtrun.errors import ResultError
from dtrun.report.resultfile import load_train_result
from dtrun.report.results import TRAIN_SCHEMA, parse_train_result
from dtrun.workloads import gpt, result
from tests.factories import result_data


def test_reader_and_workload_agree_on_the_schema_version():
    assert result.SCHEMA == TRAIN_SCHEMA


def test_other_schema_versions_are_refused_by_name():
    data = result_data(world=1, tokens_per_s=1.0) | {"schema": "dtrun.train/99"}
    with pytest.raises(ResultError, match=r"'dtrun\.train/99'"):
        parse_train_result(data, "r.json")


def test_missing_fields_are_named():
    data = result_data(world=1, tokens_per_s=1.0)
    del data["tokens_per_s"]
    with pytest.raises(ResultError, match="tokens_per_s"):
        parse_train_result(data, "r.json")


def test_missing_result_file_says_rank_zero_wrote_nothing(tmp_path):
    with pytest.raises(ResultError, match="rank 0 wrote no result file"):
        load_train_result(tmp_path / "result.json")


def test_broken_json_is_reported_not_raised(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("{")
    with pytest.raises(ResultError, match="not valid JSON"):
        load_train_result(path)


def test_proof_names_ranks_and_nodes_or_the_failure():
    ok = parse_train_result(result_data(world=2, tokens_per_s=1.0), "r")
    assert ok.proof == "in sync: 2 ranks on 2 nodes"
    bad = parse_train_result(result_data(world=2, tokens_per_s=1.0, in_sync=False), "r")
    assert bad.proof.startswith("FAILED")
    assert json.loads(json.dumps(result_data(world=1, tokens_per_s=1.0)))["world_size"] == 1


def test_workload_percentiles_interpolate_like_numpy():
    values = [4.0, 1.0, 3.0, 2.0]
    assert result.percentile(values, 50) == 2.5
    assert result.percentile(values, 90) == pytest.approx(3.7)
    assert result.percentile([7.0], 90) == 7.0


def test_flops_per_token_follows_6n_plus_attention():
    # 6N + 12 L H Q T with N=1e6, L=2, H=4, Q=32, T=64
    assert gpt.flops_per_token(1_000_000, 2, 4, 32, 64) == 6_000_000 + 12 * 2 * 4 * 32 * 64


def test_results_name_their_engine_and_older_ones_read_as_ddp():
    data = result_data(world=2, tokens_per_s=1.0)
    assert parse_train_result(data, "r").engine == "ddp"
    assert parse_train_result(data, "r").zero_stage is None
    deepspeed = parse_train_result(data | {"engine": "deepspeed", "zero_stage": 3}, "r")
    assert (deepspeed.engine, deepspeed.zero_stage) == ("deepspeed", 3)
