"""Rendered launch scripts: golden files, quoting, bash -n and shellcheck."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import jinja2
import pytest

from dtrun.render import render, shell_line, shquote
from dtrun.spec.request import BenchSpec, ModelSpec, ScalingMode
from tests.conftest import require_tool
from tests.plans import build_plan

NASTY = (
    ("WANDB_PROJECT", 'it\'s a "test" $(touch /tmp/pwned) `id` ; rm -rf /'),
    ("EMPTY", ""),
    ("SPACES", "  a  b  "),
    ("NEWLINE", "one\ntwo"),
)

CASES = {
    "weak": BenchSpec(run_id="golden"),
    "strong-2ppn": BenchSpec(
        run_id="golden",
        mode=ScalingMode.STRONG,
        procs_per_node=2,
        node_counts=(1, 2, 4),
        batch=16,
        model=ModelSpec(layers=4, d_model=256, heads=8, seq_len=128, vocab=4096),
    ),
    "user-env": BenchSpec(run_id="golden", env=NASTY),
}


def all_scripts(inventory):
    for case, spec in CASES.items():
        for nodes in (1, 2, 4):
            for launch in build_plan(inventory, spec, nodes).launches:
                yield f"torchrun/{case}/n{nodes}-{launch.script_name}", launch.script


def test_launch_scripts_match_their_golden_files(fixed_inventory, golden):
    for name, script in all_scripts(fixed_inventory):
        golden(name, script)


def test_every_launch_script_parses_with_bash(fixed_inventory):
    for name, script in all_scripts(fixed_inventory):
        checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"


def test_every_launch_script_passes_shellcheck(fixed_inventory):
    shellcheck = require_tool("shellcheck")
    for name, script in all_scripts(fixed_inventory):
        checked = subprocess.run(
            [shellcheck, "--shell=bash", "--severity=style", "-"],
            input=script,
            text=True,
            capture_output=True,
        )
        assert checked.returncode == 0, f"{name}:\n{checked.stdout}"


def test_env_values_reach_the_process_unchanged_and_unexecuted(fixed_inventory, tmp_path):
    script = build_plan(fixed_inventory, CASES["user-env"], 1).launches[0].script
    exports = script[script.index("export WANDB_PROJECT") : script.index("\n\n# torchrun")]
    names = " ".join(name for name, _ in NASTY)
    probe = f"{exports}\nfor k in {names}; do printf '%s\\0' \"${{!k}}\"; done\n"
    out = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True, check=True)
    assert out.stdout.split(b"\0")[:-1] == [value.encode() for _, value in NASTY]
    assert not (tmp_path / "pwned").exists()


def test_shquote_leaves_plain_words_and_quotes_everything_else():
    assert shquote(29400) == "29400"
    assert shquote("127.0.0.2:29400") == "127.0.0.2:29400"
    assert shquote("a b") == "'a b'"
    assert shquote("it's") == "'it'\"'\"'s'"


def test_undefined_template_variables_are_errors_not_empty_strings(fixed_inventory, spec):
    with pytest.raises(jinja2.UndefinedError):
        render("launch/torchrun.sh.j2", {"version": "x"})


def test_scripts_start_strict_and_export_the_environment_contract(fixed_inventory, spec):
    script = build_plan(fixed_inventory, replace(spec, procs_per_node=2), 2).launches[1].script
    lines = script.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines[:5]
    for export in (
        "export MASTER_ADDR=127.0.0.2",
        "export MASTER_PORT=29401",
        "export WORLD_SIZE=4",
        "export NODE_RANK=1",
        "export LOCAL_WORLD_SIZE=2",
    ):
        assert export in lines


def test_a_command_that_renders_nothing_does_not_load_jinja2():
    # `dtrun exec` and `dtrun --help` render no template: jinja2 cost them 21 ms a start
    import sys

    code = "import sys, dtrun.cli.app; print('jinja2' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_shown_command_line_is_one_line_that_bash_reads_back_word_for_word():
    words = ["dtrun", "A=x\ny\x1b", "it's\\", "a\\n'\nb\t", "\x85\u2028\u202e", "plain"]
    line = shell_line(words)
    assert "\n" not in line and "\r" not in line and "\u2028" not in line
    read = subprocess.run(["bash", "-c", 'printf "%s|" ' + line], capture_output=True, check=True)
    assert read.stdout.decode().split("|")[:-1] == words


# YAML (1.1 and 1.2) reads no U+FFFE or U+FFFF, not even inside a block scalar, and takes no
# surrogate pair in a \u escape: each stands for a character of its own (PyYAML, cloud-init's).
YAML_TEXTS = ["numpy\uffff", "a\ufffeb\n", "a\x1b\U0001f600", "\U0001f600\n", "\\ud83d\\ude00\r"]


@pytest.mark.parametrize("text", YAML_TEXTS)
def test_yaml_quoting_reads_back_any_text_exactly(text):
    import yaml

    from dtrun.render import yaml_block, yaml_str

    assert yaml.safe_load(f"k: {yaml_str(text)}\n") == {"k": text}
    assert yaml.safe_load(f"k:\n  v: {yaml_block(text, 4)}\n") == {"k": {"v": text}}
