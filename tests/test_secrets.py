"""Secrets planted in every place a user puts them never reach a record, a report, the terminal
or an upload: names that look secret, credentials inside URLs, and token-shaped values."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from runner.cli.app import app
from runner.redact import REDACTED, is_secret_name, redact_args, redact_env, secret_values
from tests.aws import BUCKET, stored

GHP = "ghp_" + "A1b2C3d4" * 5  # a GitHub token's shape
# --env NAME=VALUE pairs, and the part of each value that must never be seen
PLANTED_ENV = {
    "DB_PASS": ("hunter2pass", "hunter2pass"),
    "GITHUB_PAT": ("patvalue1234", "patvalue1234"),
    "MLFLOW_TRACKING_URI": ("https://mlu:mlflowpw9@mlflow.example/x", "mlflowpw9"),
    "DATABASE_URL": ("postgres://dbu:dbpw12345@db/x", "dbpw12345"),
    "HINT": ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
    "NOTE": (f"token {GHP} here", GHP),
}
MACHINE_ENV = {  # this machine's own environment, recorded in the manifest
    "MY_SERVICE_URL": ("https://alice:machinepw77@svc/x", "machinepw77"),
    "SOME_SETTING": ("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
}
SECRETS = [secret for _, secret in (*PLANTED_ENV.values(), *MACHINE_ENV.values())]
ENV_ARGS = [arg for name, (value, _) in PLANTED_ENV.items() for arg in ("--env", f"{name}={value}")]


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


def leaks(text: str | bytes) -> list[str]:
    body = text.decode(errors="replace") if isinstance(text, bytes) else text
    return [secret for secret in SECRETS if secret in body]


def records(run) -> dict[str, bytes]:
    """Every file dtrun writes about a run, all but the launch scripts and node logs: those hand
    the values to the nodes (mode 0700) and hold what the program printed."""
    return {
        path.relative_to(run).as_posix(): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file()
        and not path.name.endswith((".sh", ".log", ".env"))
        and path.name != ".deepspeed_env"
    }


@pytest.mark.parametrize(
    ("name", "secret"),
    [("DB_PASS", True), ("GITHUB_PAT", True), ("SMTP_PWD", True), ("HF_TOKEN", True),
     ("PATH", False), ("COMPASS_DIR", False), ("PASSAGE", False), ("OMP_NUM_THREADS", False)],
)  # fmt: skip
def test_secret_names_are_matched_on_their_parts(name, secret):
    assert is_secret_name(name) is secret


def test_urls_and_token_shapes_are_hidden_in_any_value_and_listed_for_scrubbing():
    env = tuple((name, value) for name, (value, _) in PLANTED_ENV.items())
    shown = dict(redact_env(env))
    assert shown["DB_PASS"] == REDACTED
    assert shown["MLFLOW_TRACKING_URI"] == f"https://{REDACTED}@mlflow.example/x"
    assert shown["NOTE"] == f"token {REDACTED} here"
    assert not leaks(repr(shown))
    scrubbed = secret_values(env)  # what an upload replaces in files that hold the values
    assert all(any(secret in value for value in scrubbed) for _, secret in PLANTED_ENV.values())
    args = ("--api-key", "sk-" + "x" * 24, f"--hub={GHP}", "--lr", "3e-4")
    assert redact_args(args) == ("--api-key", REDACTED, f"--hub={REDACTED}", "--lr", "3e-4")


def test_a_dry_run_shows_none_of_them(tmp_path, monkeypatch):
    for name, (value, _) in MACHINE_ENV.items():
        monkeypatch.setenv(name, value)
    bench = dtrun("bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path), *ENV_ARGS)
    assert bench.exit_code == 0, bench.output
    assert leaks(bench.output) == []
    run = dtrun("run", "--dry-run", "--output", str(tmp_path), *ENV_ARGS, "--",
                "python", "t.py", "--api-key", "sk-" + "y" * 24)  # fmt: skip
    assert run.exit_code == 0, run.output
    assert leaks(run.output) == [] and "y" * 24 not in run.output


@pytest.mark.e2e
def test_a_bench_and_its_upload_hold_none_of_them(s3, no_leftovers, monkeypatch):
    for name, (value, _) in MACHINE_ENV.items():
        monkeypatch.setenv(name, value)
    out = no_leftovers / "runs"
    result = dtrun(
        "bench", "--nodes", "1", "--steps", "3", "--warmup", "1", "--repeat", "1",
        "--port", "29710",
        "--output", str(out), "--run-id", "planted", "--results", f"s3://{BUCKET}/p", *ENV_ARGS,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert leaks(result.output) == []
    written = records(out / "planted")
    assert {"manifest.json", "runs.json", "summary.json", "report.md", "report.html"} <= set(
        written
    )
    assert {name: leaks(body) for name, body in written.items() if leaks(body)} == {}
    uploaded = stored(s3, "p/planted/")
    assert any(key.endswith(".sh") for key in uploaded)  # the scripts go up too, scrubbed
    assert {key: leaks(body) for key, body in uploaded.items() if leaks(body)} == {}


@pytest.mark.e2e
def test_a_run_record_holds_none_of_them(no_leftovers, monkeypatch):
    for name, (value, _) in MACHINE_ENV.items():
        monkeypatch.setenv(name, value)
    out = no_leftovers / "runs"
    script = no_leftovers / "quiet.py"
    script.write_text("import sys\n")
    result = dtrun(
        "run", "--output", str(out), "--run-id", "planted", "--port", "29715", *ENV_ARGS, "--",
        "python", str(script), "--api-key", "sk-" + "z" * 24,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    written = records(out / "planted")
    assert "run.json" in written
    assert {name: leaks(body) for name, body in written.items() if leaks(body)} == {}
    assert not any(b"z" * 24 in body for body in written.values())


@pytest.mark.e2e
def test_a_failing_program_that_prints_them_shows_none_in_its_error_or_records(
    no_leftovers, monkeypatch
):
    """The failure message quotes the node's last log lines, and the program printed every
    secret it was given before failing: the terminal, the error and run.json hide them all."""
    for name, (value, _) in MACHINE_ENV.items():
        monkeypatch.setenv(name, value)
    out = no_leftovers / "runs"
    script = no_leftovers / "leaky.py"
    names = [*PLANTED_ENV, *MACHINE_ENV]
    script.write_text(
        "import os, sys\n"
        f"for name in {names!r}:\n"
        "    print(name, os.environ[name], flush=True)\n"
        "print('args', sys.argv[1:], flush=True)\n"
        "url, password = os.environ['DATABASE_URL'], os.environ['DB_PASS']\n"
        "raise RuntimeError(f'cannot connect to {url} as {password}')\n"
    )
    result = dtrun(
        "run", "--output", str(out), "--run-id", "leaky", "--port", "29718", *ENV_ARGS, "--",
        "python", str(script), "--api-key", "sk-" + "w" * 24,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "node-0 (127.0.0.2) failed with exit code" in result.output
    assert leaks(result.output) == [] and "w" * 24 not in result.output
    assert f"DB_PASS {REDACTED}" in result.output  # the lines are shown, less the secrets
    # the failure message quotes the program's own error, less the secrets
    assert f"RuntimeError: cannot connect to postgres://{REDACTED}@db/x as {REDACTED}" in (
        result.output
    )
    written = records(out / "leaky")
    assert "hunter2pass" in (out / "leaky" / "launch" / "node-0.log").read_text()  # kept whole
    assert {name: leaks(body) for name, body in written.items() if leaks(body)} == {}
    assert not any(b"w" * 24 in body for body in written.values())
