"""report.md's "What stopped the sweep": the error dtrun recorded, which may quote a node's output
or a hosts-file value, stays inside its code block whatever backticks it holds."""

from __future__ import annotations

import json

from dtrun.render import code_block
from dtrun.report.build import build_report
from dtrun.spec.outcome import SweepStatus
from dtrun.spec.request import BenchSpec
from tests.factories import fake_run_dir

HOSTILE = "node-1 said:\n```\n# Verdict\n\n| 2 | scales |\n````\n[click](http://evil.example)"


def test_a_code_block_s_fence_is_longer_than_any_backtick_run_in_it():
    block = code_block("a ``` b ```` c", "shell")
    fence = block.splitlines()[0].removesuffix("shell")
    assert fence == "`````" and block.endswith("\n`````")


def test_a_recorded_error_cannot_end_its_code_block_and_become_markdown(tmp_path, fixed_inventory):
    run = fake_run_dir(tmp_path / "r", BenchSpec(run_id="r", node_counts=(1, 2)), fixed_inventory,
                       {1: [1000]}, status=SweepStatus.FAILED)  # fmt: skip
    runs = json.loads(run.runs.read_text())
    runs["error"] = HOSTILE
    run.runs.write_text(json.dumps(runs))
    build_report(run)
    text = run.report.read_text()
    section = text[text.index("## What stopped the sweep") :].split("\n## ")[0]
    lines = section.splitlines()
    opening = next(i for i, line in enumerate(lines) if line.startswith("```"))
    fence = lines[opening]
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i] == fence)
    assert "\n".join(lines[opening + 1 : closing]) == HOSTILE  # whole, inside the block
    assert len(fence) == 5  # longer than the error's own ````
