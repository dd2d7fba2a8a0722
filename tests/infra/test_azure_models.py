"""Every resource the program declares, read by Azure's own SDK models for the API version
pulumi-azure-native sends (tests/infra/azure_models.py): no unknown property, no missing required
one, no value outside an enum or a constraint, every type right."""

from __future__ import annotations

import copy
import datetime
from functools import cache
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dtrun.azure.config import cluster_spec
from dtrun.spec.cluster import ClusterSpec
from tests.infra.azure_models import DESCRIBED, api_version_sent, check, sdk_api_versions
from tests.infra.harness import Declared, Program, run

TODAY = datetime.date(2026, 11, 23)
ADMIN = "203.0.113.4/32"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
OWN_KEY = (
    Ed25519PrivateKey.generate()
    .public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode()
)

# Each setting that changes what the program declares, or how: storage kinds (and Lustre's
# SKUs), the scheduler, Spot, expiry off or either action, and one size of each family.
SETTINGS: dict[str, dict[str, object]] = {
    "azurefiles-h100": {},
    "netapp": {"storageKind": "netapp", "storageSizeGib": 4096},
    "lustre-250": {"storageKind": "lustre", "storageSizeGib": 8192, "zone": "1"},
    "lustre-40": {
        "storageKind": "lustre", "lustreSku": "AMLFS-Durable-Premium-40", "storageSizeGib": 49152,
        "zone": "3",
    },
    "zonal-nodes": {"zone": "2"},
    "slurm": {"scheduler": "slurm"},
    "spot": {"spot": True, "spotMaxPrice": "12.5"},
    "expiry-off": {"ttlHours": 0, "idleMinutes": 0},
    "expiry-group": {"expiryAction": "group"},
    "v100-ndv2": {"vmSize": "Standard_ND40rs_v2"},
    "a100-ndv4": {"vmSize": "Standard_ND96asr_v4"},
    "h200": {"vmSize": "Standard_ND96isr_H200_v5"},
    "mi300x": {"vmSize": "Standard_ND96isr_MI300X_v5"},
    "hpc-hb": {"vmSize": "Standard_HB176rs_v4", "nodeCount": 100},
    "own-key": {"sshPublicKey": OWN_KEY},
}  # fmt: skip


def cluster(**settings: object) -> ClusterSpec:
    return cluster_spec({"adminCidrs": [ADMIN], **settings}, today=TODAY)


@cache
def program(name: str) -> Program:
    return run(cluster(**SETTINGS[name]))


def azure_resources(p: Program) -> list[Declared]:
    return [d for d in p.resources if d.type.startswith("azure-native:")]


def one(p: Program, token: str) -> Declared:
    return next(d for d in p.resources if d.type == token)


@pytest.mark.parametrize("name", SETTINGS)
def test_every_resource_is_what_azures_model_of_its_api_version_accepts(name):
    problems = [
        str(problem)
        for resource in azure_resources(program(name))
        for problem in check(resource.type, resource.name, resource.inputs)
    ]
    assert problems == []


def test_every_azure_type_the_program_declares_is_described():
    declared = {d.type for name in SETTINGS for d in azure_resources(program(name))}
    assert declared <= set(DESCRIBED)


@pytest.mark.parametrize("token", DESCRIBED)
def test_the_described_api_version_is_the_one_pulumi_azure_native_sends(token):
    assert api_version_sent(token) == DESCRIBED[token].api_version


@pytest.mark.parametrize("token", DESCRIBED)
def test_the_sdk_models_are_those_of_that_api_version(token):
    described = DESCRIBED[token]
    assert sdk_api_versions(token) == {described.model_version or described.api_version}


# The checker, shown to fail: each planted mistake is reported once, with the field's path.


def planted(name: str, token: str) -> dict[str, Any]:
    return copy.deepcopy(one(program(name), token).inputs)


def found(token: str, inputs: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in check(token, "planted", inputs)]


def test_an_unknown_field_deep_in_the_body_is_reported_with_its_path():
    inputs = planted("azurefiles-h100", VMSS)
    inputs["virtualMachineProfile"]["osProfile"]["customDataBase64"] = "Zm9v"
    assert found(VMSS, inputs) == [
        (
            "virtualMachineProfile.osProfile.customDataBase64",
            "unknown to VirtualMachineScaleSetOSProfile (did you mean 'customData'?)",
        )
    ]


def test_a_value_outside_the_enum_is_reported_and_case_is_not():
    inputs = planted("azurefiles-h100", VMSS)
    inputs["upgradePolicy"]["mode"] = "manual"  # Azure's enums ignore case
    assert found(VMSS, inputs) == []
    inputs["orchestrationMode"] = "Flex"
    assert found(VMSS, inputs) == [("orchestrationMode", "'Flex' is none of Uniform, Flexible")]


def test_a_missing_required_field_is_reported():
    inputs = planted("netapp", "azure-native:netapp:CapacityPoolVolume")
    del inputs["subnetId"]
    problems = found("azure-native:netapp:CapacityPoolVolume", inputs)
    assert problems == [("subnetId", "required by Volume")]


def test_a_wrong_type_is_reported():
    inputs = planted("azurefiles-h100", VMSS)
    inputs["singlePlacementGroup"] = "true"
    inputs["sku"]["capacity"] = 2.5
    assert sorted(found(VMSS, inputs)) == [
        ("singlePlacementGroup", "'true' is not a boolean"),
        ("sku.capacity", "2.5 is not an integer"),
    ]


def test_a_constraint_of_the_api_version_is_reported():
    token = "azure-native:storagecache:AmlFilesystem"
    inputs = planted("lustre-250", token)
    inputs["maintenanceWindow"]["timeOfDayUTC"] = "24:00"
    [(path, message)] = found(token, inputs)
    assert path == "maintenanceWindow.timeOfDayUTC"
    assert message.startswith("'24:00' breaks pattern")


def test_a_read_only_field_is_reported():
    inputs = planted("azurefiles-h100", VMSS)
    inputs["timeCreated"] = "2026-11-23T00:00:00Z"
    assert found(VMSS, inputs) == [
        ("timeCreated", "read-only in VirtualMachineScaleSet: Azure ignores it")
    ]


def test_a_type_no_model_describes_is_reported():
    [problem] = check("azure-native:compute:Gallery", "g", {"location": "eastus"})
    assert "no SDK model describes this type" in problem.message
