"""What dtrun prints is text: rich markup and control characters in a record, a name or a
program's output reach the terminal as what they are, never as styles, links or escape
sequences (runner/cli/inert.py); a run id outside the safe alphabet is refused wherever it is
read (runner/spec/runid.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.cli.common import print_node_line
from dtrun.cli.inert import inert_console_class, printable, styled
from dtrun.record.rundir import RunDir
from dtrun.spec.request import BenchSpec
from tests.conftest import CLUSTERS, run_dtrun
from tests.factories import fake_run_dir, noise_data

if TYPE_CHECKING:
    from rich.console import Console

# FORCE_COLOR: rich writes as to a terminal (styles, hyperlinks), as a user would see it.
terminal = CliRunner(env={"COLUMNS": "200", "FORCE_COLOR": "1"})
TITLE = "\x1b]0;owned\x07"  # sets the terminal window's title
CLEAR = "\x1b[2J"  # clears the screen
LINK = "[link=https://evil.example/]click[/link]"


def _noisy_run(path: Path, node: str, run_id: str = "r") -> RunDir:
    """A two-point sweep whose node ``node`` lost half its CPU to steal at both points, so the
    report's noise lines name it."""
    nodes = {1: [node], 2: [node, "node-1"]}
    return fake_run_dir(
        path,
        BenchSpec(run_id=run_id, node_counts=(1, 2)),
        CLUSTERS["embedded"],
        {1: [1000], 2: [1500]},
        noise={n: [noise_data(names, steal=0.5)] for n, names in nodes.items()},
    )


def _no_terminal_control(output: str) -> None:
    """Only rich's own styles (SGR, ``ESC [ ... m``) may reach the terminal: no OSC (window
    title, hyperlink), no screen clearing, no BEL."""
    assert "\x1b]" not in output and CLEAR not in output and "\x07" not in output


# lone surrogates, as a record's JSON escapes them: no encoding of a terminal writes them
@pytest.mark.parametrize(
    "node", ["node-0[/x]", f"node-0{LINK}", f"node-0{TITLE}{CLEAR}", "node-0\udcff\ud800"]
)
def test_a_node_name_in_a_result_prints_as_text_after_the_report(tmp_path, node):
    run_dir = _noisy_run(tmp_path / "r", node)
    done = terminal.invoke(app, ["report", str(run_dir.path)])
    assert done.exit_code == 0, done.output
    assert f"rebuilt {run_dir.report}" in done.output  # it went on after the noise lines
    assert printable(node) in done.output  # as typed, control characters as escapes
    _no_terminal_control(done.output)


@pytest.mark.parametrize("run_id", ["sec1[/bold]", "x[link=https://evil.example/]y", "a\x1b[2Jb"])
def test_a_run_id_outside_the_safe_alphabet_is_refused_by_compare_and_report(tmp_path, run_id):
    a = _noisy_run(tmp_path / "a", "node-0", "a")
    b = _noisy_run(tmp_path / "b", "node-0", "b")
    data = json.loads(a.manifest.read_text())
    data["run_id"] = run_id
    a.manifest.write_text(json.dumps(data))
    for args in (["compare", str(a.path), str(b.path)], ["report", str(a.path)]):
        done = terminal.invoke(app, args)
        assert done.exit_code == 2, done.output
        assert "manifest.json is damaged: 'run_id'" in done.output
        assert "letters, digits, '.', '_' and '-'" in done.output
        assert done.exception is None or isinstance(done.exception, SystemExit)
        _no_terminal_control(done.output)


