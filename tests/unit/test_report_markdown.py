"""report.md and report.html show recorded values as text: every value the report quotes is
escaped for Markdown (runner/render.py ``md``), commands and paths sit in code spans that
nothing in them can end (CommonMark 0.31.2 §6.1), and a table cell's pipes split no cell."""

from __future__ import annotations

import json
import re

import pytest

from dtrun.locations import templates_dir
from dtrun.render import code, md
from dtrun.report.build import build_report
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from tests.factories import fake_run_dir, program_run_dir
from tests.inert import PARSER, html_problems, markdown_problems

EVIL = "![x](https://evil.example/i.png) [l](https://evil.example/) <b>b</b> *e* | `t` ``` a"


@pytest.mark.parametrize(
    ("file", "path"),
    [
        ("manifest.json", ("machine", "hostname")),
        ("manifest.json", ("machine", "cpu")),
        ("manifest.json", ("inventory", "nodes", 0, "name")),
        ("manifest.json", ("bench", "launcher")),
        ("manifest.json", ("versions", "torch")),
        ("n1/r0/result.json", ("device",)),
        ("n1/r0/result.json", ("device_name",)),
        ("n1/r0/result.json", ("torch_version",)),
    ],
    ids=lambda part: part if isinstance(part, str) else ".".join(map(str, part)),
)
def test_a_record_string_becomes_no_image_link_html_or_cell_in_the_report(
    tmp_path, fixed_inventory, file, path
):
    run = fake_run_dir(tmp_path / "r", BenchSpec("r", node_counts=(1, 2)), fixed_inventory,
                       {1: [1000], 2: [1800]})  # fmt: skip
    record = run.path / file
    data = json.loads(record.read_text())
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = f"⟦1⟧{EVIL}"
    record.write_text(json.dumps(data))
    build_report(run)
    expected = {"⟦1⟧": (EVIL, False)}
    assert "⟦1⟧" in run.report.read_text()
    assert markdown_problems(run.report.read_text(), expected) == []
    assert html_problems(run.html.read_text(), expected) == []


def test_program_arguments_and_an_env_value_with_backticks_stay_in_their_code_spans(
    tmp_path, fixed_inventory
):
    args = ("--title", "# Heading", "--img", "![x](https://evil.example/i.png)", "--t", "a`b``c")
    bench = BenchSpec("p", program=Program(ProgramKind.SCRIPT, "/w/train.py", args),
                      node_counts=(1, 2), warmup=2, repeat=1)  # fmt: skip
    run = program_run_dir(tmp_path / "p", bench, fixed_inventory, {1: [[0.1] * 5], 2: [[0.12] * 5]})
    manifest = json.loads(run.manifest.read_text())  # as `--env NOTE=...` records it
    manifest["launch_environment"] = [
        {"key": "NOTE", "value": "`x` | ![y](https://evil.example/y.png)", "why": "--env"}
    ]
    run.manifest.write_text(json.dumps(manifest))
    build_report(run)
    text = run.report.read_text()
    assert markdown_problems(text, {}) == [] and html_problems(run.html.read_text(), {}) == []
    spans = [
        child.content
        for token in PARSER.parse(text)
        if token.type == "inline"
        for child in token.children or []
        if child.type == "code_inline"
    ]
    line = "python /w/train.py --title '# Heading' --img '![x](https://evil.example/i.png)'"
    assert any(span.startswith(line) and span.endswith("--t 'a`b``c'") for span in spans)
    # the pipe goes between two spans, escaped, so that the row keeps its cells
    cell = "`` NOTE=`x`  ``\\|`  ![y](https://evil.example/y.png) `"
    assert f"| launch environment | {cell} |" in text


def test_a_launch_environment_value_named_as_a_secret_is_not_shown_though_recorded_plain(
    tmp_path, fixed_inventory
):
    """A run directory written by another tool, an older dtrun or edited by hand: the report
    masks the value of a secret-named variable as the manifest writer does (redact_var)."""
    run = fake_run_dir(tmp_path / "r", BenchSpec("r", node_counts=(1, 2)), fixed_inventory,
                       {1: [1000], 2: [1800]})  # fmt: skip
    manifest = json.loads(run.manifest.read_text())
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # no token shape: only its name says
    manifest["launch_environment"] = [
        {"key": "AWS_SECRET_ACCESS_KEY", "value": secret, "why": "--env"},
        {"key": "NOTE", "value": "plain", "why": "--env"},
    ]
    run.manifest.write_text(json.dumps(manifest))
    build_report(run)
    for written in (run.report, run.html, run.summary):
        assert secret not in written.read_text()
    assert "AWS_SECRET_ACCESS_KEY=<redacted>" in run.report.read_text()
    assert "NOTE=plain" in run.report.read_text()


