"""Every resource the Pulumi program declares, checked against the models of Azure's own Python
management SDKs for the API version the resource uses (docs/azure.md "How the program is tested
without Azure").

The mocks accept any input. Azure does not: it refuses an unknown property, a missing required
one, a value outside an enum, a string past its maximum length. The SDKs (azure-mgmt-compute,
-network, -storage, ...) are generated from the same REST specifications Azure serves, one module
per API version, and each model class carries what the specification says about its body:
``_attribute_map`` (every property, its REST key and type) and ``_validation`` (required,
read-only, min/max, pattern), and its ``__init__`` names each property's enum. This module walks
a resource's inputs through those models; nothing about a resource's shape is written here.

What is written here, and why:

- ``DESCRIBED``: for each resource type the program uses, the SDK module of the API version
  pulumi-azure-native 3.x sends, and the SDK operation that creates it. The operation's own
  signature says which inputs are URL parameters (``resource_group_name`` -> Pulumi's
  ``resourceGroupName``) and which model is the body. ``api_version_sent`` reads the version
  from the provider's own class, so a provider upgrade that moves a default version fails
  ``test_azure_models.py`` until the SDK pin and this table follow.
- Pulumi's inputs are the body with ``properties`` flattened, as the SDK's models flatten it
  (``x-ms-client-flatten``): an attribute whose REST key is ``properties.virtualMachineProfile``
  is Pulumi's ``virtualMachineProfile``. So a model's Pulumi key is the last segment of its REST
  key, split as the SDK's serializer splits it.
- One shape Pulumi changes on the way: ``userAssignedIdentities`` is a list of identity IDs in
  pulumi-azure-native (since 2.x) and reaches Azure as a map from ID to ``{}``.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import inspect
import re
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any

# Each SDK carries its own copy of one serializer module; any copy splits and checks alike.
from azure.mgmt.compute._serialization import _FLATTEN, Serializer, _decode_attribute_map_key

Model = Any  # a generated model class: each SDK's copy of _serialization.Model


@dataclass(frozen=True)
class Described:
    api_version: str  # what pulumi-azure-native sends for this type
    module: str  # the SDK's package for that version
    operations: str  # its operations class
    create: str  # the method that PUTs the resource
    model_version: str | None = None  # the SDK's, where no release ships api_version


# The SDK pins in pyproject.toml's dev extra hold these modules (each still ships the version):
# azure-mgmt-compute 34.1.0 (v2024_11_01), -network 28.1.0 (2024-05-01 only), -storage 22.2.0
# (v2024_01_01), -netapp 13.4.0 (2024-09-01 only), -storagecache 2.0.0 (2024-03-01 only), -msi
# 7.0.0 (v2023_01_31), -authorization 4.0.0 (v2022_04_01, v2022_05_01_preview), -resource 23.3.0.
DESCRIBED: dict[str, Described] = {
    "azure-native:compute:VirtualMachineScaleSet": Described(
        "2024-11-01", "azure.mgmt.compute.v2024_11_01", "VirtualMachineScaleSetsOperations",
        "begin_create_or_update",
    ),
    "azure-native:compute:VirtualMachine": Described(
        "2024-11-01", "azure.mgmt.compute.v2024_11_01", "VirtualMachinesOperations",
        "begin_create_or_update",
    ),
    "azure-native:compute:ProximityPlacementGroup": Described(
        "2024-11-01", "azure.mgmt.compute.v2024_11_01", "ProximityPlacementGroupsOperations",
        "create_or_update",
    ),
    "azure-native:network:NetworkSecurityGroup": Described(
        "2024-05-01", "azure.mgmt.network", "NetworkSecurityGroupsOperations",
        "begin_create_or_update",
    ),
    "azure-native:network:VirtualNetwork": Described(
        "2024-05-01", "azure.mgmt.network", "VirtualNetworksOperations", "begin_create_or_update"
    ),
    "azure-native:network:Subnet": Described(
        "2024-05-01", "azure.mgmt.network", "SubnetsOperations", "begin_create_or_update"
    ),
    "azure-native:network:PublicIPAddress": Described(
        "2024-05-01", "azure.mgmt.network", "PublicIPAddressesOperations", "begin_create_or_update"
    ),
    "azure-native:network:NetworkInterface": Described(
        "2024-05-01", "azure.mgmt.network", "NetworkInterfacesOperations", "begin_create_or_update"
    ),
    "azure-native:network:NatGateway": Described(
        "2024-05-01", "azure.mgmt.network", "NatGatewaysOperations", "begin_create_or_update"
    ),
    "azure-native:storage:StorageAccount": Described(
        "2024-01-01", "azure.mgmt.storage.v2024_01_01", "StorageAccountsOperations", "begin_create"
    ),
    "azure-native:storage:FileShare": Described(
        "2024-01-01", "azure.mgmt.storage.v2024_01_01", "FileSharesOperations", "create"
    ),
    "azure-native:netapp:Account": Described(
        "2024-09-01", "azure.mgmt.netapp", "AccountsOperations", "begin_create_or_update"
    ),
    "azure-native:netapp:CapacityPool": Described(
        "2024-09-01", "azure.mgmt.netapp", "PoolsOperations", "begin_create_or_update"
    ),
    "azure-native:netapp:CapacityPoolVolume": Described(
        "2024-09-01", "azure.mgmt.netapp", "VolumesOperations", "begin_create_or_update"
    ),
    "azure-native:storagecache:AmlFilesystem": Described(
        "2024-03-01", "azure.mgmt.storagecache", "AmlFilesystemsOperations",
        "begin_create_or_update",
    ),
    "azure-native:managedidentity:UserAssignedIdentity": Described(
        "2023-01-31", "azure.mgmt.msi.v2023_01_31", "UserAssignedIdentitiesOperations",
        "create_or_update",
    ),
    "azure-native:authorization:RoleAssignment": Described(
        "2022-04-01", "azure.mgmt.authorization.v2022_04_01", "RoleAssignmentsOperations", "create"
    ),
    "azure-native:authorization:RoleDefinition": Described(
        "2022-05-01-preview", "azure.mgmt.authorization.v2022_05_01_preview",
        "RoleDefinitionsOperations", "create_or_update",
    ),
    # No azure-mgmt-resource release ships 2024-03-01 (it goes from 2022-09-01 to 2024-07-01):
    # the nearest earlier one describes it. A resource group's body (location, managedBy, tags)
    # is the same in both.
    "azure-native:resources:ResourceGroup": Described(
        "2024-03-01", "azure.mgmt.resource.resources.v2022_09_01", "ResourceGroupsOperations",
        "create_or_update", model_version="2022-09-01",
    ),
}  # fmt: skip

# Pulumi takes these as a list of IDs and sends Azure a map from ID to an empty object.
ID_LISTS_SENT_AS_MAPS = frozenset({"userAssignedIdentities"})
INTEGER_TYPES = frozenset({"int", "long"})
# Enums the SDK itself says are not the list of allowed values: VirtualMachineSizeTypes is
# "deprecated ... The recommended way to get the list of available sizes is using these APIs"
# (its docstring); newer sizes (Standard_D4s_v5, the ND H100 v5) are not in it.
OPEN_ENUMS = frozenset({"VirtualMachineSizeTypes"})


@dataclass(frozen=True)
class Problem:
    resource: str  # "azure-native:compute:VirtualMachineScaleSet gpu-vmss"
    path: str  # virtualMachineProfile.osProfile.customData
    message: str

    def __str__(self) -> str:
        return f"{self.resource}: {self.path or '(body)'}: {self.message}"


@dataclass(frozen=True)
class Body:
    url_parameters: frozenset[str]  # camelCase, as Pulumi names them
    model: type[Model]


def api_version_sent(token: str) -> str:
    """The API version pulumi-azure-native sends for a type token, from its own class
    (``Uses Azure REST API version 2024-11-01.`` in the generated docstring)."""
    _, module, name = token.split(":")
    package = importlib.import_module("pulumi_azure_native." + module.replace("/", "."))
    found = re.search(
        r"Uses Azure REST API version (\S+?)\.(\s|$)", inspect.getsource(getattr(package, name))
    )
    if not found:
        raise LookupError(f"{token}: pulumi-azure-native names no API version")
    return found.group(1)


def sdk_api_versions(token: str) -> set[str]:
    """The API versions the SDK's create operation sends (a long-running one sends from its
    ``_..._initial`` method)."""
    described = DESCRIBED[token]
    operations = getattr(
        importlib.import_module(described.module + ".operations"), described.operations
    )
    initial = "_" + described.create.removeprefix("begin_") + "_initial"
    source = "".join(
        inspect.getsource(getattr(operations, method))
        for method in (described.create, initial)
        if hasattr(operations, method)
    )
    versions = set(re.findall(r'"api-version", (?:self\._api_version or )?"([^"]+)"', source))
    if "self._config.api_version" in source:  # the client's configured default
        versions.add(_configured_api_version(described.module))
    return versions


def arm_type(token: str) -> str | None:
    """The ARM resource type the SDK's create operation PUTs (``Microsoft.Network/virtualNetworks/
    subnets``), read from its request's URL template; None for a resource group and for
    extension resources (``/{scope}/providers/...``), which live in no group."""
    described = DESCRIBED[token]
    operations = getattr(
        importlib.import_module(described.module + ".operations"), described.operations
    )
    initial = "_" + described.create.removeprefix("begin_") + "_initial"
    source = "".join(
        inspect.getsource(getattr(operations, method))
        for method in (described.create, initial)
        if hasattr(operations, method)
    )
    module = sys.modules[operations.__module__]
    [builder] = set(re.findall(r"(build_\w+_request)\(", source))
    [url] = re.findall(r'"template_url",\s*"([^"]+)"', inspect.getsource(getattr(module, builder)))
    if (
        not url.startswith("/subscriptions/{subscriptionId}/resourceGroups/")
        or "/providers/" not in url
    ):
        return None
    namespace, *path = url.split("/providers/", 1)[1].split("/")
    return "/".join([namespace, *path[0::2]])  # the type names, not the names between them


def _configured_api_version(module: str) -> str:
    configuration = importlib.import_module(module + "._configuration")
    [name] = [n for n in vars(configuration) if n.endswith("ClientConfiguration")]
    client = getattr(configuration, name)(credential=object(), subscription_id="0")
    return str(client.api_version)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _models_in(annotation: Any) -> list[type[Model]]:
    return [
        arg
        for arg in typing.get_args(annotation)
        if isinstance(arg, type) and hasattr(arg, "_attribute_map")
    ]


def body_of(token: str) -> Body:
    """The create operation's signature: its model-typed parameter is the body, the others are
    the URL's path parameters (``self`` and keyword-only options aside)."""
    described = DESCRIBED[token]
    operations = getattr(
        importlib.import_module(described.module + ".operations"), described.operations
    )
    signature = inspect.signature(getattr(operations, described.create))
    url: set[str] = set()
    model: type[Model] | None = None
    for name, parameter in signature.parameters.items():
        if name == "self" or parameter.kind is not parameter.POSITIONAL_OR_KEYWORD:
            continue
        found = _models_in(parameter.annotation)
        if found:
            model = found[0]
        else:
            url.add(_camel(name))
    if model is None:
        raise LookupError(f"{described.operations}.{described.create} takes no model")
    return Body(frozenset(url), model)


