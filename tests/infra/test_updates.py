"""What a `pulumi up` on a running stack changes: Azure cannot update a single VM's custom data,
and a scale set's instances keep theirs until reimaged (docs/azure.md "What an update changes")."""

from __future__ import annotations

import datetime

import pytest
import yaml

from dtrun.azure.config import cluster_spec
from dtrun.infra.cloudinit import SLURM_STAGED
from dtrun.infra.head import CUSTOM_DATA_PATH
from tests.infra.harness import Program, run

TODAY = datetime.date(2026, 11, 23)
BASE = {"adminCidrs": ["203.0.113.4/32"], "scheduler": "slurm", "ttlHours": 24}


def program(**settings: object) -> Program:
    return run(cluster_spec({**BASE, **settings}, today=TODAY))


def head_boot(p: Program) -> dict[str, object]:
    """The head's cloud-init without what the mocks make afresh at each run (keys)."""
    document: dict[str, object] = yaml.safe_load(p.cloud_init(":VirtualMachine"))
    document.pop("ssh_keys")
    written: list[dict[str, str]] = document.pop("write_files")  # type: ignore[assignment]
    document["write_files"] = [f for f in written if f["path"] != f"{SLURM_STAGED}/munge.key.b64"]
    return document


@pytest.mark.parametrize(
    "change",
    [
        {"nodeCount": 37},
        {"pythonPackages": ["torch==2.6.0", "numpy", "deepspeed"]},
        {"expiryAction": "group"},
        {"idleMinutes": 90},
    ],
    ids=lambda change: next(iter(change)),
)
def test_scaling_packages_and_expiry_rules_leave_the_heads_custom_data_as_it_was(change):
    assert head_boot(program(**change)) == head_boot(program())


def test_the_heads_custom_data_is_replaced_when_it_changes_not_updated():
    p = program()
    options = p.options["head-vm"]
    assert options.replace_on_changes == [CUSTOM_DATA_PATH]
    # The path names the input Azure refuses to update: osProfile.customData.
    inputs: object = p.one(":VirtualMachine").inputs
    for key in CUSTOM_DATA_PATH.split("."):
        assert isinstance(inputs, dict) and key in inputs
        inputs = inputs[key]
    assert isinstance(inputs, str) and inputs


def test_the_package_list_reaches_the_nodes_only():
    p = program(pythonPackages=["torch==2.6.0", "numpy"])
    assert "torch==2.6.0" in p.cloud_init(":VirtualMachineScaleSet")
    assert "torch" not in p.cloud_init(":VirtualMachine")
