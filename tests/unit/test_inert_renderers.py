"""Markup, control characters and Markdown in every record field, through every renderer: the
property, for what a run directory holds (issue 36, class 5).

A run directory is data: anyone who could write to it may have put anything in its records
(docs/security.md, "Threat model"). Three run directories (a training sweep with noise, probe,
price and until-decided figures; a user program's sweep; an all-reduce sweep with a health gate
that failed) have every text field of every record (manifest.json, runs.json, health.json, each
result.json) replaced by a hostile value Hypothesis draws: rich markup, Markdown (images,
links, headings, tables, code, HTML, entities) and control characters (escape sequences,
C0, C1, line breaks). Each value carries a sentinel, ``⟦7⟧``; its checked part sits on one
side of the sentinel and its control characters on the other.

Every renderer then runs on the directory: the bench summary and `dtrun report`'s console
output, report.md, report.html, `dtrun compare` (against a clean run) and `dtrun predict`.
Each either refuses the directory with dtrun's own error (exit 2: a field whose value the reader
checks, as a run id or a status) or shows every value as text: no rich MarkupError, no raw
escape or control character, no Markdown link, image, heading, raw HTML or hard break made of
a value (markdown-it-py parses report.md), no element but the report's own in report.html
(html.parser parses it), and each value's checked part whole after (or before) its sentinel,
wherever the sentinel shows (tests/inert.py).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dtrun.azure.prices import Price
from dtrun.cli.app import app
from dtrun.cli.summary import print_summary
from dtrun.record.rundir import RunDir, write_health
from dtrun.report.build import build_report
from dtrun.spec.outcome import GateStatus, Health, NodeHealth, SweepStatus
from dtrun.spec.request import BenchSpec, Program, ProgramKind, StepUnits, UnitKind
from dtrun.sweep.run import Sweep
from tests.conftest import CLUSTERS
from tests.factories import fake_run_dir, noise_data, program_run_dir
from tests.inert import console_problems, html_problems, markdown_problems

WIDE = "5000"  # columns: no line of the console is wrapped, so a value is never cut by it
cli = CliRunner(env={"COLUMNS": WIDE})

# What the reader checks against a vocabulary or a shape (exit 2 when it is anything else),
# by file and field (list indices as []). Every other text field is free text, shown as text.
CHECKED = {
    ("manifest.json", "schema"),
    ("manifest.json", "run_id"),
    ("manifest.json", "bench.mode"),
    ("manifest.json", "bench.workload"),
    ("manifest.json", "bench.units.kind"),
    ("manifest.json", "bench.noisy_launches"),
    ("manifest.json", "git.revision"),
    ("result.json", "schema"),
    ("result.json", "timing"),
    ("result.json", "units.kind"),
    ("runs.json", "schema"),
    ("runs.json", "status"),
    ("runs.json", "runs[].status"),
    ("runs.json", "runs[].run_dir"),
    ("health.json", "schema"),
    ("health.json", "status"),
}
# The environment dtrun ran in: recorded, never shown by a renderer.
UNSHOWN = ("manifest.json", "environment")

# Rich markup, Markdown and HTML that would be read as more than text.
FRAGMENTS = (
    "[/bold]", "[bold]", "[link=https://evil.example/]", "[/link]", "[/]",
    "![i](https://evil.example/i.png)", "[l](https://evil.example/)", "<https://evil.example/>",
    "<img src=x onerror=alert(1)>", "<script>", "<b>", "</p>", "# h", "- ", "1. ", "2) ", "> ",
    "|", "||", "`", "```", "~~~", "*e*", "**e**", "_e_", "__e__", "~~s~~", "$m$", "&amp;",
    "&#x1b;", "&lt;", "\\", "\\|", "[^1]", "---", "===", "{{ x }}", "{% raw %}", "%s", "{0}",
    "    ", "  ",
)  # fmt: skip
FILLER = " []/=#*_!<>()|&~$\\-+.`{}^ab1"  # no ':', quote or capital: see _checked_part
CONTROLS = (
    "\x1b]0;title\x07", "\x1b[2J", "\x1b[31m", "\x1b]8;;https://evil.example/\x1b\\", "\n",
    "\r", "\t", "\x00", "\x07", "\x08", "\x7f", "\x85", "\x9b", "\u2028", "\u2029",
    "\u202e", "\u2066", "\u200f",  # bidirectional controls: a line shown reordered
    "\ue000details\ue000 ", "\ue000end\ue000", "  ",  # two blanks end a line with <br>
)  # fmt: skip


@dataclass(frozen=True)
class Hostile:
    """One value: its checked part (markup and Markdown), its control characters, and on which
    side of its sentinel the checked part sits."""

    text: str
    controls: str
    before: bool  # the checked part before the sentinel: the value starts with it

    def value(self, sentinel: str) -> str:
        if self.before:
            return f"{self.controls}{self.text}{sentinel}"
        return f"{sentinel}{self.text}{self.controls}"


def _checked_part(parts: list[str]) -> str:
    """One line of text with no edge blank (a table cell or a line loses those), no ': ' (the
    summary table cuts a long proof there) and no capital (a sentence's first letter is
    capitalised, and the rest lowered): whatever else it holds must show as it is."""
    text = "".join(parts).replace(": ", " ").strip()
    return text or "z"


hostile = st.builds(
    Hostile,
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(FILLER, max_size=4)), max_size=5).map(
        _checked_part
    ),
    st.lists(st.sampled_from(CONTROLS), max_size=3).map("".join),
    st.booleans(),
)
EVERYTHING = [
    Hostile(_checked_part([fragment]), controls, before)
    for fragment, controls, before in zip(
        FRAGMENTS, [*CONTROLS] * 3, [False, True] * len(FRAGMENTS), strict=False
    )
]


def _steps(median: float) -> list[float]:
    return [median * (1 + 0.01 * (i % 5)) for i in range(10)]


@cache
def _pristine() -> dict[str, Path]:
    """The three run directories, as sweeps left them, built once."""
    root = Path(tempfile.mkdtemp(prefix="dtrun-inert-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # built once, removed at the end
    inventory = CLUSTERS["embedded"]
    names = {n: [f"node-{i}" for i in range(n)] for n in (1, 2, 4)}
    train = fake_run_dir(
        root / "train",
        BenchSpec(run_id="train", node_counts=(1, 2, 4), max_launches=3, until_decided=True),
        inventory,
        {},
        busbw={2: 2.0, 4: 1.5},
        step_times={n: [_steps(0.1 * (1 + n / 10)) for _ in range(3)] for n in (1, 2, 4)},
        noise={n: [noise_data(names[n], steal=0.3 * (n == 2)) for _ in range(3)] for n in names},
        price=Price(3.0, "a test price"),
        sweep_wall_s=100.0,
    )
    program = BenchSpec(
        "program",
        program=Program(ProgramKind.SCRIPT, "/w/train.py", ("--lr", "0.1")),
        warmup=2,
        repeat=1,
        units=StepUnits(UnitKind.SAMPLES, 16, per_process=True),
        node_counts=(1, 2),
    )
    program_dir = program_run_dir(
        root / "program", program, inventory, {1: [[0.1] * 20], 2: [[0.125] * 20]},
        busbw={2: 2.0}, sharded="FSDP (DTensor shards)",
    )  # fmt: skip
    allreduce = fake_run_dir(
        root / "allreduce",
        BenchSpec(run_id="allreduce", workload="allreduce", node_counts=(1, 2)),
        inventory,
        {1: [10.0], 2: [8.0]},
        status=SweepStatus.FAILED,
    )
    runs = json.loads(allreduce.runs.read_text())
    runs["error"] = "node-1 said: no route"
    allreduce.runs.write_text(json.dumps(runs))
    write_health(
        allreduce.path,
        Health(GateStatus.FAILED, threshold_gbs=460.0, threshold_source="catalog", size="16G",
               procs_per_node=8, note="a note",
               nodes=(NodeHealth("node-0", "10.0.0.4", 471.2, True, directory="health/node-0"),
                      NodeHealth("node-1", "10.0.0.5", None, False, error="exit 1\nmore",
                                 directory="health/node-1"))),
    )  # fmt: skip
    return {"train": train.path, "program": program_dir.path, "allreduce": allreduce.path}


def _fields(data: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The path of every text in a JSON document."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _fields(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _fields(value, (*path, index))
    elif isinstance(data, str):
        yield path


def field_name(file: Path, path: tuple[str | int, ...]) -> tuple[str, str]:
    """('result.json', 'ranks[].node'): a field, whichever launch or list item holds it."""
    words: list[str] = []
    for key in path:
        if isinstance(key, int):
            words[-1] += "[]"
        else:
            words.append(key)
    return file.name, ".".join(words)


def record_fields(run: Path) -> Iterator[tuple[Path, tuple[str | int, ...], tuple[str, str]]]:
    """Every text field of every record in ``run``: its file, its path, its name."""
    for file in sorted(run.rglob("*.json")):
        if file.name == "summary.json":  # written by the report, not read by it
            continue
        for path in _fields(json.loads(file.read_text())):
            name = field_name(file, path)
            if (name[0], name[1].split(".")[0]) != UNSHOWN:
                yield file, path, name


def _put(data: Any, path: tuple[str | int, ...], value: str) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def hostile_copy(kind: str, values: list[Hostile], where: Path) -> dict[str, Hostile]:
    """A copy of ``kind``'s directory with every free text field hostile; the sentinels."""
    run = where / kind
    shutil.copytree(_pristine()[kind], run)
    placed: dict[str, Hostile] = {}
    documents: dict[Path, Any] = {}
    for index, (file, path, name) in enumerate(record_fields(run)):
        if name in CHECKED:
            continue
        data = documents.setdefault(file, json.loads(file.read_text()))
        sentinel = f"⟦{index}⟧"
        placed[sentinel] = values[index % len(values)]
        _put(data, path, placed[sentinel].value(sentinel))
    for file, data in documents.items():
        file.write_text(json.dumps(data))
    return placed


