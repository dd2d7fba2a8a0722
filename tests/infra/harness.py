"""Run the Pulumi program under pulumi.runtime mocks and keep every resource it declared."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pulumi.runtime import rpc

from dtrun.infra.program import build
from dtrun.spec.cluster import ClusterSpec


@dataclass(frozen=True)
class Declared:
    type: str
    name: str
    inputs: dict[str, Any]  # camelCase keys, as the engine receives them, secrets unwrapped
    custom: bool
    secret_inputs: frozenset[str]  # top-level inputs the engine received as secrets


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def _unwrap(value: Any) -> Any:
    if _is_secret(value):
        return _unwrap(value["value"])
    if isinstance(value, dict):
        return {key: _unwrap(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unwrap(item) for item in value]
    return value


def _ed25519(_: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
    """A real key pair, as the TLS provider would make (the provider itself does not run)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return {"privateKeyOpenssh": private, "publicKeyOpenssh": public + "\n"}


def _nic(args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
    configs = [dict(c, privateIPAddress="10.42.0.4") for c in args.inputs["ipConfigurations"]]
    return {"ipConfigurations": configs}


def _vm(args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
    """Azure answers a VM's user-assigned identities (a list of IDs given) as a map by ID."""
    identity = args.inputs.get("identity")
    if not identity:
        return {}
    return {"identity": {**identity, "userAssignedIdentities": {
        key: {} for key in identity.get("userAssignedIdentities", [])
    }}}  # fmt: skip


# What Azure computes for a resource, where the program reads it back.
COMPUTED: dict[str, Callable[[pulumi.runtime.MockResourceArgs], dict[str, Any]]] = {
    "tls:index/privateKey:PrivateKey": _ed25519,
    "azure-native:network:PublicIPAddress": lambda _: {"ipAddress": "20.0.113.10"},
    "azure-native:network:NetworkInterface": _nic,
    "azure-native:compute:VirtualMachine": _vm,
    # as Azure writes it: seven fractional digits and an offset
    "azure-native:compute:VirtualMachineScaleSet": lambda _: {"timeCreated": SCALE_SET_CREATED},
    "azure-native:netapp:CapacityPoolVolume": lambda _: {
        "mountTargets": [{"ipAddress": "10.42.2.4", "fileSystemId": "fs-1"}]
    },
    "azure-native:storagecache:AmlFilesystem": lambda _: {
        "clientInfo": {"mgsAddress": "10.42.3.5", "mountCommand": "mount -t lustre ..."}
    },
    "azure-native:managedidentity:UserAssignedIdentity": lambda _: {
        "clientId": IDENTITY_CLIENT_ID,
        "principalId": IDENTITY_PRINCIPAL_ID,
    },
}
SCALE_SET_CREATED = "2026-11-23T09:58:41.4632871+00:00"
SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
IDENTITY_CLIENT_ID = "11111111-1111-4111-8111-111111111111"
IDENTITY_PRINCIPAL_ID = "22222222-2222-4222-8222-222222222222"


def mock_id(typ: str, name: str) -> str:
    """A resource group's ID as Azure writes it (the expiry role's scope and its subscription
    come from it); other resources keep a plain mock ID."""
    if typ == "azure-native:resources:ResourceGroup":
        return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{name}mock"
    return f"/mock/{typ}/{name}"


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.declared: list[Declared] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        secret = frozenset(key for key, value in args.inputs.items() if _is_secret(value))
        inputs = _unwrap(dict(args.inputs))
        self.declared.append(Declared(args.typ, args.name, inputs, bool(args.custom), secret))
        state = {"name": f"{args.name}mock", **args.inputs}
        state.update(COMPUTED.get(args.typ, lambda _: {})(args))
        return mock_id(args.typ, args.name), state

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None  # the program makes no provider calls


@dataclass
class Program:
    declared: list[Declared]
    outputs: dict[str, Any] = field(default_factory=dict)
    # Each resource's options as the program gave them, by name (Pulumi hands the mocks none).
    options: dict[str, pulumi.ResourceOptions] = field(default_factory=dict)

    def of_type(self, suffix: str) -> list[Declared]:
        return [d for d in self.declared if d.type.endswith(suffix)]

    def one(self, suffix: str) -> Declared:
        found = self.of_type(suffix)
        assert len(found) == 1, f"{len(found)} resources of type {suffix}"
        return found[0]

    @property
    def resources(self) -> list[Declared]:
        """Cloud resources: the custom ones (components are only groupings)."""
        return [d for d in self.declared if d.custom]

    def cloud_init(self, suffix: str) -> str:
        """The decoded custom data of the scale set (":VirtualMachineScaleSet") or head VM."""
        found = self.one(suffix).inputs
        profile = found.get("virtualMachineProfile", found)
        return base64.b64decode(profile["osProfile"]["customData"]).decode()


def run(cluster: ClusterSpec) -> Program:
    # Pulumi's mocks run on the thread's current event loop (asyncio.get_event_loop), which a
    # test that ran asyncio.run before has unset: give this run its own, whatever ran before.
    asyncio.set_event_loop(asyncio.new_event_loop())
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="dtrun", stack="test", preview=False)
    program = Program(mocks.declared)

    def record(args: pulumi.ResourceTransformationArgs) -> None:
        program.options[args.name] = args.opts or pulumi.ResourceOptions()

    pulumi.runtime.register_stack_transformation(record)

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def declare() -> pulumi.Output[None]:
        return pulumi.Output.from_input(build(cluster)).apply(program.outputs.update)

    declare()
    return program