def _enums(model: type[Model]) -> dict[str, list[type[enum.Enum]]]:
    """Each attribute's enum classes, from the model's ``__init__`` annotations
    (``Optional[Union[str, _models.CachingTypes]]``)."""
    package = sys.modules[model.__module__.rsplit(".", 1)[0]]  # ...models
    hints = typing.get_type_hints(model.__init__, localns={"_models": package})
    found: dict[str, list[type[enum.Enum]]] = {}
    for name, hint in hints.items():
        args = typing.get_args(hint)
        nested = [a for arg in args for a in (typing.get_args(arg) or (arg,))]
        classes = [
            a for a in dict.fromkeys(nested) if isinstance(a, type) and issubclass(a, enum.Enum)
        ]
        if classes and not any(c.__name__ in OPEN_ENUMS for c in classes):
            found[name] = classes
    return found


def _pulumi_keys(model: type[Model]) -> dict[str, str]:
    """Each attribute under the names Pulumi may give it, lowercased: its client name (the
    attribute: the spec's ``x-ms-client-name``, which Pulumi follows: ``enableHttpsTrafficOnly``
    for the REST ``supportsHttpsTrafficOnly``, ``roleType`` for a role's ``properties.type``)
    and, where no client name has it, its REST name (the last segment of its REST key, split by
    the SDK's own decoder: ``properties.osProfile`` -> ``osProfile``)."""
    keys: dict[str, str] = {}
    for attribute in model._attribute_map:
        if keys.setdefault(attribute.replace("_", "").lower(), attribute) != attribute:
            raise LookupError(f"{model.__name__}: two attributes are called {attribute!r}")
    for attribute, description in model._attribute_map.items():
        rest = _decode_attribute_map_key(_FLATTEN.split(description["key"])[-1])
        keys.setdefault(rest.lower(), attribute)
    return keys


