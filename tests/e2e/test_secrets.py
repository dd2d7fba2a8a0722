"""secrets: the tests that start daemons or real launches; the others are in
tests/unit/test_secrets.py."""

from __future__ import annotations

import json

import pytest

from dtrun.redact import REDACTED
from tests.aws import BUCKET, stored
from tests.secret_shapes import (
    ENV,
    ENV_ARGS,
    MACHINE,
    PROGRAM_ARGS,
    leaks,
)
from tests.unit.test_secrets import (
    LEAKY,
    dtrun,
    leaked,
    machine_env,  # noqa: F401 - a fixture
    records,
)


@pytest.mark.e2e
def test_a_bench_its_json_records_report_and_upload_hold_none_of_them(
    s3, no_leftovers, machine_env, monkeypatch
):
    out = no_leftovers / "runs"
    args = (
        "bench", "--nodes", "1", "--steps", "3", "--warmup", "1", "--repeat", "1",
        "--port", "29710", "--json",
        "--output", str(out), "--run-id", "planted", "--results", f"s3://{BUCKET}/p", *ENV_ARGS,
    )  # fmt: skip
    monkeypatch.setattr("sys.argv", ["/venv/bin/dtrun", *args])  # as a shell starts it
    result = dtrun(*args)
    assert result.exit_code == 0, result.output
    assert leaks(result.output) == []
    json.loads(result.stdout)  # the --json document, whole
    written = records(out / "planted")
    assert {"manifest.json", "runs.json", "summary.json", "report.md", "report.html"} <= set(
        written
    )
    assert leaked(written) == {}
    manifest = json.loads(written["manifest.json"])
    assert ["ECHO_CMD", f"wandb login {REDACTED}"] in manifest["bench"]["env"]
    assert manifest["command"].startswith("dtrun bench --nodes 1 --steps 3 --warmup 1 ")
    assert f"--env 'ECHO_CMD=wandb login {REDACTED}'" in manifest["command"]
    uploaded = stored(s3, "p/planted/")
    assert any(key.endswith("node-0.sh") for key in uploaded)  # the scripts go up too, redacted
    assert leaked(uploaded) == {}


@pytest.mark.e2e
def test_a_run_its_record_and_upload_hold_none_of_them(s3, no_leftovers, machine_env, monkeypatch):
    out = no_leftovers / "runs"
    script = no_leftovers / "quiet.py"
    seen = no_leftovers / "seen.json"  # the names of the program's environment
    script.write_text(f"import json, os\njson.dump(sorted(os.environ), open({str(seen)!r}, 'w'))\n")
    monkeypatch.setenv("MY_NOTE", "shapes nothing")
    args = (
        "run", "--output", str(out), "--run-id", "planted", "--port", "29715",
        "--results", f"s3://{BUCKET}/p", *ENV_ARGS, "--", "python", str(script), *PROGRAM_ARGS,
    )  # fmt: skip
    monkeypatch.setattr("sys.argv", ["/venv/bin/dtrun", *args])  # as a shell starts it
    result = dtrun(*args)
    assert result.exit_code == 0, result.output
    assert leaks(result.output) == []
    written = records(out / "planted")
    assert "run.json" in written and leaked(written) == {}
    record = json.loads(written["run.json"])
    command = record["command"]  # as typed, redacted like the manifest
    assert command.startswith("dtrun run --output ") and REDACTED in command
    # this machine's environment: what shapes a run recorded (redacted), nothing else
    recorded = record["environment"]
    assert recorded["TORCH_HUB_TOKEN"] == REDACTED
    assert not {"GPG_PASSPHRASE", "MY_SERVICE_URL", "SOME_SETTING", "MY_NOTE", "HOME"} & set(
        recorded
    )
    # the node started with a login's variables and the run settings, not dtrun's others
    names = set(json.loads(seen.read_text()))
    assert {"PATH", "HOME", "TORCH_HUB_TOKEN", "MASTER_ADDR", "RANK"} <= names
    assert not {"GPG_PASSPHRASE", "MY_SERVICE_URL", "SOME_SETTING", "MY_NOTE"} & names
    assert {name for name, _ in ENV} <= names  # --env reaches it
    uploaded = stored(s3, "p/planted/")
    assert any(key.endswith(".sh") for key in uploaded) and leaked(uploaded) == {}


@pytest.mark.e2e
def test_a_failing_program_that_prints_them_shows_none_in_its_lines_error_record_or_upload(
    s3, no_leftovers, machine_env
):
    """The failure message quotes the node's last log lines, and the program printed every
    secret it was given before failing (this machine's run setting with a secret name too):
    the terminal, the error, run.json and the upload hide them all; the node log keeps them
    whole on this machine."""
    out = no_leftovers / "runs"
    script = no_leftovers / "leaky.py"
    script.write_text(LEAKY.format(names=[name for name, _ in (*ENV, *MACHINE)]))
    result = dtrun(
        "run", "--output", str(out), "--run-id", "leaky", "--port", "29718",
        "--results", f"s3://{BUCKET}/p", *ENV_ARGS, "--", "python", str(script), *PROGRAM_ARGS,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "node-0 (127.0.0.2) failed with exit code" in result.output
    assert leaks(result.output) == []
    assert f"[node-0] {REDACTED}" in result.output  # the lines are shown, less the secrets
    assert f"RuntimeError: cannot connect to postgres://{REDACTED}@db/x as {REDACTED}" in (
        result.output
    )
    log = (out / "leaky" / "launch" / "node-0.log").read_text()
    # whole in the log; the run setting with a secret name reached the node and was printed
    assert {"Hunter2Password", "SlashPart01", "Wandb0Reused0Key", "TorchHub0TokenCore"} <= set(
        leaks(log)
    )
    assert "GpgPassphrase0Core" not in log  # this machine's other secrets never reach a node
    assert leaked(records(out / "leaky")) == {}
    uploaded = stored(s3, "p/leaky/")
    assert "p/leaky/launch/node-0.log" in uploaded and leaked(uploaded) == {}


@pytest.mark.e2e
def test_exec_hides_the_secrets_of_its_own_command_that_a_node_prints_back(no_leftovers):
    """`bash -x` traces the line it runs: its --api-key value, and a password in it given as
    one shell line, show <redacted> in the node lines."""
    traced = dtrun(
        "exec", "--local-nodes", "1", "--", "bash", "-xc", "true --api-key Exec0Key0Core"
    )
    assert traced.exit_code == 0, traced.output
    assert f"+ true --api-key {REDACTED}" in traced.output and "Exec0Key0" not in traced.output
    line = dtrun("exec", "--local-nodes", "1", "--", "set -x; true --password='Exec0Pw0Core'")
    assert line.exit_code == 0, line.output
    assert "Exec0Pw0" not in line.output
