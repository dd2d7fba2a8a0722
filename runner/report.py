"""Rebuild the scaling report of a run directory from its recorded files alone."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner import __version__
from runner.metrics import FORMULAS, ScalingRow, scaling_rows
from runner.record import RunDir, ok_runs, read_json, write_json
from runner.render import render
from runner.results import TrainResult, load_train_result
from runner.spec import ScalingMode

SUMMARY_SCHEMA = "dtrun.summary/1"


@dataclass(frozen=True)
class Report:
    run_dir: RunDir
    status: str
    rows: tuple[ScalingRow, ...]


def build_report(run_dir: RunDir) -> Report:
    """Read manifest.json, runs.json and each result; write summary.json, report.md and the plot."""
    manifest = read_json(run_dir.manifest)
    runs_data = read_json(run_dir.runs)
    bench = manifest["bench"]
    mode = ScalingMode(bench["mode"])
    results: dict[int, list[TrainResult]] = defaultdict(list)
    for nodes, _, directory in ok_runs(runs_data):
        results[nodes].append(load_train_result(run_dir.path / directory / "result.json"))
    rows = scaling_rows(results)
    first = next(iter(results.values()))[0] if results else None

    write_json(
        run_dir.summary,
        {
            "schema": SUMMARY_SCHEMA,
            "run_id": manifest["run_id"],
            "status": runs_data["status"],
            "error": runs_data["error"],
            "mode": mode.value,
            "efficiency_formula": FORMULAS[mode],
            "rows": [asdict(row) for row in rows],
        },
    )
    if rows:
        plot_throughput(rows, run_dir.plot, title=f"dtrun {manifest['run_id']} ({mode.value})")
    else:
        run_dir.plot.unlink(missing_ok=True)
    run_dir.report.write_text(
        render(
            "report.md.j2",
            {
                "version": __version__,
                "manifest": manifest,
                "bench": bench,
                "runs": runs_data,
                "rows": rows,
                "formula": FORMULAS[mode],
                "first": first,
                "measured_on": measured_on(manifest, first),
                "plot": run_dir.plot.name if rows else None,
                "oversubscribed": oversubscribed(manifest, rows),
            },
        )
    )
    return Report(run_dir, runs_data["status"], rows)


def measured_on(manifest: dict[str, Any], first: TrainResult | None) -> str:
    inventory = manifest["inventory"]
    machine = manifest["machine"]
    nodes = len(inventory["nodes"])
    if inventory["source"] == "embedded":
        return (
            f"embedded local cluster: {nodes} simulated node(s) on one machine "
            f"({machine['hostname']}: {machine['cpu']}, {machine['cpu_count']} cores, "
            f"{machine['memory_bytes'] / 2**30:.0f} GiB)"
        )
    device = f", {first.device_name}" if first else ""
    size = f" {inventory['size']}" if inventory.get("size") else ""
    return f"{inventory['source']}: {nodes}{size} node(s){device}"


def warm_up_plotting() -> threading.Thread:
    """Import matplotlib in the background while the nodes run.

    The import costs about a third of a second; done here it overlaps the launches instead of
    adding to the wall time after the last one.
    """
    thread = threading.Thread(target=_import_plotting, name="dtrun-warm-plotting", daemon=True)
    thread.start()
    return thread


def _import_plotting() -> None:
    # Linux nice values are per thread: this thread only takes CPU the nodes leave idle.
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    import matplotlib.backends.backend_agg
    import matplotlib.figure  # noqa: F401


def oversubscribed(manifest: dict[str, Any], rows: tuple[ScalingRow, ...]) -> list[int]:
    """Node counts at which the embedded cluster ran more processes than this machine has cores:
    their efficiency measures the shared CPU, not the launcher or the communication."""
    if manifest["inventory"]["source"] != "embedded":
        return []
    cores = manifest["machine"]["cpu_count"] or 1
    return [row.nodes for row in rows if row.world_size > cores]


def plot_throughput(rows: tuple[ScalingRow, ...], path: Path, *, title: str) -> None:
    # The object-oriented API with the Agg canvas: no pyplot state, no GUI backend.
    from matplotlib.figure import Figure

    nodes = [row.nodes for row in rows]
    measured = [row.tokens_per_s for row in rows]
    spread = [
        [row.tokens_per_s - row.tokens_per_s_min for row in rows],
        [row.tokens_per_s_max - row.tokens_per_s for row in rows],
    ]
    fig = Figure(figsize=(6.4, 4.2), dpi=110)
    ax = fig.subplots()
    ax.plot(nodes, [row.ideal_tokens_per_s for row in rows], "--", color="grey", label="ideal")
    ax.errorbar(nodes, measured, yerr=spread, marker="o", capsize=4, label="measured")
    for row in rows:
        ax.annotate(
            f"{row.efficiency:.0%}",
            (row.nodes, row.tokens_per_s),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
        )
    ax.set_xticks(nodes)
    ax.set_xlabel("nodes")
    ax.set_ylabel("tokens/s")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    partial = path.with_name(path.stem + ".partial.png")
    fig.savefig(partial)
    partial.replace(path)