class Checker:
    """Walks one resource's inputs through its body model, collecting every problem."""

    def __init__(self, resource: str, models: types.ModuleType) -> None:
        self.resource = resource
        self.models = models
        self.problems: list[Problem] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(Problem(self.resource, path, message))

    def model(self, model: type[Model], value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.fail(path, f"is {type(value).__name__}, not an object ({model.__name__})")
            return
        if getattr(model, "_subtype_map", None):
            self.fail(path, f"{model.__name__} is polymorphic: the checker does not resolve it")
            return
        keys = _pulumi_keys(model)
        validation = model._validation
        enums = _enums(model)
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            attribute = keys.get(key.lower())
            if attribute is None:
                names = [_FLATTEN.split(d["key"])[-1] for d in model._attribute_map.values()]
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(where, f"unknown to {model.__name__}{hint}")
                continue
            rules = validation.get(attribute, {})
            if rules.get("readonly"):
                self.fail(where, f"read-only in {model.__name__}: Azure ignores it")
                continue
            if rules.get("constant") and item != getattr(model, attribute):
                self.fail(where, f"must be {getattr(model, attribute)!r}")
                continue
            self.value(model._attribute_map[attribute]["type"], item, where)
            self.constraints(rules, item, where)
            if attribute in enums and isinstance(item, str):
                self.enum(enums[attribute], item, where)
        given = {keys.get(key.lower()) for key in value}
        for attribute, rules in validation.items():
            if rules.get("required") and not rules.get("constant") and attribute not in given:
                key = _decode_attribute_map_key(
                    _FLATTEN.split(model._attribute_map[attribute]["key"])[-1]
                )
                self.fail(f"{path}.{key}" if path else key, f"required by {model.__name__}")

    def value(self, kind: str, item: Any, path: str) -> None:  # noqa: C901
        if item is None:
            return
        if kind.startswith("[") and kind.endswith("]"):
            if not isinstance(item, list):
                self.fail(path, f"is {type(item).__name__}, not a list")
                return
            for index, element in enumerate(item):
                self.value(kind[1:-1], element, f"{path}[{index}]")
        elif kind.startswith("{") and kind.endswith("}"):
            if not isinstance(item, dict):
                self.fail(path, f"is {type(item).__name__}, not a map")
                return
            for key, element in item.items():
                self.value(kind[1:-1], element, f"{path}[{key!r}]")
        elif kind == "str":
            self.expect(item, str, path, "a string")
        elif kind == "bool":
            self.expect(item, bool, path, "a boolean")
        elif kind in INTEGER_TYPES:
            # Numbers reach the mocks as floats (protobuf's Struct); Pulumi sends integers.
            whole = (
                isinstance(item, int | float) and not isinstance(item, bool) and item == int(item)
            )
            if not whole:
                self.fail(path, f"{item!r} is not an integer")
        elif kind == "float":
            if isinstance(item, bool) or not isinstance(item, int | float):
                self.fail(path, f"{item!r} is not a number")
        elif kind in {"iso-8601", "duration", "date", "time", "base64", "bytearray"}:
            self.expect(item, str, path, f"a string ({kind})")
        elif kind == "object":
            return
        else:
            self.model(getattr(self.models, kind), item, path)

    def expect(self, item: Any, kind: type, path: str, what: str) -> None:
        if not isinstance(item, kind) or (kind is not bool and isinstance(item, bool)):
            self.fail(path, f"{item!r} is not {what}")

    def constraints(self, rules: dict[str, Any], item: Any, path: str) -> None:
        """The SDK serializer's own checks (min/max length and value, pattern, items)."""
        for rule, limit in rules.items():
            broken = Serializer.validation.get(rule)
            if broken is None or item is None:
                continue
            try:
                failed = broken(item, limit)
            except TypeError:
                continue  # a wrong type, already reported
            if failed:
                self.fail(path, f"{item!r} breaks {rule} {limit!r}")

    def enum(self, classes: list[type[enum.Enum]], item: str, path: str) -> None:
        """Azure's enums are case-insensitive (the SDKs' CaseInsensitiveEnumMeta)."""
        allowed = [member.value for cls in classes for member in cls]
        if item.lower() not in {str(value).lower() for value in allowed}:
            self.fail(path, f"{item!r} is none of {', '.join(map(str, allowed))}")


def _sent(inputs: dict[str, Any]) -> Any:
    """The inputs as Pulumi sends them: identity ID lists become Azure's map."""

    def convert(value: Any, key: str = "") -> Any:
        if key in ID_LISTS_SENT_AS_MAPS and isinstance(value, list):
            return {item: {} for item in value}
        if isinstance(value, dict):
            return {k: convert(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return convert(inputs)


def check(token: str, name: str, inputs: dict[str, Any]) -> list[Problem]:
    """Every problem Azure's model for the type's API version finds in these Pulumi inputs."""
    resource = f"{token} {name}"
    if token not in DESCRIBED:
        return [Problem(resource, "", "no SDK model describes this type: add it to DESCRIBED")]
    body = body_of(token)
    payload = {k: v for k, v in _sent(inputs).items() if k not in body.url_parameters}
    checker = Checker(resource, sys.modules[body.model.__module__.rsplit(".", 1)[0]])
    checker.model(body.model, payload, "")
    return checker.problems
