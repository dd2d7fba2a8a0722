"""Stack configuration -> ClusterSpec, validated. Pure, but for reading Pulumi.yaml's schema.

The keys, types and defaults come from the `config:` block of Pulumi.yaml, so the Pulumi
program, `dtrun up`'s early check and the Pulumi CLI all agree on them.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TypeVar

import yaml

from dtrun.azure.catalog import Image, check_node_count, get_size
from dtrun.azure.expiry import expiry_spec
from dtrun.azure.settingcheck import (
    NAMESPACE,
    ConfigError,
    admin_cidrs,
    check_admin_user,
    check_head_vm_size,
    check_location,
    check_mount_path,
    check_prefix,
    check_public_key,
    check_python_packages,
    check_spot_price,
    check_tags,
    setting_error,
    vnet_cidr,
)
from dtrun.locations import project_dir
from dtrun.spec.cluster import ClusterSpec, Scheduler, StorageKind, StorageSpec

PROJECT_FILE = project_dir() / "Pulumi.yaml"


# Azure Managed Lustre SKUs: capacity in TiB is a positive multiple of the step (docs/facts.md §4),
# up to the SKU's maximum ("Throughput configurations" in Azure's create-file-system-portal page:
# 768 TiB for -40, 128 TiB for the others; more only by support request).
LUSTRE_STEP_TIB = {
    "AMLFS-Durable-Premium-40": 48,
    "AMLFS-Durable-Premium-125": 16,
    "AMLFS-Durable-Premium-250": 8,
    "AMLFS-Durable-Premium-500": 4,
}
LUSTRE_MAX_TIB = {
    "AMLFS-Durable-Premium-40": 768,
    "AMLFS-Durable-Premium-125": 128,
    "AMLFS-Durable-Premium-250": 128,
    "AMLFS-Durable-Premium-500": 128,
}
# The file system lives in dtrun's /24 Lustre subnet, which Azure sizes for 96 to 196 TiB
# (Azure Managed Lustre prerequisites, "Network size requirements": 200 TiB and up need a /23).
LUSTRE_SUBNET_MAX_TIB = 196
ZONES = ("1", "2", "3")
AZURE_FILES_GIB = (100, 102400)  # premium file share quota limits
_Choice = TypeVar("_Choice", bound=StrEnum)


@dataclass(frozen=True)
class Setting:
    key: str  # without the namespace: nodeCount
    type: str  # string, integer, boolean, array
    default: object  # None: required
    description: str


@cache
def schema(project_file: Path = PROJECT_FILE) -> dict[str, Setting]:
    """The settings Pulumi.yaml declares under the dtrun: namespace."""
    declared = yaml.safe_load(project_file.read_text())["config"]
    settings = {}
    for name, spec in declared.items():
        key = name.removeprefix(f"{NAMESPACE}:")
        settings[key] = Setting(key, spec["type"], spec.get("default"), spec["description"])
    return settings


def _a(kind: str) -> str:
    """The type with its article: an integer, an array, a string, a boolean."""
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _ascii_int(raw: str) -> int:
    """int() takes '٤', ' 4' and '1_000' too: a stack file's integer is ASCII digits."""
    if not re.fullmatch(r"-?[0-9]+", raw):
        raise ValueError(raw)
    return int(raw)


def _coerce(setting: Setting, raw: object) -> object:
    """Values read back from a stack file are strings; turn them into the declared type."""
    if not isinstance(raw, str) or setting.type == "string":
        return raw
    try:
        if setting.type == "integer":
            return _ascii_int(raw)
        if setting.type == "boolean":
            return {"true": True, "false": False}[raw.lower()]
        return json.loads(raw)
    except (ValueError, KeyError, RecursionError):
        raise setting_error(
            setting.key, f"is {raw!r}, not {_a(setting.type)}", f"set it to {_a(setting.type)}"
        ) from None


