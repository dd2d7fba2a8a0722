"""A short script's answer (exec, readiness, peers) keeps its last lines only: a node
printing far more than ANSWER_MOST does not grow dtrun's memory by as much."""

from __future__ import annotations

import subprocess

from dtrun.engines.common.scripts import ANSWER_MOST, run_scripts


def _bash(_name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["bash", "-s"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_a_script_printing_three_times_the_answer_s_most_keeps_only_its_last_lines():
    count = 3 * ANSWER_MOST // 1024  # lines of 1,024 characters with their newline
    script = f"seq -f '%08g' 0 {count - 1} | sed 's/$/ {'x' * 1014}/'; echo done\n"
    shown: list[str] = []
    answers = run_scripts({"n0": script, "n1": "echo small\n"}, _bash,
                          lambda name, line: shown.append(name))  # fmt: skip
    lines, code = answers["n0"]
    assert code == 0
    assert shown.count("n0") == count + 1  # every line shown as it came
    assert sum(len(line) + 1 for line in lines) <= ANSWER_MOST
    assert lines[-1] == "done" and lines[-2].startswith(f"{count - 1:08d} ")
    assert len(lines) >= ANSWER_MOST // 1024 - 1  # the last lines, not just the last one
    assert answers["n1"] == (["small"], 0)
