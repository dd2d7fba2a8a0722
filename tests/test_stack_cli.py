"""`dtrun up/down/outputs/sizes`: clear messages without the Pulumi CLI, stack names, sizes."""

from __future__ import annotations

import stat

import pytest
from typer.testing import CliRunner

from runner.cli.app import app
from runner.cli.stack import _save_private

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def no_pulumi_cli(monkeypatch, tmp_path):
    """A PATH with the system tools but no `pulumi`, whatever this machine has installed."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path))  # and no ~/.pulumi


@pytest.mark.parametrize("command", ["up", "down", "outputs"])
def test_without_the_pulumi_cli_each_command_says_how_to_install_it_in_one_line(
    no_pulumi_cli, command
):
    result = runner.invoke(app, [command, "--stack", "dev"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "the Pulumi CLI is not installed" in lines[0]
    assert "curl -fsSL https://get.pulumi.com | sh" in lines[0]
    assert f"dtrun {command} --stack dev" in lines[0]
    assert "Traceback" not in result.output


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
