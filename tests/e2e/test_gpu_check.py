"""benchmarks/gpu.sh, the GPU check (issue 41), run here with --small: every part runs on the
CPU (2 processes, gloo, the tiny preset) and writes its JSON and its table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(900)  # seven dtrun runs: minutes under load on 2 cores
def test_the_gpu_check_runs_shrunk_on_a_cpu_and_writes_its_json_and_table(tmp_path: Path):
    done = subprocess.run(
        [str(REPO / "benchmarks" / "gpu.sh"), "--small", "--out", str(tmp_path / "out"),
         "--port", "30700"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert said["schema"] == "dtrun.gpu-check/1" and said["small"] is True
    assert said["machine"]["gpus"] == 0
    for algo in ("default", "ring"):
        one = said["allreduce"][algo]
        assert one["backend"] == "gloo" and one["size_bytes"] == 4 * 2**20
        assert one["busbw_gbs"] > 0
    training = said["training"]
    assert training["preset"] == "tiny" and training["tokens_per_s"] > 0
    assert training["mfu"] is None  # no GPU: no peak to hold it against
    program = said["program"]
    assert len(program["hook_cost_ratios"]) == 1 and program["hook_cost_ratio_median"] > 0
    table = (tmp_path / "out" / "gpu-check.md").read_text()
    assert "| all-reduce busbw, 4 MiB, NCCL_ALGO ring |" in table
    assert "| step hook's cost on a Lightning program |" in table