def test_a_resume_of_a_run_whose_run_id_holds_markup_is_refused(tmp_path):
    run_dir = _noisy_run(tmp_path / "runs" / "r", "node-0")
    data = json.loads(run_dir.manifest.read_text())
    data["run_id"] = "r[/bold]"
    run_dir.manifest.write_text(json.dumps(data))
    done = run_dtrun("bench", "--resume", str(run_dir.path), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'run_id' is 'r[/bold]'" in done.stderr and "Traceback" not in done.stderr


def test_compare_prints_a_noisy_point_s_reason_as_text(tmp_path):
    a = _noisy_run(tmp_path / "a", f"node-0[/x]{LINK}{TITLE}", "a")
    b = _noisy_run(tmp_path / "b", "node-0", "b")
    done = terminal.invoke(app, ["compare", str(a.path), str(b.path)])
    assert done.exit_code == 0, done.output
    assert f"node-0[/x]{LINK}" in done.output
    _no_terminal_control(done.output)


def _terminal_console(out: io.StringIO) -> Console:
    return inert_console_class()(file=out, force_terminal=True, color_system="truecolor")


def test_a_program_s_output_line_keeps_its_text_and_loses_its_control_characters():
    out = io.StringIO()
    print_node_line(_terminal_console(out), "node-0", f"step 1 {LINK} {TITLE}{CLEAR}\tdone")
    shown = out.getvalue()
    assert f"step 1 {LINK} \\x1b]0;owned\\x07\\x1b[2J" in shown and "done" in shown
    _no_terminal_control(shown)


def test_a_text_made_elsewhere_is_held_to_the_same_rule_and_styles_still_show():
    from rich.table import Table
    from rich.text import Text

    out = io.StringIO()
    table = Table()
    table.add_column(Text(f"head{CLEAR}"))
    table.add_row(Text(f"cell{TITLE}"))
    console = _terminal_console(out)
    console.print(table)
    console.print(styled(("ok", "green"), f" {LINK}"))
    shown = out.getvalue()
    # escaped after the table measured it: the cell may be cut, never passed through
    assert "head\\x1b[2J" in shown and "cell\\x1b" in shown
    assert f" {LINK}" in shown and "\x1b[32mok" in shown  # the label's style is rich's own
    _no_terminal_control(shown)


def test_the_rerun_prompt_shows_a_recorded_program_s_markup_as_it_is(monkeypatch, capsys):
    """--rerun's question quotes the recorded program: its markup shows as typed, with no
    backslash added (the console reads none), its control characters as escapes."""
    import typer

    from dtrun.cli import approval

    monkeypatch.setattr(typer, "confirm", lambda *args, **kwargs: False)
    assert not approval._prompt(f"records:\n  program: train.py '[bold]x[/]{CLEAR}'\nRun them?")
    said = capsys.readouterr().err
    assert "  program: train.py '[bold]x[/]\\x1b[2J'" in said


PIPED_LINES = ["step 3 loss 2.1", "tab\there\t\tx", f"{TITLE}{CLEAR}{LINK}", "\x9bcsi\u2028next",
               "rlo\u202etxt.exe", "é 漢字 ✓", "cr\rbell\x07", "", "  both  ", "x" * 300,
               "ghp_" + "a" * 36]  # fmt: skip


@pytest.mark.parametrize("line", PIPED_LINES)
def test_a_node_line_written_without_rich_when_piped_is_what_rich_writes(monkeypatch, line):
    """Piped (no terminal, no colours), a node's line is written directly, the costly part of
    a large cluster's output (runner/cli/common.py): byte for byte what rich writes."""
    from dtrun import redact

    monkeypatch.setattr(redact, "_process", redact.process_redactor().knowing(["hunter22"]))
    for text in (line, f"{line} --password hunter22"):
        direct, rich = io.StringIO(), io.StringIO()
        plain = inert_console_class()(file=direct, highlight=False, width=80)
        recording = inert_console_class()(file=rich, highlight=False, width=80, record=True)
        with monkeypatch.context() as patch:  # record=True: rich lays the line out
            patch.setattr(plain, "print", lambda *_, **__: pytest.fail("laid out by rich"))
            print_node_line(plain, "node-3", text)
        print_node_line(recording, "node-3", text)
        assert direct.getvalue() == rich.getvalue()
        assert "hunter22" not in direct.getvalue()
        _no_terminal_control(direct.getvalue())
