"""pulumi.Config -> ClusterSpec. The keys, types and defaults are Pulumi.yaml's (one source)."""

from __future__ import annotations

import datetime

import pulumi

from dtrun.azure.config import cluster_spec, schema
from dtrun.azure.settingcheck import NAMESPACE
from dtrun.spec.cluster import ClusterSpec


def load_cluster(
    config: pulumi.Config | None = None, now: datetime.datetime | None = None
) -> ClusterSpec:
    """The program's settings; a dtrun:expiresAt before ``now`` (default: now) is refused.

    Each is read as the text the stack holds and typed by cluster_spec, as `dtrun up` types
    them: pulumi.Config's get_bool and get_int raised Pulumi's own ConfigTypeError, with a
    traceback, for `dtrun:spot: on`, and get_int took 1_000 where dtrun refuses it."""
    config = config or pulumi.Config(NAMESPACE)
    values = {}
    for key in schema():
        value = config.get(key)
        if value is not None:
            values[key] = value
    return cluster_spec(values, now=now or datetime.datetime.now(datetime.UTC))
