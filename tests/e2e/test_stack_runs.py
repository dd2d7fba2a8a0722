"""`--stack` runs end to end on the loopback sshd cluster, with --teardown and --keep.

The Pulumi CLI cannot run here, so the two Automation API calls (read a stack's outputs,
destroy it) are replaced; reading the registry through the head, SSH, the launch and the
order of the last lines are real.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dtrun.azure import stack as azure_stack
from dtrun.azure.stack import Outputs
from dtrun.cli.app import app
from tests.paths import REPO, TESTS

DATA = TESTS / "data"
RESOURCES = ["azure-native:compute:VirtualMachineScaleSet gpu-vmss", "tls:index:PrivateKey key"]


@pytest.fixture
def loopback_stack(sshd_cluster, tmp_path, monkeypatch):
    """Stack "loop": head 127.0.0.2, two registered nodes 127.0.0.3 and 127.0.0.4."""
    registry = tmp_path / "shared" / ".dtrun" / "nodes"
    registry.mkdir(parents=True)
    for path, address in zip(
        sorted((DATA / "registry").glob("dtrunnode00000[01].json")),
        ("127.0.0.3", "127.0.0.4"),
        strict=True,
    ):
        (registry / path.name).write_text(
            json.dumps(json.loads(path.read_text()) | {"address": address})
        )
    values = json.loads((DATA / "outputs" / "v1-h100-azurefiles-generated-key.json").read_text())
    values |= {
        "head_public_address": "127.0.0.2",
        "ssh_user": sshd_cluster.user,
        "ssh_port": 2222,
        "ssh_private_key": sshd_cluster.key.read_text(),
        "known_hosts": [host.known_hosts_line for host in sshd_cluster.hosts],
        "node_count": 2,
        "mount_path": str(tmp_path / "shared"),
        "registry_path": str(registry),
        "python_bin": str(Path(sys.executable).parent),
    }
    destroyed: list[str] = []

    def down(name: str, on_output: object) -> list[str]:
        destroyed.append(name)
        return RESOURCES

    monkeypatch.setattr(azure_stack, "outputs", lambda name: Outputs(values, frozenset()))
    monkeypatch.setattr(azure_stack, "down", down)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rank.py").write_text("import os\nprint('rank', os.environ['RANK'])\n")
    (tmp_path / "fail.py").write_text("raise SystemExit(3)\n")
    return destroyed


def dtrun(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, list(args))


PROGRAM = ["--", "python", "rank.py"]  # the nodes share this machine and its directory


def test_teardown_destroys_the_stack_after_the_run_and_says_so_last(loopback_stack):
    result = dtrun(
        "run", "--stack", "loop", "--teardown", "--nodes", "2", "--port", "29770", *PROGRAM
    )
    assert result.exit_code == 0, result.output
    assert loopback_stack == ["loop"]
    assert "waiting for the 2 nodes of stack loop to register" in result.output
    assert result.output.strip().splitlines()[-1].strip() == RESOURCES[-1]
    assert "destroyed 2 resources of stack loop; nothing of it bills now" in result.output


def test_teardown_also_happens_after_a_failure_and_comes_after_the_error(loopback_stack):
    failing = ["--", "python", "fail.py"]
    result = dtrun(
        "run", "--stack", "loop", "--teardown", "--nodes", "2", "--port", "29772", *failing
    )
    assert result.exit_code == 1
    assert loopback_stack == ["loop"]
    output = result.output
    assert output.index("error:") < output.index("destroyed 2 resources of stack loop")


def test_without_teardown_the_last_line_says_the_stack_still_bills(loopback_stack):
    result = dtrun("run", "--stack", "loop", "--nodes", "1", "--port", "29774", *PROGRAM)
    assert result.exit_code == 0, result.output
    assert loopback_stack == []
    last = result.output.strip().splitlines()[-1]
    assert "stack loop is still running and billing: 2 x Standard_ND96isr_H100_v5" in last
    assert "dtrun down --stack loop" in last


def _created(created_at: str, **more: object) -> None:
    """The loopback stack as outputs version 4, its scale set created at ``created_at``."""
    values = azure_stack.outputs("loop").values | more | {
        "version": 4, "scheduler": "none", "slurm_partition": None, "expires_at": None,
        "idle_minutes": 0, "expiry_action": None, "nodes_created_at": created_at,
    }  # fmt: skip
    azure_stack.outputs = lambda name: Outputs(values, frozenset())  # type: ignore[assignment]


def test_a_dry_run_says_what_the_nodes_have_billed_since_they_were_created(loopback_stack):
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=90)
    _created(created.strftime("%Y-%m-%dT%H:%M:%SZ"))
    result = dtrun(
        "bench", "--stack", "loop", "--nodes", "1,2", "--dry-run",
        "--price-per-node-hour", "10",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "paid before the sweep" in x)
    assert f"2 nodes from {created:%Y-%m-%dT%H:%M:%S}Z (the nodes were created) to now" in line
    hours = float(line.split("to now: ")[1].split(" node-hours")[0])
    assert hours == pytest.approx(3.0, abs=0.05)  # 2 nodes x 90 min, and the seconds since
    usd = float(line.split("node-hours, $")[1].split(",")[0])
    assert usd == pytest.approx(hours * 10, abs=0.01)  # at --price-per-node-hour
    assert not Path("runs").exists()  # a dry run writes nothing


@pytest.mark.e2e
def test_a_sweep_on_the_stack_records_and_reports_the_time_paid_before_it(loopback_stack):
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=30)
    _created(created.strftime("%Y-%m-%dT%H:%M:%SZ"), gpus_per_node=0)  # gloo on these CPUs
    args = ["bench", "--stack", "loop", "--nodes", "1", "--steps", "3", "--warmup", "1",
            "--repeat", "1", "--procs-per-node", "1", "--no-health-gate", "--quiet",
            "--port", "29776",
            "--price-per-node-hour", "10"]  # fmt: skip
    first = dtrun(*args, "--run-id", "first")
    assert first.exit_code == 0, first.output
    manifest = json.loads(Path("runs/first/manifest.json").read_text())
    before = manifest["paid_before"]
    assert before["since"] == "the nodes were created" and before["nodes"] == 2
    assert 30 * 60 <= before["seconds"] < 40 * 60
    report = Path("runs/first/report.md").read_text()
    assert "| paid before the sweep | " in report and "| billed in all | " in report
    # a second sweep on the same nodes pays only from the first one's last record
    second = dtrun(*args, "--run-id", "second")
    assert second.exit_code == 0, second.output
    again = json.loads(Path("runs/second/manifest.json").read_text())["paid_before"]
    assert again["since"] == "the end of sweep first on the same nodes"
    assert again["seconds"] < 120


@pytest.mark.parametrize(
    "content",
    ["{not json", "[" * 100_000, '["a list"]',
     # a whole entry but for its address given twice: json.loads took the last
     '{"address": "127.0.0.9", ' + (REPO / "tests/data/registry/dtrunnode000000.json")
     .read_text().strip()[1:]],
)  # fmt: skip
def test_a_registry_entry_that_is_not_an_object_is_exit_2_naming_it(
    loopback_stack, tmp_path, content
):
    """The registry is written by the nodes' cloud-init: a damaged file there is named, not
    a traceback."""
    (tmp_path / "shared" / ".dtrun" / "nodes" / "dtrunnode000009.json").write_text(content)
    result = dtrun("exec", "--stack", "loop", "--", "true")
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "dtrunnode000009.json on the head node is not a dtrun node registry entry" in said
    assert "Traceback" not in said


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"ssh_private_key": "not a key"}, "the stack's outputs hold an ssh_private_key dtrun "
         "cannot use: Invalid private key"),
        ({"node_count": 0}, "'node_count' is 0, not a count from 1 to 300"),
    ],
    ids=["key", "node-count"],
)  # fmt: skip
def test_a_stack_whose_outputs_were_edited_is_exit_2_naming_the_output(
    loopback_stack, monkeypatch, change, said
):
    """A stack someone else changed. Before: asyncssh's KeyImportError as a traceback (exit 1);
    a node_count of 0 or -3 ran on whatever had registered, waiting for "the -3 nodes"."""
    values = azure_stack.outputs("loop").values | change
    monkeypatch.setattr(azure_stack, "outputs", lambda name: Outputs(values, frozenset()))
    for command in (("exec", "--stack", "loop", "--", "true"),
                    ("bench", "--stack", "loop", "--dry-run")):  # fmt: skip
        result = dtrun(*command)
        assert result.exit_code == 2, result.output
        assert said in " ".join(result.output.split())
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
