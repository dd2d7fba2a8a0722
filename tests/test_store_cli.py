"""`--results s3://...` on `dtrun bench` and `dtrun run`, end to end on the embedded cluster.

In-process (CliRunner) so that moto's S3 answers boto3; the launches are real.
"""

from __future__ import annotations

import contextlib
import json
import signal

import pytest
from moto.core.authorization import enable_iam_authentication
from typer.testing import CliRunner

from runner.cli.app import app
from runner.cli.store import upload_after
from runner.errors import RunInterruptedError
from runner.store.s3 import S3Store
from runner.store.url import parse_results_url
from tests.aws import ACCOUNT, BUCKET, LIST_ONLY, stored, user_keys

QUICK = ("--nodes", "1", "--steps", "3", "--warmup", "1", "--repeat", "1", "--quiet")


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


def local_files(run):
    return {
        path.relative_to(run).as_posix(): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file()
    }


@pytest.mark.e2e
def test_bench_uploads_the_whole_run_directory_and_prints_where(s3, no_leftovers):
    out = no_leftovers / "runs"
    result = dtrun(
        "bench", *QUICK, "--port", "29700", "--output", str(out), "--run-id", "s3run",
        "--results", f"s3://{BUCKET}/dtrun", "--env", "HF_TOKEN=hunter2-token",
    )  # fmt: skip
    assert result.exit_code == 0, result.output

    objects = stored(s3, "dtrun/s3run/")
    for name in ("summary.json", "report.md", "runs.json", "manifest.json", "n1/r0/result.json"):
        assert f"dtrun/s3run/{name}" in objects, name
    local = local_files(out / "s3run")
    assert {key.removeprefix("dtrun/s3run/") for key in objects} == set(local)
    assert objects["dtrun/s3run/summary.json"] == local["summary.json"]
    assert json.loads(objects["dtrun/s3run/n1/r0/result.json"])["tokens_per_s"] > 0
    assert not any(b"hunter2-token" in body for body in objects.values())
    assert b"hunter2-token" in local["plan/n1/node-0.sh"]  # the local copy is untouched
    assert f"to s3://{BUCKET}/dtrun/s3run/" in result.stdout
    assert f"uploaded {len(local)} files" in result.stdout


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


@pytest.mark.e2e
def test_run_uploads_its_launch_directory_and_record(s3, program):
    out = program / "runs"
    result = dtrun(
        "run", "--port", "29702", "--output", str(out), "--run-id", "mine",
        "--results", f"s3://{BUCKET}/runs", "--", "python", "hello.py",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    objects = stored(s3, "runs/mine/")
    assert json.loads(objects["runs/mine/run.json"])["status"] == "ok"
    assert b"hello from rank 0" in objects["runs/mine/launch/node-0.log"]
    assert f"s3://{BUCKET}/runs/mine/" in result.stdout


@pytest.mark.e2e
def test_a_failed_run_is_uploaded_and_still_fails_with_its_own_error(s3, program):
    out = program / "runs"
    result = dtrun(
        "run", "--port", "29704", "--output", str(out), "--run-id", "failing",
        "--results", f"s3://{BUCKET}/runs", "--", "python", "fail.py",
    )  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr.startswith("error: node-0 (127.0.0.2) failed with exit code")
    record = json.loads(stored(s3, "runs/failing/")["runs/failing/run.json"])
    assert record["status"] == "failed"
    assert f"s3://{BUCKET}/runs/failing/" in result.stdout


@pytest.mark.e2e
def test_an_upload_denied_after_a_good_run_exits_3_and_keeps_the_run(s3, program, monkeypatch):
    for name, value in user_keys("lister", actions=LIST_ONLY).items():
        monkeypatch.setenv(name, value)
    out = program / "runs"
    with enable_iam_authentication():
        result = dtrun(
            "run", "--port", "29706", "--output", str(out), "--run-id", "kept",
            "--results", f"s3://{BUCKET}/runs", "--", "python", "hello.py",
        )  # fmt: skip
    assert result.exit_code == 3
    count = len(local_files(out / "kept"))
    assert result.stderr.startswith(
        f"error: {count} of {count} files did not upload to s3://{BUCKET}/runs/kept/"
    )
    assert f"the local copy is kept in {out / 'kept'}" in result.stderr
    assert "Traceback" not in result.output
    assert json.loads((out / "kept" / "run.json").read_text())["status"] == "ok"


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


def stop_with_sigterm() -> None:
    from runner import errors

    errors.stopped_by(signal.SIGTERM)
    raise KeyboardInterrupt


@pytest.fixture
def no_stop_yet(monkeypatch):
    from runner import errors

    monkeypatch.setattr(errors, "_stop_signal", [])


@pytest.mark.e2e
def test_a_sigterm_while_the_cluster_closes_is_in_the_uploaded_records(
    s3, no_leftovers, no_stop_yet, monkeypatch
):
    from runner.cli import session

    real_opened = session.opened

    @contextlib.contextmanager
    def closing_stopped(choice, watch):
        with real_opened(choice, watch) as cluster:
            yield cluster
        stop_with_sigterm()  # the sweep ended; the cluster is closing

    monkeypatch.setattr(session, "opened", closing_stopped)
    out = no_leftovers / "runs"
    result = dtrun(
        "bench", *QUICK, "--port", "29702", "--output", str(out), "--run-id", "late",
        "--results", f"s3://{BUCKET}/dtrun",
    )  # fmt: skip
    assert result.exit_code == 143, result.output
    local = json.loads((out / "late" / "runs.json").read_text())
    uploaded = json.loads(stored(s3, "dtrun/late/")["dtrun/late/runs.json"])
    for runs in (local, uploaded):  # the copy says what the exit code says, as the local one
        assert runs["status"] == "interrupted"
        assert runs["error"] == "stopped by SIGTERM after the sweep ended (tidying up)"
        assert [run["status"] for run in runs["runs"]] == ["ok"]


@pytest.mark.e2e
def test_a_sigterm_while_the_summary_prints_is_recorded(no_leftovers, no_stop_yet, monkeypatch):
    from runner.cli import launch

    monkeypatch.setattr(launch, "print_summary", lambda done, **_: stop_with_sigterm())
    out = no_leftovers / "runs"
    result = dtrun("bench", *QUICK, "--port", "29704", "--output", str(out), "--run-id", "said")
    assert result.exit_code == 143, result.output
    assert "error: stopped by SIGTERM" in result.stderr
    runs = json.loads((out / "said" / "runs.json").read_text())
    assert (runs["status"], runs["error"]) == (
        "interrupted",
        "stopped by SIGTERM after the sweep ended (tidying up)",
    )
