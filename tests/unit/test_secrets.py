"""Every secret shape of tests/secret_shapes.py, planted through every input of dtrun (--env,
program arguments, this machine's environment, a hosts file's jump, --results), never reaches a
sink: the terminal, streamed node lines, error messages, --dry-run and --json output, any file
of the run directory but the launch scripts and node logs (kept whole for the nodes), an S3
upload, or the redacted copy a failed upload leaves.

The e2e tests launch on the embedded cluster; the rest are fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from moto.core.authorization import enable_iam_authentication
from typer.testing import CliRunner

from dtrun import redact
from dtrun.cli.app import app
from dtrun.errors import UploadError
from dtrun.redact import Redactor
from dtrun.store.base import files_to_upload
from dtrun.store.s3 import S3Store
from dtrun.store.url import parse_results_url
from tests.aws import BUCKET, LIST_ONLY, stored, user_keys
from tests.secret_shapes import (
    CREDENTIALS,
    ENV,
    ENV_ARGS,
    MACHINE,
    PROGRAM_ARGS,
    SHAPES,
    every_encoding,
    leaks,
    planted,
)


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test's dtrun knows only the secrets its own command was given, as a new process."""
    monkeypatch.setattr(redact, "_process", Redactor())


@pytest.fixture
def machine_env(monkeypatch):
    """This machine's environment holds the table's machine shapes (recorded in the manifest)."""
    for name, value in MACHINE:
        monkeypatch.setenv(name, value)


def records(run: Path) -> dict[str, bytes]:
    """Every file dtrun writes about a run but the launch scripts and node logs: those hand
    the values to the nodes (mode 0700) and hold what the program printed, whole."""
    return {
        path.relative_to(run).as_posix(): path.read_bytes()
        for path in sorted(run.rglob("*"))
        if path.is_file()
        and not path.name.endswith((".sh", ".log", ".env"))
        and path.name != ".deepspeed_env"
    }


def leaked(files: dict[str, bytes]) -> dict[str, list[str]]:
    return {name: leaks(body) for name, body in files.items() if leaks(body)}


def test_a_dry_run_shows_none_of_them(tmp_path, machine_env):
    bench = dtrun("bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path), *ENV_ARGS)
    assert bench.exit_code == 0, bench.output
    assert leaks(bench.output) == []
    assert "export ECHO_CMD='wandb login <redacted>'" in bench.output  # shown, less the secret
    run = dtrun("run", "--dry-run", "--output", str(tmp_path), *ENV_ARGS, "--",
                "python", "t.py", *PROGRAM_ARGS)  # fmt: skip
    assert run.exit_code == 0, run.output
    assert leaks(run.output) == []
    assert not list(tmp_path.iterdir())


def test_a_command_that_launches_nothing_hides_this_machines_secrets_too(tmp_path, monkeypatch):
    """Not only run and bench: `dtrun predict` quoting a file, as `dtrun exec` a node's output
    and `dtrun up` Pulumi's, shows none of this machine's secret-named variables' values."""
    monkeypatch.setenv("MY_API_KEY", "Hunter2SecretValue")
    described = tmp_path / "measured.json"
    described.write_text('{"Hunter2SecretValue": 1, "Hunter2SecretValue": 2}')
    result = dtrun("predict", "--nodes", "8", "--from", str(described))
    assert result.exit_code == 2 and "the key '<redacted>' is given twice" in result.output
    assert "Hunter2" not in result.output


def dry_run(*options: str) -> list[str]:
    return ["run", "--dry-run", *options, "--", "python", "t.py"]


def real_run(*options: str) -> list[str]:
    return ["run", *options, "--", "python", "t.py"]


def real_bench(*options: str) -> list[str]:
    return ["bench", "--nodes", "1", *options]


@pytest.mark.parametrize("shape", CREDENTIALS, ids=[shape.name for shape in CREDENTIALS])
def test_a_jump_host_with_a_password_is_refused_without_showing_it(tmp_path, shape):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"jump: {json.dumps(f'alice:{shape.secret}@127.0.0.9')}\nhosts: [127.0.0.2]\n")
    out = tmp_path / "runs"
    for command in (dry_run, real_run, real_bench):
        result = dtrun(*command("--hosts", str(hosts), "--output", str(out)))
        assert result.exit_code == 2, result.output
        assert f"{hosts}, line 1: 'jump' holds a password" in result.output
        assert leaks(result.output) == []
    assert not out.exists()  # no record of it either


@pytest.mark.parametrize("shape", CREDENTIALS, ids=[shape.name for shape in CREDENTIALS])
def test_a_host_written_with_a_password_is_refused_without_showing_it(tmp_path, shape):
    """USER:PASSWORD@HOST as a node's host, in each hosts-file shape and typed to --hosts: the
    error quotes the host with its password masked."""
    host = f"alice:{shape.secret}@10.0.0.1"
    written = {
        "hosts.txt": f"{host} slots=1\n",  # an MPI hostfile
        "list.txt": f"n1:2,{host}:2\n",  # host:slots items
        "hosts.yaml": f"hosts:\n  - host: {json.dumps(host)}\n",
    }
    for name, text in written.items():
        (tmp_path / name).write_text(text)
    for given in [*(str(tmp_path / name) for name in written), host, f"n1:2,{host}"]:
        result = dtrun("exec", "--hosts", given, "--", "true")
        assert result.exit_code == 2, result.output
        assert "alice:<redacted>@10.0.0.1" in result.output
        assert leaks(result.output) == []


