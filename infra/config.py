"""pulumi.Config -> ClusterSpec. The keys, types and defaults are Pulumi.yaml's (one source)."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pulumi

from dtrun.azure.config import cluster_spec, schema
from dtrun.azure.settingcheck import NAMESPACE
from dtrun.spec.cluster import ClusterSpec


def load_cluster(
    config: pulumi.Config | None = None, now: datetime.datetime | None = None
) -> ClusterSpec:
    """The program's settings; a dtrun:expiresAt before ``now`` (default: now) is refused."""
    config = config or pulumi.Config(NAMESPACE)
    getters: dict[str, Callable[[str], object]] = {
        "string": config.get,
        "integer": config.get_int,
        "boolean": config.get_bool,
        "array": config.get_object,
    }
    values = {}
    for key, setting in schema().items():
        value = getters[setting.type](key)
        if value is not None:
            values[key] = value
    return cluster_spec(values, now=now or datetime.datetime.now(datetime.UTC))
