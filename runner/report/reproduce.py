"""The report's set-up and reproducibility lines from the manifest: where it was measured, the
command in a code block nothing can end, the versions and sources a rerun needs (as Markdown,
every recorded value quoted: runner/render.py), and at which points the embedded cluster's
processes shared cores."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from dtrun.redact import Redactor, redact_var, secret_args
from dtrun.render import code, code_block, command_shown, md, verbatim
from dtrun.report.metrics import (
    ScalingRow,
)
from dtrun.report.resultfile import Result
from dtrun.report.results import TrainResult
from dtrun.spec.cluster import shares_cores
from dtrun.spec.text import noun, plural


def measured_on(manifest: Mapping[str, Any], first: Result | None) -> str:
    inventory = manifest["inventory"]
    machine = manifest["machine"]
    nodes = len(inventory["nodes"])
    if inventory["source"] == "embedded":
        usable, count = machine.get("usable_cpus"), machine["cpu_count"]
        cores = f"{count} cores"
        if usable is not None and count is not None and usable < count:
            cores = f"{usable} of its {count} cores"
        gpus = len(inventory["nodes"][0].get("gpus") or ()) if nodes else 0
        each = f", {plural(gpus, 'GPU')} a node" if gpus else ""
        each += f" ({first.device_name})" if gpus and first else ""
        return (
            f"embedded local cluster: {plural(nodes, 'simulated node')} on one machine "
            f"({machine['hostname']}: {machine['cpu']}, {cores}, "
            f"{machine['memory_bytes'] / 2**30:.0f} GiB){each}"
        )
    device = f", {first.device_name}" if first else ""
    size = f"{inventory['size']} " if inventory.get("size") else ""
    return f"{inventory['source']}: {nodes} {size}{noun(nodes, 'node')}{device}"


def command_block(manifest: Mapping[str, Any]) -> str:
    """The recorded command line (redacted, runner/record/manifest.py) as a Markdown code
    block, fenced with more backticks than the command holds in a row, on one line (a line
    break in it shown quoted, render.command_shown: no second line reads as a command); ""
    where the manifest has none (written before dtrun recorded it, or not started from a
    command line)."""
    command = manifest.get("command")
    return code_block(command_shown(_redacted(str(command))), "shell") if command else ""


def _redacted(command: str) -> str:
    """A recorded command line with its secrets hidden again where they stand, as the
    manifest's writer hides them (command_line): a manifest written elsewhere or edited by hand
    may not have, as with the launch environment (redact_var). Its words as a shell reads them,
    or, with a quote left open, as blanks split them; its layout kept for command_shown."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return Redactor.of(secret_args(tuple(words))).text(command)


def reproducibility(manifest: Mapping[str, Any], first: Result | None) -> list[tuple[str, str]]:
    """The manifest's facts a reader needs to reproduce the run, as (what, value) rows; each
    value Markdown for a table cell, the recorded values in it quoted."""
    rows = [(what, md(value)) for what, value in _facts(manifest, first)]
    launch_env = manifest.get("launch_environment") or []
    if launch_env:
        # redact_var, as the manifest's writer: a run directory written elsewhere may not have
        pairs = (
            code(f"{var['key']}={redact_var(var['key'], var['value'])}", table=True)
            for var in launch_env
        )
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
    kept = kept_cores(manifest)
    if kept is not None:
        rows.append(("cores", kept))
    return rows


def kept_cores(manifest: Mapping[str, Any]) -> str | None:
    """The embedded nodes' cores as the manifest records them (docs/bench.md "The embedded
    local cluster"); None for other clusters and for manifests written before they were."""
    nodes = manifest["inventory"]["nodes"]
    if manifest["inventory"]["source"] != "embedded" or not any("cores" in n for n in nodes):
        return None
    if all(n.get("cores") is None for n in nodes):
        return "every node on every core dtrun could use (no taskset)"
    return "; ".join(
        f"{n['name']}: {','.join(map(str, n['cores'])) if n.get('cores') else 'any'}" for n in nodes
    )


def usable_cores(manifest: Mapping[str, Any]) -> int | None:
    """The cores dtrun could use where it ran: its affinity's, or (in manifests written before
    those were recorded) the machine's."""
    machine = manifest["machine"]
    cores = machine.get("usable_cpus") or machine["cpu_count"]
    return None if cores is None else int(cores)


def oversubscribed(manifest: Mapping[str, Any], rows: Sequence[ScalingRow]) -> list[int]:
    """Node counts at which the embedded cluster's processes shared cores (runner/spec/cluster.py
    shares_cores, on the cores dtrun could use and each node's own where recorded): their
    efficiency measures the shared CPU, not the launcher or the communication."""
    if manifest["inventory"]["source"] != "embedded":
        return []
    cores = usable_cores(manifest)
    kept = [node.get("cores") for node in manifest["inventory"]["nodes"]]
    over = []
    for row in rows:
        per_node = max(1, row.world_size // max(1, row.nodes))
        if shares_cores(kept[: row.nodes] or [None] * row.nodes, per_node, cores):
            over.append(row.nodes)
    return over