def test_a_recorded_command_line_s_secret_is_not_shown_though_recorded_plain(
    tmp_path, fixed_inventory
):
    """The command line in "Reproducing this run", from a manifest written elsewhere or edited
    by hand: its --env value under a secret name is masked as the manifest writer masks it
    (runner/record/manifest.py command_line), as the launch environment's is."""
    run = fake_run_dir(tmp_path / "r", BenchSpec("r", node_counts=(1, 2)), fixed_inventory,
                       {1: [1000], 2: [1800]})  # fmt: skip
    manifest = json.loads(run.manifest.read_text())
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # no token shape: only its name says
    manifest["command"] = f"dtrun bench --env AWS_SECRET_ACCESS_KEY={secret} --nodes 1,2"
    run.manifest.write_text(json.dumps(manifest))
    build_report(run)
    for written in (run.report, run.html, run.summary):
        assert secret not in written.read_text()
    # masked where it stands: the line otherwise as recorded
    assert (
        "dtrun bench --env AWS_SECRET_ACCESS_KEY=<redacted> --nodes 1,2" in run.report.read_text()
    )


def test_a_code_span_s_fence_is_longer_than_any_backtick_run_in_it():
    assert code("a") == "`a`"
    assert code("a`b``c") == "```a`b``c```"
    assert code("`x") == "`` `x ``"  # a space each side: the span's own strip (§6.1) takes them
    assert code(" x") == "`  x `"
    assert code("a|b", table=True) == "`a`\\|`b`"
    assert code("a\x1b[2Jb\nc") == "`a\\x1b[2Jb\\nc`"  # one line, control characters as escapes


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("sec1[/bold]", "sec1\\[/bold\\]"),
        ("![i](https://e/i.png)", "!\\[i\\](https://e/i.png)"),
        ("<b>&amp;", "\\<b\\>\\&amp;"),
        ("a|b", "a\\|b"),
        ("*e* _e_ ~~s~~ $m$ `c`", "\\*e\\* \\_e\\_ \\~\\~s\\~\\~ \\$m\\$ \\`c\\`"),
        ("# heading", "\\# heading"),
        ("- item", "\\- item"),
        ("1. item", "1\\. item"),
        ("> quote", "\\> quote"),
        ("---", "\\---"),
        ("a\nb\x1b]0;t\x07", "a\\\\nb\\\\x1b\\]0;t\\\\x07"),
        ("\ue000details\ue000 x", "details x"),
        # what opens nothing is written as it is
        ("node_0", "node_0"),
        ("2.13.0+cpu", "2.13.0+cpu"),
        ("-3", "-3"),
        ("+5", "+5"),
        ("10.0.0.4", "10.0.0.4"),
    ],
)
def test_md_escapes_what_markdown_would_read_and_nothing_else(value, written):
    assert md(value) == written


def test_report_templates_mark_only_their_macros_verbatim_and_quote_no_value_by_hand():
    """In the Markdown templates every value goes through ``md`` (the renderer's default),
    ``code`` or ``cell``; ``verbatim`` marks only a macro's output, whose values are quoted
    inside it."""
    templates = sorted(templates_dir().glob("report*.md.j2"))
    text = "\n".join(path.read_text() for path in templates)
    macros = set(re.findall(r"\{% macro (\w+)\(", text)) | {"caller"}
    wrong = []
    for path in templates:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.name}:{number}: {line.strip()[:80]}"
            for expression in re.findall(r"\{\{(.*?)\}\}", line):
                used, marked = re.subn(r"\s*\|\s*verbatim\s*$", "", expression.strip())
                if not marked:
                    continue
                call = re.fullmatch(r"(\w+)\(.*\)", used)
                if call is None or call.group(1) not in macros:
                    wrong.append(f"{where} (verbatim on {used})")
            if re.search(r"`\{\{|\}\}`", line):
                wrong.append(f"{where} (a value in backticks by hand: use code)")
            if re.search(r"\|\s*(oneline|safe)\b", line):
                wrong.append(f"{where} (a filter that quotes nothing for Markdown)")
    assert len(templates) >= 5 and not wrong, "\n".join(wrong)


def test_a_recorded_program_argument_s_secret_is_not_shown_though_recorded_plain(
    tmp_path, fixed_inventory
):
    """The program line in the report's workload (and `dtrun compare`'s set-up), from a
    manifest written elsewhere or edited by hand: a secret option's value is masked as the
    manifest writer masks it (runner/redact/ ``redact_args``), as the command line's is."""
    bench = BenchSpec("p", program=Program(ProgramKind.SCRIPT, "/w/train.py", ("--lr", "3")),
                      node_counts=(1, 2), warmup=2, repeat=1)  # fmt: skip
    run = program_run_dir(tmp_path / "p", bench, fixed_inventory, {1: [[0.1] * 5], 2: [[0.12] * 5]})
    manifest = json.loads(run.manifest.read_text())
    secrets = ("wJalrXUtnFEMI7K7MDENG", "bPxRfiCYEXAMPLEKEY9")  # no token shape: names say
    manifest["bench"]["program"]["args"] = ["--hf-token", secrets[0], f"--api-key={secrets[1]}"]
    run.manifest.write_text(json.dumps(manifest))
    build_report(run)
    for written in (run.report, run.html, run.summary):
        assert not any(secret in written.read_text() for secret in secrets)
    assert "train.py --hf-token '<redacted>' '--api-key=<redacted>'" in run.report.read_text()
