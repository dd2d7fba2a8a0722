"""Each option declared once (issue 39, part 2): --drain-failing is the Slurm engine's option,
which bench's health gate and `dtrun check` read from the options the cluster was chosen by."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.engines.base import Cluster, ClusterChoice
from dtrun.engines.registry import EngineOptions
from dtrun.engines.slurm.engine import SlurmEngine
from dtrun.engines.slurm.executor import SlurmExecutor
from dtrun.engines.slurm.shell import SlurmShell
from dtrun.spec.cluster import Inventory

runner = CliRunner(env={"COLUMNS": "200"})


def _help(command: str, flag: str) -> str:
    from typer.main import get_command

    group = get_command(app)
    params = group.commands[command].params  # type: ignore[attr-defined]
    (param,) = [p for p in params if flag in p.opts]
    return " ".join(param.help.split())


def test_drain_failing_is_one_option_with_one_help_in_bench_and_check():
    assert _help("bench", "--drain-failing") == _help("check", "--drain-failing")


@pytest.mark.parametrize("command", [["run"], ["exec"]])
def test_drain_failing_is_refused_where_nothing_is_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
):
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, [*command, "--slurm", "--drain-failing", "--", "true"])
    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert (
        "--drain-failing drains the nodes `dtrun bench`'s health gate or `dtrun check` finds"
        in said
    )
    assert "Traceback" not in done.output and not list(tmp_path.iterdir())


class Scontrol(SlurmShell):
    """Slurm's commands, answered 0 and kept, run nowhere."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        self.ran.append(list(command))
        return subprocess.CompletedProcess(list(command), 0, "", "")


@pytest.mark.parametrize("drain", [False, True])
def test_the_slurm_engine_drains_as_the_options_it_was_chosen_by_say(
    fixed_inventory: Inventory, drain: bool
):
    shell = Scontrol()
    options = EngineOptions(slurm=True, drain_failing=drain)
    cluster = Cluster(fixed_inventory, SlurmExecutor(shell, "7"), ClusterChoice(options),
                      SlurmEngine())  # fmt: skip
    lines = cluster.engine.after_check(cluster, {"gpu02": "dtrun check c1: slow"})
    assert lines[0] == "next Slurm job: --exclude gpu02"
    assert (len(lines), len(shell.ran)) == ((2, 1) if drain else (1, 0))
    assert (cluster.engine.drain(cluster, "r1") is not None) is drain


def test_a_cluster_choice_copies_no_option_and_reads_them_from_its_options():
    from dataclasses import fields

    from dtrun.cluster.readiness import Patience

    copied = {f.name for f in fields(ClusterChoice)} & {f.name for f in fields(EngineOptions)}
    assert copied == set()
    given = EngineOptions(local_nodes=5, hosts="h1:4", connect_timeout=6.0)
    assert ClusterChoice(given, nodes=2).local_nodes == 5  # --local-nodes wins
    assert ClusterChoice(EngineOptions(), nodes=2).local_nodes == 2  # else the command's need
    assert ClusterChoice(given).patience == Patience(6.0, 2.0, 2.0, "--connect-timeout")
    assert ClusterChoice().patience == Patience(900.0)  # no options: a stack's patience


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--timeout", "1e308", "--timeout must be a number of seconds above 0 and at most"),
        ("--port", "65535", "--port must be at least 1 and at most 65,534"),
        ("--procs-per-node", "0", "--procs-per-node must be at least 1 and at most 1,024"),
    ],
)
def test_check_refuses_a_number_past_its_fields_range_before_any_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, value: str, said: str
):
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["check", flag, value])
    assert done.exit_code == 2, done.output
    assert said in " ".join(done.output.split())
    assert "Traceback" not in done.output and not list(tmp_path.iterdir())
