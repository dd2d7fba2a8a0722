"""Console tables fit the terminal: every table dtrun prints, at 60, 80, 100 and 120 columns,
against golden captures (tests/golden/tables/, `pytest --update-golden` rewrites them); no cell
cut, every number of a kept column whole, and a line naming the columns left out."""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dtrun.cli import display, results, summary
from dtrun.cli import tables as tables_module
from dtrun.cli.app import app
from dtrun.cli.tables import Column, Fitted, Grid, fit, print_grid
from dtrun.execute import Answer
from dtrun.record.rundir import RunDir
from dtrun.report.build import analyse
from dtrun.report.compare import compare
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import BenchSpec, Program, ProgramKind, StepUnits, UnitKind
from tests.factories import fake_run_dir, program_run_dir

WIDTHS = (60, 80, 100, 120)


def _steps(median_s: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median_s * rng.lognormvariate(0.0, 0.05) for _ in range(40)]


def _train_run(path: Path, inventory: Inventory, two_s: float, seed: int) -> Path:
    # two launches a node count: an interval (and a verdict) needs a second launch
    steps = {1: [_steps(0.0336, seed), _steps(0.0336, seed + 10)],
             2: [_steps(two_s, seed + 1), _steps(two_s, seed + 11)],
             4: [_steps(two_s * 1.1, seed + 2), _steps(two_s * 1.1, seed + 12)]}  # fmt: skip
    bench = BenchSpec(run_id=path.name, node_counts=(1, 2, 4))
    fake_run_dir(path, bench, inventory, {}, step_times=steps, busbw={2: 1.23, 4: 0.98})
    return path


def _program_run(path: Path, inventory: Inventory) -> Path:
    program = Program(ProgramKind.SCRIPT, "/w/train.py", ("--lr", "0.1"))
    units = StepUnits(UnitKind.SAMPLES, 16, per_process=True)
    bench = BenchSpec(path.name, program=program, warmup=2, repeat=1, units=units)
    program_run_dir(path, bench, inventory, {1: [[0.1] * 20], 2: [[0.125] * 20]})
    return path


def _allreduce_run(path: Path, inventory: Inventory) -> Path:
    bench = BenchSpec(run_id=path.name, workload="allreduce")
    fake_run_dir(path, bench, inventory, {1: [9.5], 2: [4.25]})
    return path


def _recorded(
    width: int, show: Callable[[Console], object], monkeypatch: pytest.MonkeyPatch
) -> str:
    """What ``show`` prints on a console ``width`` columns wide, lines' trailing spaces gone."""
    out = Console(file=io.StringIO(), width=width, record=True, highlight=False)
    for module in ("dtrun.cli.display", "dtrun.cli.results"):
        monkeypatch.setattr(f"{module}.console", lambda stderr=False: out)
    show(out)
    return "".join(line.rstrip() + "\n" for line in out.export_text().splitlines())


@pytest.fixture
def tables(tmp_path, fixed_inventory) -> dict[str, Callable[[Console], object]]:
    """Each console table dtrun prints, as a call that prints it."""
    train = analyse(_run_dir(_train_run(tmp_path / "a", fixed_inventory, 0.036, 1)))
    slower = analyse(_run_dir(_train_run(tmp_path / "b", fixed_inventory, 0.045, 3)))
    program = analyse(_run_dir(_program_run(tmp_path / "p", fixed_inventory)))
    allreduce = analyse(_run_dir(_allreduce_run(tmp_path / "ar", fixed_inventory)))
    nodes = fixed_inventory.nodes[:3]
    answers = {
        nodes[0].name: Answer("", 0),
        nodes[1].name: Answer("", 1),
        nodes[2].name: Answer(error="ssh: connect to host 127.0.0.4 port 22: Connection refused"),
    }
    return {
        "bench-train": lambda out: print_grid(out, summary.report_grid(train)),
        "bench-program": lambda out: print_grid(out, summary.report_grid(program)),
        "bench-allreduce": lambda out: print_grid(out, summary.report_grid(allreduce)),
        "compare": lambda out: results.print_comparison(compare(train, slower)),
        "exec": lambda out: display.print_exec_summary(nodes, answers),
    }


