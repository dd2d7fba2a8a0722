"""infra/__main__.py as `pulumi up` runs it: settings from the stack, clean errors."""

from __future__ import annotations

import json
import runpy
from collections.abc import Iterator
from pathlib import Path

import pulumi
import pytest

from dtrun.infra.config import load_cluster
from tests.infra.harness import RecordingMocks

MAIN = Path(__file__).resolve().parents[2] / "infra" / "__main__.py"


@pytest.fixture
def mocks() -> Iterator[RecordingMocks]:
    recording = RecordingMocks()
    pulumi.runtime.set_mocks(recording, project="dtrun", stack="test", preview=False)
    yield recording
    pulumi.runtime.set_all_config({})


def stack_config(**values: object) -> None:
    pulumi.runtime.set_all_config(
        {f"dtrun:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    )


def test_settings_are_read_from_the_stack_config_with_pulumi_yaml_defaults(mocks):
    stack_config(vmSize="Standard_ND96asr_v4", nodeCount=3, adminCidrs=["203.0.113.4/32"])
    cluster = load_cluster()
    assert (cluster.vm_size, cluster.node_count) == ("Standard_ND96asr_v4", 3)
    assert cluster.storage.mount_path == "/shared"  # a default from Pulumi.yaml


def test_the_program_declares_the_cluster_from_the_stack_config(mocks):
    stack_config(nodeCount=5, adminCidrs=["203.0.113.4/32"])

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def up() -> None:
        runpy.run_path(str(MAIN))

    up()
    [vmss] = [d for d in mocks.declared if d.type.endswith(":VirtualMachineScaleSet")]
    assert vmss.inputs["sku"]["capacity"] == 5


def test_a_bad_setting_stops_the_program_with_one_clean_message(mocks):
    stack_config(adminCidrs=["0.0.0.0/0"])
    with pytest.raises(pulumi.RunError, match="opens SSH to the whole internet"):
        runpy.run_path(str(MAIN))
    assert not mocks.declared


def test_a_deadline_already_past_stops_the_program_before_anything_is_made(mocks):
    stack_config(adminCidrs=["203.0.113.4/32"], expiresAt="2000-01-01T00:00:00Z")
    with pytest.raises(pulumi.RunError, match="dtrun:expiresAt is 2000-01-01T00:00:00Z, which"):
        runpy.run_path(str(MAIN))
    assert not mocks.declared


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [("spot", "on", "a boolean"), ("spot", "yes", "a boolean"), ("spot", "1", "a boolean"),
     ("allowSshFromInternet", "on", "a boolean"), ("nodeCount", "four", "an integer"),
     ("nodeCount", "1_0", "an integer"), ("ttlHours", "1.5", "an integer"),
     ("idleMinutes", "true", "an integer"), ("storageSizeGib", " 1024", "an integer")],
)  # fmt: skip
def test_a_mistyped_setting_stops_the_program_with_dtruns_message(mocks, key, value, kind):
    stack_config(adminCidrs=["203.0.113.4/32"], **{key: value})
    with pytest.raises(pulumi.RunError) as caught:
        runpy.run_path(str(MAIN))
    assert str(caught.value) == (
        f"dtrun:{key} is {value!r}, not {kind}\n  next: set it to {kind}"
    ), caught.value
    assert not mocks.declared
