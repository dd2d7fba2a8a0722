"""`dtrun up/down/outputs/extend/sizes`: clear messages without the Pulumi CLI, stack names,
sizes, and the expiry each prints."""

from __future__ import annotations

import datetime
import json
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import dtrun.azure.stack as azure_stack
from dtrun.azure.config import cluster_spec
from dtrun.azure.stack import Outputs
from dtrun.cli.app import app
from dtrun.cli.session import expiry_notice
from dtrun.cli.stack import _save_private
from dtrun.cluster.outputs import parse_outputs
from tests.paths import TESTS

OUTPUTS = TESTS / "data" / "outputs"

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def no_pulumi_cli(monkeypatch, tmp_path):
    """A PATH with the system tools but no `pulumi`, whatever this machine has installed."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path))  # and no ~/.pulumi


@pytest.mark.parametrize(
    "command", [["up"], ["down"], ["outputs"], ["extend", "--hours", "4"]], ids=lambda c: c[0]
)
def test_without_the_pulumi_cli_each_command_exits_2_saying_next_how_to_install_it(
    no_pulumi_cli, command
):
    result = runner.invoke(app, [*command, "--stack", "dev"])
    assert result.exit_code == 2  # a setup to fix, as bad input is
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("error: the Pulumi CLI is not installed: ")
    assert lines[1].startswith("  next: install it with `curl -fsSL https://get.pulumi.com | sh`")
    assert f"then run `dtrun {' '.join(command[:1])} --stack dev" in lines[1]
    assert "Traceback" not in result.output


@pytest.fixture
def stack_file(monkeypatch, tmp_path):
    """Pulumi.dev.yaml in a project folder of the test's own, with the text given."""
    monkeypatch.setattr(azure_stack, "project_folder", lambda: tmp_path, raising=False)

    def write(text: str):
        path = tmp_path / "Pulumi.dev.yaml"
        path.write_text(text)
        return path

    return write


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("dtrun:spot: on", "error: dtrun:spot is 'on', not a boolean"),
        ("dtrun:spot: yes", "error: dtrun:spot is 'yes', not a boolean"),
        ("dtrun:nodeCount: 1_0", "error: dtrun:nodeCount is '1_0', not an integer"),
        ("dtrun:adminCidrs: [0.0.0.0/0]", "error: dtrun:adminCidrs holds 0.0.0.0/0, which opens"),
    ],
)
@pytest.mark.parametrize("command", [["up"], ["extend", "--hours", "4"]], ids=lambda c: c[0])
def test_a_bad_setting_in_the_stack_file_is_said_before_the_pulumi_cli_is_looked_for(
    no_pulumi_cli, stack_file, command, setting, said
):
    text = f"config:\n  dtrun:adminCidrs: [203.0.113.4/32]\n  {setting}\n"
    path = stack_file(text)
    result = runner.invoke(app, [*command, "--stack", "dev"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(said), result.stderr
    assert "Pulumi CLI" not in result.stderr
    assert "Traceback" not in result.output
    assert path.read_text() == text


def test_good_settings_in_the_stack_file_go_on_to_the_pulumi_cli(no_pulumi_cli, stack_file):
    stack_file((TESTS.parent / "Pulumi.example.yaml").read_text())
    result = runner.invoke(app, ["up", "--stack", "dev"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: the Pulumi CLI is not installed: ")


@pytest.mark.parametrize(
    "text",
    [
        "config:\n  dtrun:spot: on\n  dtrun:sshPublicKey:\n    secure: AAEx\n",
        "environment: [dev-env]\nconfig:\n  dtrun:spot: on\n",
        "config: [",
    ],
    ids=["a secret", "an ESC environment", "no YAML"],
)
def test_a_stack_file_pulumi_alone_can_read_is_left_to_pulumi(no_pulumi_cli, stack_file, text):
    stack_file(text)
    result = runner.invoke(app, ["up", "--stack", "dev"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: the Pulumi CLI is not installed: ")


def test_a_bad_stack_name_is_refused_before_pulumi_runs(no_pulumi_cli):
    result = runner.invoke(app, ["up", "--stack", "my stack"])
    assert result.exit_code == 2
    assert "--stack 'my stack' is not a stack name" in result.stderr


def test_stack_is_required():
    assert runner.invoke(app, ["up"]).exit_code == 2


def test_sizes_lists_the_catalog_with_retired_sizes_marked():
    result = runner.invoke(app, ["sizes"])
    assert result.exit_code == 0
    assert "Standard_ND96isr_H100_v5" in result.stdout
    assert "not usable: retired 2025-09-30" in result.stdout


def test_saved_outputs_are_readable_by_their_owner_only(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text("old")
    path.chmod(0o644)
    _save_private(path, '{"ssh_private_key": "x"}\n')
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == '{"ssh_private_key": "x"}\n'


def test_a_save_that_fails_midway_keeps_the_outputs_saved_before(tmp_path):
    """The old file was removed first, then written: a full disk (here a file size limit)
    left neither the old outputs nor the new ones whole."""
    path = tmp_path / "cluster.json"
    path.write_text('{"old": 1}\n')
    code = (
        "import resource, signal, sys; from pathlib import Path; "
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64)); "
        "from dtrun.cli.stack import _save_private; "
        "_save_private(Path(sys.argv[1]), 'x' * 1000)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=False
    )
    assert "OutputDirError" in done.stderr, done.stderr  # cannot write: File too large
    assert path.read_text() == '{"old": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.json"]  # no partial file left


def v3(**change: object) -> dict[str, object]:
    values: dict[str, object] = json.loads((OUTPUTS / "v3-h100-azurefiles-expiry.json").read_text())
    in_5h = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=5, minutes=1)
    return values | {"expires_at": in_5h.strftime("%Y-%m-%dT%H:%M:%SZ")} | change


def test_outputs_say_when_the_stack_removes_itself_and_how_to_move_it(monkeypatch):
    monkeypatch.setattr(azure_stack, "outputs", lambda name: Outputs(v3(), frozenset()))
    result = runner.invoke(app, ["outputs", "--stack", "dev"])
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("expiry deletes the GPU scale set at ")
    assert "(in 5 h 00 min) or after 60 min without an SSH connection to the head" in last
    assert last.endswith("`dtrun extend --stack dev --hours N` moves the deadline")


def test_up_warns_before_the_update_when_the_stack_has_no_deadline(monkeypatch):
    spec = cluster_spec({"adminCidrs": ["203.0.113.4/32"], "ttlHours": 0}, today=None)

    def up(name, on_output, on_spec):
        on_spec(spec)
        return Outputs(v3(expires_at=None), frozenset())

    monkeypatch.setattr(azure_stack, "up", up)
    result = runner.invoke(app, ["up", "--stack", "dev"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: dtrun:ttlHours is 0, so this cluster has no deadline; it removes itself "
        "only after 60 idle minutes" in result.stderr
    )
    assert "expiry deletes the GPU scale set after 60 min without" in result.stdout


def test_extend_prints_the_new_deadline(monkeypatch):
    asked = []

    def extend(name, hours, on_output):
        asked.append((name, hours))
        return Outputs(v3(), frozenset())

    monkeypatch.setattr(azure_stack, "extend", extend)
    result = runner.invoke(app, ["extend", "--stack", "dev", "--hours", "5"])
    assert result.exit_code == 0, result.output
    assert asked == [("dev", 5.0)]
    assert "(in 5 h 00 min)" in result.stdout


@pytest.mark.parametrize("hours", ["0", "-2", "721"])
def test_extend_refuses_hours_that_are_no_deadline_before_pulumi_runs(no_pulumi_cli, hours):
    result = runner.invoke(app, ["extend", "--stack", "dev", "--hours", hours])
    assert result.exit_code == 2
    assert f"--hours {float(hours):g} is not a time to expire in" in result.stderr


def test_a_bench_on_a_stack_says_when_it_expires_but_not_for_stacks_made_before_expiry():
    new = parse_outputs(v3(), "v3")
    assert (expiry_notice("dev", new) or "").startswith("expiry deletes the GPU scale set at")
    old = parse_outputs(json.loads((OUTPUTS / "v2-h100-azurefiles-slurm.json").read_text()), "v2")
    assert expiry_notice("dev", old) is None


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (
            {},
            "after expiry (it deletes the GPU scale set only), these still bill until "
            "`dtrun down --stack dev`: the head VM Standard_D4s_v5",
        ),
        (
            {"expiryAction": "group"},
            "after expiry: nothing of this cluster bills (it deletes the whole resource group)",
        ),
    ],
    ids=["scaleset", "group"],
)
def test_up_says_what_still_bills_after_expiry(monkeypatch, settings, said):
    spec = cluster_spec({"adminCidrs": ["203.0.113.4/32"], **settings}, today=None)

    def up(name, on_output, on_spec):
        on_spec(spec)
        return Outputs(v3(), frozenset())

    monkeypatch.setattr(azure_stack, "up", up)
    result = runner.invoke(app, ["up", "--stack", "dev"])
    assert result.exit_code == 0, result.output
    assert said in " ".join(result.stdout.split())
    if not settings:
        assert "public IP, and the Azure Files premium share" in " ".join(result.stdout.split())


class HalfDestroyed:
    """A stack whose destroy removes some resources, then fails (a lock, a timeout)."""

    def __init__(self) -> None:
        self.resources = [
            {"type": f"azure-native:{kind}", "urn": f"urn::{name}", "custom": True}
            for kind, name in (
                ("resources:ResourceGroup", "rg"),
                ("compute:VirtualMachine", "head"),
                ("compute:VirtualMachineScaleSet", "gpu"),
            )
        ]

    def export_stack(self):
        from types import SimpleNamespace

        return SimpleNamespace(deployment={"resources": list(self.resources)})

    def destroy(self, on_output, color):
        from pulumi.automation import errors

        self.resources.pop()  # the scale set went; the head and the group did not
        raise errors.CommandError(
            SimpleCommandResult("error: deleting VM head: ScopeLocked")  # type: ignore[arg-type]
        )


class SimpleCommandResult:
    def __init__(self, stderr: str) -> None:
        self.stdout, self.stderr, self.code = "", stderr, 255

    def __str__(self) -> str:
        return self.stderr


def test_a_destroy_that_fails_half_way_lists_what_still_bills(monkeypatch):
    monkeypatch.setattr(azure_stack, "_select", lambda stack, create: HalfDestroyed())
    result = runner.invoke(app, ["down", "--stack", "dev"])
    assert result.exit_code == 1
    out = result.stdout
    assert "2 resources still exist after the failed destroy (still billing):" in out
    assert "  azure-native:compute:VirtualMachine head" in out
    assert "VirtualMachineScaleSet" not in out  # it went
    assert "run `dtrun down --stack dev` again" in out
    assert "`dtrun down --stack dev` failed" in result.stderr
    assert "Traceback" not in result.output


def test_a_stack_deadline_output_that_is_no_time_is_said_without_a_traceback(monkeypatch, tmp_path):
    # A stack whose expires_at output is no time (another program's stack, one edited) made
    # `dtrun outputs` end in ExpiryError's traceback (exit 1) after --save had written the file.
    values = v3(expires_at="soon\x1b[2J", idle_minutes=True)
    monkeypatch.setattr(azure_stack, "outputs", lambda name: Outputs(values, frozenset()))
    saved = tmp_path / "cluster.json"
    result = runner.invoke(app, ["outputs", "--stack", "dev", "--save", str(saved)])
    assert result.exit_code == 0, result.output
    assert result.exception is None
    assert "expires_at is 'soon\\x1b[2J', not an ISO 8601 time" in result.stdout
    assert "\x1b" not in result.stdout
    assert f"saved to {saved}" in result.stdout


def test_a_boolean_idle_minutes_output_is_no_idle_rule(monkeypatch):
    values = v3(idle_minutes=True)
    monkeypatch.setattr(azure_stack, "outputs", lambda name: Outputs(values, frozenset()))
    result = runner.invoke(app, ["outputs", "--stack", "dev"])
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert "True min" not in last
    assert last.startswith("expiry deletes the GPU scale set at ")
