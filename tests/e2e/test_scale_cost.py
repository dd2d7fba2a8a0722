"""benchmarks/scale_cost.py, dtrun's own cost by node count (issue 41), run at a few nodes: real
sshd nodes in a network namespace of its own, every command it times, and its fits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sshd
from tests.paths import REPO

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(900)  # a dtrun check at 2 nodes is a minute or two under load
def test_the_scale_benchmark_times_every_command_at_a_few_nodes_and_fits_them(tmp_path: Path):
    if not sshd.available():
        pytest.skip(f"sshd is not installed: {sshd.ENABLE}")
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "scale_cost.py"), "--nodes", "2,4",
         "--rounds", "1", "--check-nodes", "2", "--records", "4,8", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = json.loads(out.read_text())
    timed = sorted((c["what"], c["nodes"]) for c in said["costs"])
    on_nodes = [("exec", 2), ("exec", 4), ("launch", 2), ("launch", 4), ("check", 2)]
    on_nodes += [("lines", 2), ("lines", 4)]  # the launch of `seq 1 100`
    on_records = [("report", 4), ("report", 8), ("compare", 4), ("compare", 8)]
    assert timed == sorted([*on_nodes, *on_records])
    for cost in said["costs"]:
        assert cost["wall_s"] >= cost["cpu_s"] * 0.5 > 0 and cost["rss_mb"] > 10, cost
    fits = {row["what"]: row for row in said["summary"]}
    assert set(fits) == {"exec", "launch", "lines", "check", "report", "compare"}
    assert "us of dtrun CPU a line" in done.stdout
    assert len(fits["exec"]["marginal_cpu_ms_per_node"]) == 1
    assert set(fits["report"]["extrapolated"]) == {"1024", "4096"}