def _clean_other(kind: str, where: Path) -> Path:
    """The same run, untouched but for its run id: what `dtrun compare` sets it beside."""
    other = where / f"{kind}-b"
    shutil.copytree(_pristine()[kind], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["run_id"] = "clean"
    (other / "manifest.json").write_text(json.dumps(manifest))
    return other


RENDERERS = ("bench summary", "dtrun report", "report.md", "report.html", "dtrun compare",
             "dtrun predict")  # fmt: skip


def _problems(kind: str, values: list[Hostile]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="dtrun-inert-") as tmp:
        where = Path(tmp)
        placed = hostile_copy(kind, values, where)
        expected = {sentinel: (h.text, h.before) for sentinel, h in placed.items()}
        run, other = where / kind, _clean_other(kind, where)
        problems: list[str] = []
        with (
            mock.patch.dict(os.environ, {"COLUMNS": WIDE}),
            contextlib.redirect_stdout(io.StringIO()) as shown,
        ):
            print_summary(Sweep(RunDir(run), report=build_report(RunDir(run))))
        problems += [f"bench summary: {p}" for p in console_problems(shown.getvalue(), expected)]
        for name, args in (
            ("dtrun report", ["report", str(run)]),
            ("dtrun compare", ["compare", str(other), str(run)]),
            ("dtrun predict", ["predict", str(run), "--nodes", "8,16"]),
        ):
            done = cli.invoke(app, args)
            if done.exit_code not in (0, 2) or not isinstance(done.exception, SystemExit | None):
                problems.append(f"{name}: exit {done.exit_code}, {done.exception!r}")
            problems += [f"{name}: {p}" for p in console_problems(done.output, expected)]
        report = RunDir(run)
        problems += markdown_problems(report.report.read_text(), expected)
        problems += html_problems(report.html.read_text(), expected)
        return problems


@pytest.mark.parametrize("kind", ["train", "program", "allreduce"])
@settings(
    max_examples=int(os.environ.get("DTRUN_INERT_EXAMPLES", "4")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # an example takes a second or two (a report with its plots): shrinking one would take
    # minutes, so the failing example is shown as drawn (every value and its field's sentinel)
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(values=st.lists(hostile, min_size=1, max_size=7))
@example(values=EVERYTHING)
def test_no_renderer_reads_a_record_s_text_as_markup(kind, values):
    assert _problems(kind, values) == []


@pytest.mark.parametrize("kind", ["train", "program", "allreduce"])
def test_a_field_the_reader_checks_is_refused_with_one_message_by_every_reader(tmp_path, kind):
    """Each checked field, hostile alone: exit 2 from report, compare and predict, the message
    shown as text."""
    run = _pristine()[kind]
    value = Hostile("[/bold]![i](https://evil.example/i.png)", "\x1b]0;title\x07", False)
    seen = {name for _, _, name in record_fields(run)} & CHECKED
    assert seen, "no checked field in this run"
    for index, (file, path, name) in enumerate(record_fields(run)):
        if name not in CHECKED:
            continue
        copy = tmp_path / f"{kind}-{index}"
        shutil.copytree(run, copy)
        target = copy / file.relative_to(run)
        data = json.loads(target.read_text())
        _put(data, path, value.value("⟦0⟧"))
        target.write_text(json.dumps(data))
        for args in (["report", str(copy)], ["compare", str(copy), str(run)],
                     ["predict", str(copy), "--nodes", "8"]):  # fmt: skip
            done = cli.invoke(app, args)
            assert done.exit_code == 2, (name, args[0], done.output, done.exception)
            assert console_problems(done.output, {}) == [], (name, args[0])
            assert "Traceback" not in done.output


def count() -> tuple[int, int, int]:
    """(free fields, checked fields, renderers): issue 36's closing note counts them."""
    names = {name for path in _pristine().values() for _, _, name in record_fields(path)}
    return len(names - CHECKED), len(names & CHECKED), len(RENDERERS)