@pytest.mark.parametrize(
    "args",
    [("check", "{url}"), ("run", "--port", "{url}", "--", "python", "t.py"), ("{url}",),
     ("run", "--port", "ghp_{core}{core}", "--", "python", "t.py")],
    ids=["extra argument", "bad value", "no such command", "a token as a bad value"],
)  # fmt: skip
def test_a_usage_error_quoting_the_value_it_refused_hides_its_secret(args):
    """Click's own errors (typer prints them in a panel, past dtrun's consoles) quote the
    value: URL credentials and token shapes in it are hidden as in all dtrun prints."""
    core = "Zq9vXw7LmN3pRt"
    url = f"https://alice:{core}@127.0.0.9/x"
    result = dtrun(*(arg.format(url=url, core=core) for arg in args))
    assert result.exit_code == 2, result.output
    assert core not in result.output and "<redacted>" in result.output, result.output


@pytest.mark.parametrize("option", ["--hosts", "--outputs"])
def test_a_path_option_s_url_credentials_are_hidden_where_the_path_loses_the_url_s_shape(
    tmp_path, monkeypatch, option
):
    """`--hosts ssh://alice:PW@host` is read as the file ssh:/alice:PW@host (Path drops a /),
    which no URL rule matches: dtrun's own arguments' credentials are known as values."""
    url = "ssh://alice:Zq9vXw7LmN3pRt@127.0.0.9/x"
    args = dry_run(option, url, "--output", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["dtrun", *args])  # as the console script is started
    result = dtrun(*args)
    assert result.exit_code == 2 and "cannot read the" in result.output, result.output
    assert "Zq9vXw7LmN3pRt" not in result.output and "ssh:/<redacted>@127.0.0.9" in result.output


@pytest.mark.parametrize("shape", CREDENTIALS, ids=[shape.name for shape in CREDENTIALS])
def test_results_with_credentials_is_refused_without_showing_them(tmp_path, shape):
    url = f"s3://AKIAIOSFODNN7EXAMPLE:{shape.secret}@{BUCKET}/p"
    out = tmp_path / "runs"
    for command in (dry_run, real_run, real_bench):
        result = dtrun(*command("--results", url, "--output", str(out)))
        assert result.exit_code == 2, result.output
        assert (
            "holds credentials" in result.output and f"--results s3://{BUCKET}/p" in result.output
        )
        assert leaks(result.output) == [] and "AKIAIOSFODNN7EXAMPLE" not in result.output
    assert not out.exists()


def _run_dir_holding_every_shape(tmp_path: Path) -> Path:
    """A run directory whose script, node log and program output hold every planted value in
    every encoding, as a real run's may."""
    run = tmp_path / "runs" / "r1"
    values = [value for shape in SHAPES for value in planted(shape)]
    for name in ("plan/n1/node-0.sh", "n1/r0/node-0.log", "launch/out/config.txt"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(every_encoding(values))
    (run / "report.html").write_text('<img src="data:image/png;base64,QUtJQUFC+/=">')
    return run


def _table_secrets() -> list[str]:
    from dtrun.redact import secrets_in_environment
    from dtrun.spec.request import Program, ProgramKind, RunSpec

    spec = RunSpec("r1", env=ENV, program=Program(ProgramKind.SCRIPT, "t.py", PROGRAM_ARGS))
    return [*spec.secrets(), *secrets_in_environment(dict(MACHINE))]


def test_an_upload_and_the_copy_a_failed_one_leaves_hold_none_of_them(s3, tmp_path, monkeypatch):
    run = _run_dir_holding_every_shape(tmp_path)
    local = {path: path.read_bytes() for path in files_to_upload(run)}
    assert leaked({str(path): body for path, body in local.items()})  # planted for real
    S3Store(parse_results_url(f"s3://{BUCKET}/ok")).upload(run, secrets=_table_secrets())
    uploaded = stored(s3, "ok/r1/")
    assert len(uploaded) == len(local) and leaked(uploaded) == {}
    assert uploaded["ok/r1/report.html"] == local[run / "report.html"]  # images left whole

    for name, value in user_keys("lister", actions=LIST_ONLY).items():
        monkeypatch.setenv(name, value)
    with enable_iam_authentication(), pytest.raises(UploadError) as caught:
        S3Store(parse_results_url(f"s3://{BUCKET}/denied")).upload(run, secrets=_table_secrets())
    (copy,) = run.parent.glob("r1.redacted-*")
    assert f"aws s3 sync {copy} s3://{BUCKET}/denied/r1/" in caught.value.fix
    copied = {
        path.relative_to(copy).as_posix(): path.read_bytes() for path in files_to_upload(copy)
    }
    assert len(copied) == len(local) and leaked(copied) == {}
    assert {path: path.read_bytes() for path in files_to_upload(run)} == local  # kept whole


# The failing program prints every value it was given, in every encoding of the table's
# ENCODINGS that a program writes itself, then fails quoting two of them.
LEAKY = """\
import html, json, os, shlex, sys
from urllib.parse import quote
names = {names!r}
values = [os.environ.get(name, "") for name in names] + sys.argv[1:]
for value in values:
    for shown in (value, repr(value), json.dumps(value), shlex.quote(value),
                  quote(value, safe=""), json.dumps({{"v": value}}), html.escape(value)):
        print(shown, flush=True)
print("args", sys.argv[1:], flush=True)
url, password = os.environ["DATABASE_URL"], os.environ["DB_PASS"]
raise RuntimeError(f"cannot connect to {{url}} as {{password}}")
"""
