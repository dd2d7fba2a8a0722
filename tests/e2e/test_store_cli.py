"""store cli: the tests that start daemons or real launches; the others are in
tests/unit/test_store_cli.py."""

from __future__ import annotations

import contextlib
import json

import pytest
from moto.core.authorization import enable_iam_authentication

from tests.aws import BUCKET, LIST_ONLY, stored, user_keys
from tests.unit.test_store_cli import (
    QUICK,
    dtrun,
    local_files,
    no_stop_yet,  # noqa: F401 - a fixture
    program,  # noqa: F401 - a fixture
    stop_with_sigterm,
)


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


@pytest.mark.e2e
def test_a_sigterm_while_the_cluster_closes_is_in_the_uploaded_records(
    s3, no_leftovers, no_stop_yet, monkeypatch
):
    from dtrun.cli import session

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
    from dtrun.cli import bench as launch

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


@pytest.mark.e2e
def test_a_sigterm_after_a_program_ended_is_in_its_run_record(program, no_stop_yet, monkeypatch):
    from dtrun.cli import session

    real_opened = session.opened

    @contextlib.contextmanager
    def closing_stopped(choice, watch):
        with real_opened(choice, watch) as cluster:
            yield cluster
        stop_with_sigterm()  # the program ended and is recorded; the cluster is closing

    monkeypatch.setattr(session, "opened", closing_stopped)
    out = program / "runs"
    result = dtrun(
        "run", "--port", "29708", "--output", str(out), "--run-id", "late", "--",
        "python", "hello.py",
    )  # fmt: skip
    assert result.exit_code == 143, result.output
    record = json.loads((out / "late" / "run.json").read_text())
    assert (record["status"], record["error"]) == (
        "interrupted",
        "stopped by SIGTERM after the program ended (tidying up)",
    )
    assert [node["exit_code"] for node in record["nodes"]] == [0]