def _typed(setting: Setting, value: object) -> object:
    expected: dict[str, Callable[[object], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
    }
    if not expected[setting.type](value):
        raise setting_error(
            setting.key, f"is {value!r}, not {_a(setting.type)}", f"set it to {_a(setting.type)}"
        )
    return value


def resolve(values: Mapping[str, object]) -> dict[str, object]:
    """Declared defaults overlaid with ``values`` (keys with or without 'dtrun:'), type-checked."""
    settings = schema()
    given = {key.removeprefix(f"{NAMESPACE}:"): value for key, value in values.items()}
    for key in given:
        if key not in settings:
            import difflib  # only for a "did you mean"

            close = difflib.get_close_matches(key, list(settings), n=1)
            hint = f"did you mean {NAMESPACE}:{close[0]}?" if close else "see Pulumi.yaml"
            raise ConfigError(f"{NAMESPACE}:{key} is not a dtrun setting", fix=hint)
    resolved: dict[str, object] = {}
    for key, setting in settings.items():
        if key in given:
            resolved[key] = _typed(setting, _coerce(setting, given[key]))
        elif setting.default is None:
            raise setting_error(
                key,
                "must be set",
                f"pulumi config set --path '{key}[0]' ... ({setting.description})",
            )
        else:
            resolved[key] = setting.default
    return resolved


def cluster_spec(
    values: Mapping[str, object],
    *,
    today: datetime.date | None = None,
    now: datetime.datetime | None = None,
) -> ClusterSpec:
    """Validate the stack settings and return the cluster they describe (``now``: see
    expiry_spec)."""
    v = resolve(values)
    size = get_size(str(v["vmSize"]), today=today)
    node_count = int(str(v["nodeCount"]))
    check_node_count(node_count)
    image = _image(str(v["image"]) or size.image.urn)
    storage = _storage(v)
    return ClusterSpec(
        name_prefix=check_prefix(str(v["namePrefix"])),
        location=check_location(str(v["location"])),
        vm_size=size.name,
        node_count=node_count,
        admin_user=check_admin_user(str(v["adminUser"])),
        admin_cidrs=admin_cidrs(_strings(v["adminCidrs"]), bool(v["allowSshFromInternet"])),
        ssh_public_key=check_public_key(str(v["sshPublicKey"])),
        storage=storage,
        spot=bool(v["spot"]),
        spot_max_price=check_spot_price(str(v["spotMaxPrice"])),
        image=image,
        head_vm_size=check_head_vm_size(str(v["headVmSize"])),
        vnet_cidr=vnet_cidr(str(v["vnetCidr"])),
        tags=check_tags(_strings(v["tags"])),
        python_packages=check_python_packages(_strings(v["pythonPackages"])),
        scheduler=_choice("scheduler", Scheduler, v["scheduler"]),
        expiry=expiry_spec(
            int(str(v["ttlHours"])),
            int(str(v["idleMinutes"])),
            str(v["expiryAction"]),
            str(v["expiresAt"]),
            now,
        ),
        zone=_zone(str(v["zone"]), storage),
    )


def _image(urn: str) -> str:
    """An Ubuntu image's URN: the boot scripts install with apt (docs/facts.md §2)."""
    image = Image.parse(urn)
    if "ubuntu" not in image.offer.lower():
        raise ConfigError(
            f"{NAMESPACE}:image is {urn!r}, which is not an Ubuntu image",
            why="dtrun's cloud-init installs with apt and expects Ubuntu's packages; AlmaLinux "
            "and other marketplace images also need a purchase plan and accepted terms",
            fix="leave dtrun:image unset for the size's Ubuntu HPC image, or name an Ubuntu one "
            "(e.g. microsoft-dsvm:ubuntu-hpc:2204:latest)",
        )
    return urn


def _choice(key: str, choices: type[_Choice], value: object) -> _Choice:
    """One of an enum's values, or one message naming them all."""
    try:
        return choices(str(value))
    except ValueError:
        names = ", ".join(choice.value for choice in choices)
        raise setting_error(key, f"is {value!r}", f"use one of {names}") from None


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _storage(v: Mapping[str, object]) -> StorageSpec:
    kind = _choice("storageKind", StorageKind, v["storageKind"])
    size = int(str(v["storageSizeGib"]))
    sku = str(v["lustreSku"])
    if kind is StorageKind.AZURE_FILES and not AZURE_FILES_GIB[0] <= size <= AZURE_FILES_GIB[1]:
        raise setting_error(
            "storageSizeGib",
            f"is {size}; an Azure Files premium share holds 100 to 102400 GiB",
            "set a size in that range",
        )
    if kind is StorageKind.NETAPP and (size < 1024 or size % 1024):
        raise setting_error(
            "storageSizeGib",
            f"is {size}; NetApp capacity pools grow in whole TiB (1024 GiB), from 1 TiB",
            f"use {max(1024, -(-size // 1024) * 1024)}",
        )
    if kind is StorageKind.LUSTRE:
        _lustre(sku, size)
    path = check_mount_path(str(v["mountPath"]), str(v["adminUser"]))
    return StorageSpec(kind=kind, size_gib=size, mount_path=path, lustre_sku=sku)


def _lustre(sku: str, size_gib: int) -> None:
    if sku not in LUSTRE_STEP_TIB:
        raise setting_error("lustreSku", f"is {sku!r}", f"use one of {', '.join(LUSTRE_STEP_TIB)}")
    step = LUSTRE_STEP_TIB[sku]
    if size_gib <= 0 or size_gib % 1024 or (size_gib // 1024) % step:
        raise setting_error(
            "storageSizeGib",
            f"is {size_gib} GiB; {sku} comes in steps of {step} TiB ({step * 1024} GiB)",
            f"use a multiple of {step * 1024}, e.g. {step * 1024}",
        )
    largest = min(LUSTRE_MAX_TIB[sku], LUSTRE_SUBNET_MAX_TIB) // step * step
    if size_gib // 1024 > largest:
        why = (
            f"{sku} holds at most {LUSTRE_MAX_TIB[sku]} TiB"
            if LUSTRE_MAX_TIB[sku] <= LUSTRE_SUBNET_MAX_TIB
            else f"dtrun's /24 Lustre subnet fits a file system of at most "
            f"{LUSTRE_SUBNET_MAX_TIB} TiB"
        )
        raise setting_error(
            "storageSizeGib",
            f"is {size_gib} GiB ({size_gib // 1024} TiB); {why}",
            f"use at most {largest * 1024} ({largest} TiB)",
        )


def _zone(zone: str, storage: StorageSpec) -> str:
    """The nodes' and the file system's availability zone. Managed Lustre is zonal, and Azure
    advises putting it "in the same region and availability zone as your client machines"
    (create-file-system-portal), so Lustre needs the zone named and the nodes join it."""
    if zone and zone not in ZONES:
        raise setting_error("zone", f"is {zone!r}", "use 1, 2 or 3, or leave it empty")
    if not zone and storage.kind is StorageKind.LUSTRE:
        raise setting_error(
            "zone",
            "is empty; Azure Managed Lustre is zonal and its clients belong in its zone",
            "pulumi config set dtrun:zone 1 (a zone where the region offers dtrun:vmSize: "
            "az vm list-skus --location LOCATION --size SIZE --zone)",
        )
    return zone
