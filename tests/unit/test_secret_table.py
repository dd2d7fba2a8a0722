"""The generated table of secret program arguments (tests/secret_shapes.py ``GENERATED``: every
case style x separator x value prefix x secret word, and credentials in header arguments) through
the redaction and every sink a run's arguments reach without a launch: manifest.json (the spec
and the command line as typed), runs.json, summary.json, report.md, report.html, `dtrun compare`
and the dry-runs on the console, and an upload to S3 of a node log that printed them all.
tests/e2e/test_secrets.py launches with the table's slice (``SLICE``)."""

from __future__ import annotations

import base64

import pytest
from typer.testing import CliRunner

from dtrun import redact
from dtrun.cli.app import app
from dtrun.plan.resolve import resolve_bench
from dtrun.record.rundir import write_manifest
from dtrun.redact import REDACTED, Redactor, redact_args, secret_args
from dtrun.report.build import build_report
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from dtrun.store.s3 import S3Store
from dtrun.store.url import parse_results_url
from tests.aws import BUCKET, stored
from tests.factories import program_run_dir
from tests.secret_shapes import (
    ENCODINGS,
    GENERATED,
    base64_leaks,
    every_encoding,
    hex_leaks,
    leaks,
    planted,
)
from tests.unit.test_secrets import leaked, records

ARGS = tuple(arg for shape in GENERATED for arg in shape.args)
STEPS = {1: [[0.1] * 20], 2: [[0.125] * 20]}


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test's dtrun knows only the secrets its own command was given, as a new process."""
    monkeypatch.setattr(redact, "_process", Redactor())


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


@pytest.mark.parametrize("shape", GENERATED, ids=[shape.name for shape in GENERATED])
def test_each_generated_argument_is_hidden_and_masked_in_every_encoding(shape):
    """The record's arguments show <redacted> for it, and a program printing what it was
    given, in any encoding, shows none of it."""
    shown = redact_args(shape.args)
    assert REDACTED in " ".join(shown) and leaks(" ".join(shown)) == []
    hide = Redactor.of(secret_args(shape.args))
    printed = {
        (how, value): hide.text(f"got {encode(value)} ok")
        for value in planted(shape)
        for how, encode in ENCODINGS.items()
    }
    assert {key: text for key, text in printed.items() if leaks(text)} == {}


# What may precede a secret inside base64 (HTTP Basic's "user:", W&B's "api:") and follow it
# (a newline from `echo`, more fields): every alignment of three, and tails that change the
# digits after it.
BASE64_AROUND = [("", ""), ("a", "\n"), ("ab", "xyz"), ("api:", ""), ("user:", "\n")]


@pytest.mark.parametrize("shape", GENERATED, ids=[shape.name for shape in GENERATED])
def test_each_generated_secret_is_masked_in_base64_at_every_alignment(shape):
    hide = Redactor.of(secret_args(shape.args))
    for value in (value for value in planted(shape) if leaks(value)):  # those holding one
        for before, after in BASE64_AROUND:
            raw = (before + value + after).encode()
            for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
                printed = f"Basic {encoded.decode()} ok"
                assert base64_leaks(printed), (before, value)  # the check can fail
                assert base64_leaks(hide.text(printed)) == [], (before, value, after)


@pytest.mark.parametrize("shape", GENERATED, ids=[shape.name for shape in GENERATED])
def test_each_generated_secret_is_masked_in_hexadecimal(shape):
    hide = Redactor.of(secret_args(shape.args))
    for value in (value for value in planted(shape) if leaks(value)):  # those holding one
        digits = value.encode().hex()
        for printed in (f"key {digits} ok", f"KEY={digits.upper()}", f"x{digits}\n"):
            assert hex_leaks(printed), value  # the check can fail
            assert hex_leaks(hide.text(printed)) == [], (value, printed)


