"""A real launch on the embedded cluster: each node's ranks run on that node's own core, as a
machine's processes run on its own cores (runner/engines/embedded/inventory.py node_cores), and
the run's record says which. Ports 29950, 29954 and 29958."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import DTRUN, run_dtrun

pytestmark = pytest.mark.e2e

# A user program under torchrun: records the cores its rank may run on.
PROGRAM = """
import json, os
with open(f"cores-{os.environ['RANK']}.json", "w") as out:
    cores = sorted(os.sched_getaffinity(0))
    json.dump({"node": os.environ["DTRUN_NODE_NAME"], "cores": cores}, out)
"""


def test_each_embedded_node_s_rank_runs_on_that_node_s_own_core(no_leftovers):
    script = no_leftovers / "cores.py"
    script.write_text(PROGRAM)
    out = no_leftovers / "runs"
    done = run_dtrun(
        "run", "--nodes", "2", "--port", "29950", "--output", str(out), "--run-id", "cores",
        "--", "python", str(script), cwd=no_leftovers,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    allowed = sorted(os.sched_getaffinity(0))
    share = max(1, len(allowed) // 2)
    seen = [json.loads((out / "cores" / "launch" / f"cores-{r}.json").read_text()) for r in (0, 1)]
    assert [s["node"] for s in seen] == ["node-0", "node-1"]
    assert seen[0]["cores"] == allowed[:share]
    assert seen[1]["cores"] == allowed[share : 2 * share] or len(allowed) == 1
    manifest = json.loads((out / "cores" / "run.json").read_text())
    recorded = [node["cores"] for node in manifest["inventory"]["nodes"]]
    assert recorded == [s["cores"] for s in seen]
    assert manifest["machine"]["usable_cpus"] == len(allowed)


def test_dtrun_kept_to_one_core_keeps_its_nodes_there_and_says_they_share_it(no_leftovers):
    script = no_leftovers / "cores.py"
    script.write_text(PROGRAM)
    out = no_leftovers / "runs"
    core = str(max(os.sched_getaffinity(0)))
    done = subprocess.run(
        ["taskset", "--cpu-list", core, *DTRUN, "run", "--nodes", "2", "--port", "29954",
         "--output", str(out), "--run-id", "one", "--", "python", str(script)],
        cwd=no_leftovers, env=dict(os.environ, COLUMNS="400"), capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 processes at 2 nodes (1 process per node) on the 1 core dtrun may use" in (
        done.stdout + done.stderr
    )
    seen = [json.loads((out / "one" / "launch" / f"cores-{r}.json").read_text()) for r in (0, 1)]
    assert [s["cores"] for s in seen] == [[int(core)], [int(core)]]
    manifest = json.loads((out / "one" / "run.json").read_text())
    assert manifest["machine"]["usable_cpus"] == 1


def test_check_on_nodes_kept_to_one_core_says_they_share_it(no_leftovers):
    """dtrun check's gaps between nodes that share a core are the shared CPU's, not a node's."""
    core = str(max(os.sched_getaffinity(0)))
    done = subprocess.run(
        ["taskset", "--cpu-list", core, *DTRUN, "check", "--local-nodes", "2", "--port", "29958",
         "--output", str(no_leftovers / "runs"), "--run-id", "shared"],
        cwd=no_leftovers, env=dict(os.environ, COLUMNS="400"), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout + done.stderr  # judged, whatever it found
    assert "2 processes at 2 nodes (1 process per node) on the 1 core dtrun may use" in (
        done.stdout + done.stderr
    )