def _run_dir(path: Path) -> RunDir:
    return RunDir(path)


def _sizes(width: int) -> str:
    done = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["sizes"])
    assert done.exit_code == 0, done.output
    return "".join(line.rstrip() + "\n" for line in done.output.splitlines())


def test_every_table_at_every_width_matches_its_golden_capture(tables, monkeypatch, golden):
    for name, show in tables.items():
        for width in WIDTHS:
            golden(f"tables/{name}-{width}.txt", _recorded(width, show, monkeypatch))
    for width in WIDTHS:
        golden(f"tables/sizes-{width}.txt", _sizes(width))


def _cells(text: str) -> list[str]:
    """The table's body cells as printed: each line between its outer rules, split at │."""
    return [cell.strip() for line in text.splitlines() if line.startswith("│")
            for cell in line.strip("│").split("│")]  # fmt: skip


NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def _fitted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Grid, Fitted]]:
    """Every grid print_grid fits from now on, with how it was fitted."""
    seen: list[tuple[Grid, Fitted]] = []

    def recording(console: Console, grid: Grid, *, wide: bool = False) -> Fitted:
        fitted = fit(console, grid, wide=wide)
        seen.append((grid, fitted))
        return fitted

    monkeypatch.setattr(tables_module, "fit", recording)
    return seen


def _assert_whole(name: str, width: int, text: str, seen: list[tuple[Grid, Fitted]]) -> None:
    assert seen, name
    assert "…" not in text, (name, width, text)
    assert max(len(line) for line in text.splitlines()) <= width, (name, width, text)
    cells = _cells(text)
    lines = "\n".join(cells)
    for grid, fitted in seen:
        for row in grid.rows:
            for index in fitted.kept:
                cell, column = str(row[index]), grid.columns[index]
                # a cell that does not wrap is on one line; one that wraps breaks between words
                for part in cell.split() if column.wrap else [cell] if cell else []:
                    assert (
                        part in cells
                        or any(part in c.split() for c in cells)
                        or (not column.wrap and part in lines.split("\n"))
                    ), (name, width, part, text)
                for number in NUMBER.findall(cell):
                    assert re.search(rf"(?<![\d,.]){re.escape(number)}(?![\d,]|\.\d)", lines), (
                        name, width, number, text,
                    )  # fmt: skip


def test_no_capture_cuts_a_cell_or_a_number_of_a_kept_column(tables, monkeypatch):
    for name, show in tables.items():
        for width in WIDTHS:
            seen = _fitted(monkeypatch)
            _assert_whole(name, width, _recorded(width, show, monkeypatch), seen)
    for width in WIDTHS:
        seen = _fitted(monkeypatch)
        _assert_whole("sizes", width, _sizes(width), seen)


def test_a_kept_column_shows_every_number_of_the_full_table_whole():
    grid = Grid(
        (Column("nodes", 10), Column("tokens/s", 9), Column("busbw", 3), Column("proof", 5,
         "left", wrap=True)),
        [("1", "15,115", "-", "1 process"), ("4", "51,164", "0.98 GB/s", "in sync: 4 ranks")],
    )  # fmt: skip
    out = Console(file=io.StringIO(), width=25, record=True)
    fitted = print_grid(out, grid)
    text = out.export_text()
    assert fitted.dropped == ("busbw", "proof")
    assert "15,115" in text and "51,164" in text and "0.98" not in text
    assert "left out to fit 25 columns: busbw, proof; --wide shows every column" in " ".join(
        text.split()
    )


def test_columns_read_side_by_side_are_left_out_together():
    grid = Grid(
        (Column("n", 10), Column("A eff.", 7, pair="eff"), Column("B eff.", 7, pair="eff")),
        [("1", "93% (91-95%)", "76% (74-78%)")],
    )
    console = Console(file=io.StringIO(), width=20)
    assert fit(console, grid).dropped == ("A eff.", "B eff.")


def test_a_long_proof_shows_its_answer_and_points_at_the_report():
    long = "diverged: ranks 1, 3 end with other parameters than rank 0"
    assert summary.proof_cell(long) == "diverged (why: report.md)"
    assert summary.proof_cell("in sync: 16 ranks on 2 nodes") == "in sync: 16 ranks on 2 nodes"


