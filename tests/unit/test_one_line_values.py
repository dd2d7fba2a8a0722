"""A value dtrun prints (a node's name from a result or hosts file, a path, an --env value, a
scheduler's words) stays on its line: its line breaks show as escapes, so it cannot forge a
line of dtrun's own ("verdict: scales"); the lines dtrun lays out itself stay lines."""

from __future__ import annotations

import io

from rich.console import Console
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.cli.approval import shown
from dtrun.cli.common import print_error
from dtrun.cli.inert import inert_console_class, styled
from dtrun.cli.tables import Column, Grid, print_grid
from dtrun.errors import NodeFailedError, UsageError
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from tests.factories import fake_run_dir

FORGED = "n1\nverdict: scales"
BREAKS = ("\n", "\r\n", "\u2028", "\x85")


def _forged(output: str) -> bool:
    """A line of ``output`` that starts as the value's second line would."""
    return any(line.lstrip(" │|").startswith("verdict: scales") for line in output.splitlines())


def test_an_error_quoting_a_node_name_with_a_line_break_prints_it_as_an_escape(capsys):
    for brk in BREAKS:
        name = f"n1{brk}verdict: scales"
        print_error(UsageError(f"node {name} is not in the inventory", why=f"path /a{brk}b",
                               fix=f"remove {name} from hosts.txt").message)  # fmt: skip
        err = capsys.readouterr().err
        assert not _forged(err), repr(err)
        escape = repr(brk)[1:-1]
        assert err == (
            f"error: node n1{escape}verdict: scales is not in the inventory: path /a{escape}b\n"
            f"  next: remove n1{escape}verdict: scales from hosts.txt\n"
        )


def test_a_failed_node_s_log_excerpt_keeps_its_lines_indented():
    error = NodeFailedError(FORGED, "10.0.0.1", 1, "/r/node.log", "its error:\n    a\n    b")
    what, why, fix = error.message.split("\n", 2)[0], error.why, error.fix
    assert what.startswith("n1\\nverdict: scales (10.0.0.1) failed")
    assert why == "its error:\n    a\n    b"  # explain's layout: every log line indented
    assert "\n" not in fix


def test_a_table_cell_with_a_line_break_stays_on_its_row():
    out = io.StringIO()
    console = inert_console_class()(file=out, width=120)
    print_grid(console, Grid((Column("node", 2, "left", wrap=True), Column("x", 1)),
                             [(FORGED, "1")]))  # fmt: skip
    text = out.getvalue()
    assert not _forged(text) and "n1\\nverdict: scales" in text
    assert len(text.splitlines()) == 5  # top, header, rule, one row, bottom


def test_a_styled_line_shows_a_value_s_line_break_as_an_escape():
    out = io.StringIO()
    Console(file=out, width=200).print(styled(("noise:", "yellow"), f" {FORGED}"))
    assert out.getvalue() == "noise: n1\\nverdict: scales\n"


def test_a_recorded_env_value_with_a_line_break_is_one_line_in_the_approval_question():
    program = Program(ProgramKind.SCRIPT, "t.py", (f"--name={FORGED}",))
    text = shown(BenchSpec("r", program=program, env=(("NAME", FORGED),)))
    assert text.splitlines() == [
        "  program: python t.py $'--name=n1\\nverdict: scales'",
        "  --env $'NAME=n1\\nverdict: scales'",
    ]


def test_a_dry_run_shows_an_env_value_with_a_line_break_on_one_line(tmp_path):
    done = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["bench", "--dry-run", "--nodes", "1", "--output", str(tmp_path / "runs"),
              "--env", f"NAME={FORGED}"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    recorded = done.stdout.split("# ==== environment recorded in manifest.json", 1)[1]
    assert "NAME=n1\\nverdict: scales" in recorded and not _forged(recorded)


def test_a_hosts_file_at_a_path_with_a_line_break_is_named_on_one_line(tmp_path):
    where = tmp_path / FORGED
    where.mkdir()
    (where / "hosts.yaml").write_text("hosts:\n  - host: n1\n    bogus: 1\n")
    done = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["bench", "--dry-run", "--nodes", "1", "--hosts", str(where / "hosts.yaml"),
              "--output", str(tmp_path / "runs")],
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    assert not _forged(done.output), done.output
    assert "n1\\nverdict: scales/hosts.yaml, line 3: unknown field 'bogus'" in done.output


def test_report_on_a_damaged_result_file_names_it_on_one_line(tmp_path, fixed_inventory):
    """A run directory copied from elsewhere, under a name holding a line break, with a result
    file that is not JSON: the error names the file on one line."""
    run = fake_run_dir(tmp_path / FORGED, BenchSpec(run_id="r", node_counts=(1, 2), repeat=2),
                       fixed_inventory, {1: [1000.0, 1010.0], 2: [1900.0, 1910.0]})  # fmt: skip
    next(run.path.rglob("result.json")).write_text("{not json")
    done = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["report", str(run.path)])
    assert done.exit_code == 2, done.output
    assert not _forged(done.output), done.output
    assert "n1\\nverdict: scales/" in done.output


def test_an_error_quoted_whole_in_another_keeps_its_layout():
    inner = UsageError(f"node {FORGED}", fix="pass another")
    outer = UsageError("the launch could not start", why=inner.message)
    assert outer.message == (
        "the launch could not start: node n1\\nverdict: scales\n  next: pass another"
    )


def test_pulumi_s_last_lines_are_indented_under_the_error():
    from dtrun.azure.stack import StackError, _tail

    error = StackError("`pulumi up` failed", why=_tail("x\nverdict: scales\n"))
    assert error.message == "`pulumi up` failed: its last lines:\n    x\n    verdict: scales"