@pytest.mark.parametrize("shape", GENERATED, ids=[shape.name for shape in GENERATED])
def test_each_generated_secret_cut_by_a_line_break_is_masked_on_both_lines(shape):
    """A program's wrapped output: line 1 ends with the secret's first k characters and line 2
    starts with the rest, for every k; both parts are masked where the lines are read together
    (a record, the report, an upload of the log, the console's next line)."""
    hide = Redactor.of(secret_args(shape.args))
    value = shape.secret
    for k in range(1, len(value)):
        printed = f"got {value[:k]}\n  {value[k:]} ok"
        assert hide.text(printed) == f"got {REDACTED}\n  {REDACTED} ok", printed
        assert hide.seam(f"got {value[:k]}", f"  {value[k:]} ok") == (
            f"got {REDACTED}",
            f"  {REDACTED} ok",
        )


def test_the_generated_table_leaks_unless_redacted():
    """Each shape's secret is in its arguments, so the tests above and below can fail."""
    assert all(leaks(" ".join(shape.args)) for shape in GENERATED)
    assert len(set(leaks(" ".join(ARGS)))) == len(GENERATED)  # one core each, none shared


@pytest.mark.parametrize(
    "args",
    [("--tokenizer", "gpt2"), ("--keep-last", "3"), ("--max-tokens", "5"), ("--num-tokens", "7"),
     ("--token-budget", "4096"), ("--maxTokens", "9"), ("--pad-token-id", "0"),
     ("--key-dim", "64"), ("--secret-name", "prod-db"), ("--author", "bob"),
     ("--passes", "3"), ("--use-auth", "--lr", "3e-4"), ("--compass=north",),
     ("--hdr", "Content-Type: application/json"), ("--max_new_tokens=128",)],
)  # fmt: skip
def test_ordinary_options_stay_visible(args):
    """Counts, ids and kinds of tokens or keys are no secret (docs/security.md); a flag with a
    secret word followed by `--x` is a flag, and the next option stays."""
    assert redact_args(args) == args
    assert secret_args(args) == ()


def test_the_generated_table_reaches_no_record_report_comparison_or_upload(
    s3, tmp_path, fixed_inventory
):
    bench = BenchSpec("gen", program=Program(ProgramKind.SCRIPT, "/w/train.py", ARGS), warmup=2)
    redact.remember_secrets(bench.secrets())  # as runner/cli/bench.py does for its command
    run_dir = program_run_dir(tmp_path / "gen", bench, fixed_inventory, STEPS)
    typed = ("bench", "--nodes", "1,2", "--", "python", "/w/train.py", *ARGS)
    write_manifest(run_dir, resolve_bench(bench).spec, fixed_inventory, command=typed)
    build_report(run_dir)
    log = run_dir.path / "launch" / "node-0.log"  # the program printed each value every way
    log.parent.mkdir()
    log.write_text(every_encoding([value for shape in GENERATED for value in planted(shape)]))
    assert len(set(leaks(log.read_text()))) == len(GENERATED)  # planted for real

    written = records(run_dir.path)
    sinks = {"manifest.json", "runs.json", "summary.json", "report.md", "report.html"}
    assert sinks <= set(written) and leaked(written) == {}
    manifest = written["manifest.json"].decode()
    assert "--accessToken '<redacted>' --accessToken" in manifest  # shown, less the secrets
    for name in ("report.md", "report.html"):  # the program's line and the command shown too
        assert "--accessToken" in written[name].decode() and "Bearer" in written[name].decode()

    other = BenchSpec("other", program=Program(ProgramKind.MODULE, "pkg.train", ARGS), warmup=2)
    program_run_dir(tmp_path / "other", other, fixed_inventory, STEPS)
    compared = dtrun("compare", str(run_dir.path), str(tmp_path / "other"))
    assert compared.exit_code == 0, compared.output
    assert leaks(compared.output) == [] and "--accessToken" in compared.output

    S3Store(parse_results_url(f"s3://{BUCKET}/gen")).upload(run_dir.path, secrets=bench.secrets())
    uploaded = stored(s3, "gen/gen/")
    assert "gen/gen/launch/node-0.log" in uploaded and leaked(uploaded) == {}


def test_the_generated_table_is_not_shown_by_a_dry_run(tmp_path):
    for command in ("run", "bench"):
        nodes = ("--nodes", "1,2") if command == "bench" else ()
        shown = dtrun(command, "--dry-run", *nodes, "--output", str(tmp_path), "--",
                      "python", "t.py", *ARGS)  # fmt: skip
        assert shown.exit_code == 0, shown.output
        assert "t.py" in shown.output and leaks(shown.output) == [], command