def test_compare_says_which_columns_it_left_out_and_wide_keeps_them(tmp_path, fixed_inventory):
    a = _train_run(tmp_path / "a", fixed_inventory, 0.036, 1)
    b = _train_run(tmp_path / "b", fixed_inventory, 0.045, 3)
    narrow = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["compare", str(a), str(b)])
    assert narrow.exit_code == 0, narrow.output
    said = " ".join(narrow.output.split())
    assert "left out to fit 80 columns: A 95% CI, B 95% CI, A busbw, B busbw; --wide" in said
    assert "A busbw" not in narrow.output.split("left out")[0]
    wide = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["compare", str(a), str(b), "--wide"])
    assert wide.exit_code == 0, wide.output
    assert "left out" not in wide.output and "…" not in wide.output
    header = next(line for line in wide.output.splitlines() if "nodes" in line)
    assert "A 95% CI" in header and "B busbw" in header and len(header) > 80


def test_the_bench_table_under_json_fits_stderr_s_80_columns(tmp_path, fixed_inventory):
    run = _train_run(tmp_path / "a", fixed_inventory, 0.036, 1)
    done = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["report", str(run), "--json"])
    assert done.exit_code == 0, done.output
    table = done.stderr
    assert "…" not in table and max(len(line) for line in table.splitlines()) <= 80
    assert "left out to fit 80 columns: processes, n, busbw" in " ".join(table.split())


def test_exec_s_table_keeps_the_error_whole_between_words(tables, monkeypatch):
    text = _recorded(60, tables["exec"], monkeypatch)
    words = " ".join(_cells(text)).split()
    assert {"ssh:", "127.0.0.4", "refused"} <= set(words)


def test_sizes_wide_keeps_every_column_on_a_narrow_terminal():
    done = CliRunner(env={"COLUMNS": "60"}).invoke(app, ["sizes", "--wide"])
    assert done.exit_code == 0, done.output
    header = next(line for line in done.output.splitlines() if "size" in line and "┃" in line)
    assert "image" in header and "note" in header and "left out" not in done.output


def test_exec_error_with_a_word_wider_than_the_terminal_breaks_and_stays(fixed_inventory):
    # asyncssh names every cipher the node offers in one comma-joined word, longer than 80
    # columns: the error column breaks it across lines rather than being left out
    ciphers = ["chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr",
               "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]  # fmt: skip
    offered = ",".join(ciphers)
    error = f"cannot reach node-0: No matching encryption algorithm found, received {offered}"
    nodes = fixed_inventory.nodes[:2]
    answers = {nodes[0].name: Answer(error=error), nodes[1].name: Answer("", 0)}
    for width in (60, 80):
        out = Console(file=io.StringIO(), width=width, record=True, highlight=False)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("dtrun.cli.display.console", lambda stderr=False, out=out: out)
            display.print_exec_summary(nodes, answers)
        text = out.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        assert "error" not in "".join(line for line in text.splitlines() if "left out" in line)
        column = [line.split("│")[-2] for line in text.splitlines() if line.startswith("│")]
        assert offered in "".join(cell.strip() for cell in column).replace(" ", "")


def test_a_secret_in_a_cell_is_masked_before_the_table_cuts_it_across_lines(
    fixed_inventory, monkeypatch
):
    """A cell folded over lines puts borders between a secret's pieces, where no redaction of
    the printed table finds them; the cell is redacted before it is laid out."""
    from dtrun import redact

    monkeypatch.setattr(redact, "_process", redact.Redactor.of(["Hunter2SecretValue0123456789"]))
    nodes = fixed_inventory.nodes[:1]
    answers = {nodes[0].name: Answer(error="login refused: password Hunter2SecretValue0123456789")}
    out = Console(file=io.StringIO(), width=60, record=True, highlight=False)
    monkeypatch.setattr("dtrun.cli.display.console", lambda stderr=False: out)
    display.print_exec_summary(nodes, answers)
    column = "".join(line.split("│")[-2].strip() for line in out.export_text().splitlines()
                     if line.startswith("│"))  # fmt: skip
    assert "<redacted>" in column and "Hunter2" not in column
