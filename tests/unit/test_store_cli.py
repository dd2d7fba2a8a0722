"""`--results s3://...` on `dtrun bench` and `dtrun run`, end to end on the embedded cluster.

In-process (CliRunner) so that moto's S3 answers boto3; the launches are real.
"""

from __future__ import annotations

import signal

import pytest
from moto.core.authorization import enable_iam_authentication
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.cli.store import upload_after
from dtrun.errors import RunInterruptedError
from dtrun.record.writer import LOCK_FILE
from dtrun.store.s3 import S3Store
from dtrun.store.url import parse_results_url
from tests.aws import ACCOUNT, BUCKET, stored, user_keys

QUICK = ("--nodes", "1", "--steps", "3", "--warmup", "1", "--repeat", "1", "--quiet")


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


def local_files(run):
    """The run's results as it left them: every file but the writer's lock (an empty file that
    says which dtrun writes the directory, runner/record/writer.py)."""
    return {
        path.relative_to(run).as_posix(): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file() and path.name != LOCK_FILE
    }


def test_bench_without_credentials_stops_before_anything_runs(no_aws_credentials, tmp_path):
    out = tmp_path / "runs"
    result = dtrun("bench", *QUICK, "--output", str(out), "--results", f"s3://{BUCKET}/dtrun")
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"error: no AWS credentials for --results s3://{BUCKET}/dtrun")
    assert result.stderr.count("error:") == 1
    assert "AWS_PROFILE" in result.stderr
    assert "Traceback" not in result.output
    assert not out.exists()


def test_bench_with_denied_credentials_stops_before_anything_runs(s3, tmp_path, monkeypatch):
    for name, value in user_keys("reader", actions=[]).items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "runs"
    with enable_iam_authentication():
        result = dtrun("bench", *QUICK, "--output", str(out), "--results", f"s3://{BUCKET}/x")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: access denied to bucket {BUCKET}")
    assert f"arn:aws:iam::{ACCOUNT}:user/reader" in result.stderr
    assert "Traceback" not in result.output
    assert not out.exists()


def test_a_dry_run_checks_the_url_and_contacts_no_store(no_aws_credentials, tmp_path):
    url = f"s3://{BUCKET}/dtrun"
    dry = dtrun("bench", "--dry-run", "--output", str(tmp_path / "runs"), "--results", url)
    assert dry.exit_code == 0, dry.output  # no credentials, and no error: nothing was asked
    bad = dtrun("bench", "--dry-run", "--results", "gs://results/dtrun")
    assert bad.exit_code == 2
    assert "names a store dtrun cannot write" in bad.stderr


@pytest.fixture
def program(no_leftovers, monkeypatch):
    """A working directory with a program that prints, and one that fails."""
    monkeypatch.chdir(no_leftovers)
    (no_leftovers / "hello.py").write_text("print('hello from rank 0')\n")
    (no_leftovers / "fail.py").write_text("raise SystemExit(3)\n")
    return no_leftovers


def test_an_interrupted_run_is_uploaded_then_the_interruption_goes_on(s3, tmp_path):
    run = tmp_path / "runs" / "stopped"
    store = S3Store(parse_results_url(f"s3://{BUCKET}/runs"))
    with pytest.raises(RunInterruptedError), upload_after(store, run, ()):
        run.mkdir(parents=True)
        (run / "runs.json").write_text('{"status": "interrupted"}\n')
        raise RunInterruptedError("interrupted")
    assert stored(s3, "runs/stopped/") == {"runs/stopped/runs.json": b'{"status": "interrupted"}\n'}


def test_a_directory_that_existed_before_is_never_uploaded(s3, tmp_path):
    run = tmp_path / "runs" / "taken"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}\n")
    store = S3Store(parse_results_url(f"s3://{BUCKET}/runs"))
    with upload_after(store, run, ()):
        pass
    assert stored(s3, "runs/") == {}


def test_links_left_out_of_an_upload_are_named_on_the_console(s3, tmp_path, capsys):
    run = tmp_path / "runs" / "linked"
    store = S3Store(parse_results_url(f"s3://{BUCKET}/runs"))
    with upload_after(store, run, ()):
        (run / "launch").mkdir(parents=True)
        (run / "run.json").write_text("{}\n")
        (run / "launch" / "data[bold]").symlink_to(tmp_path)  # markup in a name stays text
    out = " ".join(capsys.readouterr().out.split())
    assert "uploaded 2 files" in out  # run.json and symlinks.json
    assert (
        "not uploaded: 1 symbolic link (launch/data[bold]): S3 holds no links, and no link's "
        "target is sent; symlinks.json in the upload lists them"
    ) in out
    assert sorted(stored(s3, "runs/linked/")) == [
        "runs/linked/run.json",
        "runs/linked/symlinks.json",
    ]


def stop_with_sigterm() -> None:
    from dtrun import errors

    errors.stopped_by(signal.SIGTERM)
    raise KeyboardInterrupt


@pytest.fixture
def no_stop_yet(monkeypatch):
    from dtrun import errors

    monkeypatch.setattr(errors, "_stop_signal", [])


def test_an_output_through_a_link_uploads_the_run_written_there_not_where_it_points_later(
    s3, tmp_path
):
    """`bench -o LINK --results`: the run is written where LINK pointed when the run directory
    was made (create_run_dir); the upload followed the link again at the end."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "a")
    store = S3Store(parse_results_url(f"s3://{BUCKET}/runs"))
    with upload_after(store, link / "x", ()):
        (tmp_path / "a" / "x").mkdir()
        (tmp_path / "a" / "x" / "runs.json").write_text("{}\n")
        (tmp_path / "b" / "x").mkdir()
        (tmp_path / "b" / "x" / "other.txt").write_text("not this run\n")
        link.unlink()
        link.symlink_to(tmp_path / "b")
    assert stored(s3, "runs/x/") == {"runs/x/runs.json": b"{}\n"}
