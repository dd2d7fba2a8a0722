"""The report's set-up and reproducibility lines from the manifest: where it was measured, the
command in a code block nothing can end, the versions and sources a rerun needs (as Markdown,
every recorded value quoted: runner/render.py), and which points ran more processes than the
machine has cores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dtrun.render import code, code_block, md, verbatim
from dtrun.report.metrics import (
    ScalingRow,
)
from dtrun.report.resultfile import Result
from dtrun.report.results import TrainResult
from dtrun.spec.cluster import exceeds_cores
from dtrun.spec.text import noun, plural


def measured_on(manifest: Mapping[str, Any], first: Result | None) -> str:
    inventory = manifest["inventory"]
    machine = manifest["machine"]
    nodes = len(inventory["nodes"])
    if inventory["source"] == "embedded":
        return (
            f"embedded local cluster: {plural(nodes, 'simulated node')} on one machine "
            f"({machine['hostname']}: {machine['cpu']}, {machine['cpu_count']} cores, "
            f"{machine['memory_bytes'] / 2**30:.0f} GiB)"
        )
    device = f", {first.device_name}" if first else ""
    size = f"{inventory['size']} " if inventory.get("size") else ""
    return f"{inventory['source']}: {nodes} {size}{noun(nodes, 'node')}{device}"


def command_block(manifest: Mapping[str, Any]) -> str:
    """The recorded command line (redacted, runner/record/manifest.py) as a Markdown code
    block, fenced with more backticks than the command holds in a row; "" where the manifest
    has none (written before dtrun recorded it, or not started from a command line)."""
    command = manifest.get("command")
    return code_block(str(command), "shell") if command else ""


def reproducibility(manifest: Mapping[str, Any], first: Result | None) -> list[tuple[str, str]]:
    """The manifest's facts a reader needs to reproduce the run, as (what, value) rows; each
    value Markdown for a table cell, the recorded values in it quoted."""
    rows = [(what, md(value)) for what, value in _facts(manifest, first)]
    launch_env = manifest.get("launch_environment") or []
    if launch_env:
        pairs = (code(f"{var['key']}={var['value']}", table=True) for var in launch_env)
        rows.append(("launch environment", verbatim(", ".join(pairs))))
    return rows


def _facts(manifest: Mapping[str, Any], first: Result | None) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    versions = manifest.get("versions") or {}
    local = [f"{k} {versions[k]}" for k in ("dtrun", "torch") if versions.get(k)]
    if local:  # the rest (deepspeed, pulumi, numpy...) in the manifest, said below
        rows.append(("dtrun's machine", ", ".join(local)))
    if first is not None:
        node = [f"torch {first.torch_version}"]
        node += [f"Python {first.python_version}"] if first.python_version else []
        node += [f"NCCL {first.nccl_version}"] if first.nccl_version else []
        if isinstance(first, TrainResult) and first.deepspeed_version:
            node.append(f"DeepSpeed {first.deepspeed_version}")
        if isinstance(first, TrainResult) and first.rank_os and first.rank_os[0]:
            node.append(first.rank_os[0])
        rows.append(("the nodes", ", ".join(node)))
    git = manifest.get("git")
    if git:
        dirty = " (with local changes)" if git["dirty"] else ""
        rows.append(("source", f"git {git['revision'][:12]}{dirty}"))
    image = manifest.get("image") or {}
    if image.get("urn"):
        rows.append(("image", f"{image['urn']} ({image['source']})"))
    nodes = manifest["inventory"]["nodes"]
    rows.append(("nodes", ", ".join(f"{n['name']} {n['address']}" for n in nodes)))
    return rows


def oversubscribed(manifest: Mapping[str, Any], rows: Sequence[ScalingRow]) -> list[int]:
    """Node counts at which the embedded cluster ran more processes than this machine has cores:
    their efficiency measures the shared CPU, not the launcher or the communication."""
    if manifest["inventory"]["source"] != "embedded":
        return []
    cores = manifest["machine"]["cpu_count"]
    return [row.nodes for row in rows if exceeds_cores(row.world_size, cores)]
