"""`dtrun bench --help` (issue 27 item 5): options grouped by where it runs, what it runs, how
it measures and what it writes, with examples; prose that wraps at the terminal's width."""

from __future__ import annotations

import itertools
import re

from typer.testing import CliRunner

from dtrun.cli.app import _paragraphs, app
from tests.paths import REPO


def help_text(*command: str, columns: int = 80) -> str:
    done = CliRunner(env={"COLUMNS": str(columns)}).invoke(app, [*command, "--help"])
    assert done.exit_code == 0, done.output
    return done.output


def test_bench_s_options_are_grouped_by_what_they_are_about():
    panels = re.findall(r"╭─ (.+?) ─", help_text("bench"))
    for panel in ("What it runs", "How it measures", "What it writes", "Where it runs"):
        assert any(title.startswith(panel) for title in panels), panels


def test_bench_s_help_has_two_examples_one_of_them_a_program():
    text = help_text("bench", columns=100)
    assert "dtrun bench --nodes 1,2,4 --repeat 3" in text
    assert "dtrun bench --hosts hosts.yaml --nodes 1,2 -- python train.py" in text


def test_a_docstring_s_prose_is_one_paragraph_per_line_and_its_commands_keep_theirs():
    doc = """First line.

    A sentence that a docstring
    breaks in two.

    dtrun bench --nodes 1,2
    dtrun report runs/x
    """
    assert _paragraphs(doc) == (
        "First line.\n\nA sentence that a docstring breaks in two.\n\n"
        "dtrun bench --nodes 1,2\ndtrun report runs/x"
    )


def test_no_help_breaks_a_sentence_before_the_terminal_s_edge():
    """Each line of prose runs to near the edge unless its paragraph ends: no line of a
    description ends with a short word run followed by a continuation line (what typer printed
    from a docstring's own line breaks: 'then,' at column 60 of 80)."""
    for command in ("bench", "run", "exec", "report", "compare", "predict", "sizes"):
        text = help_text(command)
        description = text.split("╭")[0].splitlines()
        prose = [line.rstrip() for line in description if line.strip()]
        for line, following in itertools.pairwise(prose):
            if following.strip().startswith(("dtrun ", "Usage")) or line.strip().startswith(
                ("Usage", "dtrun ")
            ):
                continue
            if not line.rstrip().endswith((".", ":", ")")):
                assert len(line) > 60, (command, line, following)


COMMANDS = ("bench", "run", "exec", "report", "compare", "predict", "up", "down", "outputs",
            "extend", "sizes")  # fmt: skip


def flags(command: str) -> set[str]:
    """Every option of the command's --help, the negative forms (--keep) too."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text(command, columns=200)))


def test_docs_bench_option_table_and_bench_help_name_the_same_options():
    docs = (REPO / "docs" / "bench.md").read_text()
    table = docs[docs.index("| option | default | meaning |") :].split("\n\n")[0]
    documented = set(re.findall(r"`(--[a-z][a-z0-9-]*)", table))
    every = set().union(*(flags(command) for command in COMMANDS))
    listed = help_text("bench", columns=200)
    bench_options = set(re.findall(r"│ +(?:\*\s+)?(--[a-z][a-z0-9-]*)", listed))
    assert bench_options - {"--help"} <= documented, "in --help, not in docs/bench.md's table"
    assert documented <= every, "in docs/bench.md's table, in no command's --help"
