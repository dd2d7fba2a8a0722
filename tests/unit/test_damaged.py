"""`dtrun report` and `dtrun compare` refuse a damaged run directory: exit 2, one message naming
the file and what is wrong with it, no traceback, and every file left as it was."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.record.rundir import write_health
from dtrun.spec.cluster import Inventory
from dtrun.spec.outcome import GateStatus, Health, NodeHealth, RunResult, RunStatus, SweepStatus
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from tests.conftest import run_dtrun
from tests.factories import allreduce_data, fake_run_dir, noise_data, program_run_dir

Damage = Callable[[Path], object]
# Derived files from an earlier build: `dtrun report` would rewrite them, so they show whether
# anything was written.
EARLIER = ("summary.json", "report.md", "report.html", "throughput.png", "efficiency.png")


def make_run(path: Path, inventory: Inventory) -> None:
    """A finished two-point training sweep with a health verdict and an earlier report."""
    bench = BenchSpec(run_id=path.name, node_counts=(1, 2))
    fake_run_dir(path, bench, inventory, {1: [1000.0], 2: [1800.0]}, busbw={2: 2.0})
    write_health(
        path,
        Health(GateStatus.WARNED, threshold_gbs=1.0, threshold_source="--health-threshold",
               size="1M", procs_per_node=1,
               nodes=(NodeHealth("node-0", "127.0.0.2", 1.5, True),
                      NodeHealth("node-1", "127.0.0.3", 0.5, False))),
    )  # fmt: skip
    for name in EARLIER:
        (path / name).write_text(f"{name} from an earlier build\n")


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root (not following links): a file's hash, a link's target, 'dir',
    or what else it is (a FIFO is not read: that would wait for a writer)."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            key = str(path.relative_to(root))
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                found[key] = f"link to {path.readlink()}"
            elif stat.S_ISDIR(mode):
                found[key] = "dir"
            elif stat.S_ISREG(mode):
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[key] = f"mode {mode:o}"
    return found


def edit(change: Callable[[Any], Any]) -> Damage:
    """Load the file's JSON, change it (the change may return a replacement), write it back."""

    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        replaced = change(data)
        path.write_text(json.dumps(data if replaced is None else replaced))

    return damage


def text(content: str) -> Damage:
    return lambda path: path.write_text(content)


def cut_short(path: Path) -> None:
    """As a full disk leaves a file: it ends after the first comma past its middle."""
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b",", len(data) // 2) + 1])


def not_utf8(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b'"run_id"', b'"run_\xff\xfeid"'))


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("a file, so the directory is not empty\n")


def link_loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)  # reading it fails: too many levels of symbolic links


def removed(path: Path) -> None:
    path.unlink()


def fifo(path: Path) -> None:
    """A named pipe with no writer: reading it would wait forever."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def link_out(path: Path) -> None:
    """A link to a file outside the run directory (its copy, or a file someone cares about)."""
    outside = path.parents[1] / f"outside-{path.name}"
    outside.write_bytes(path.read_bytes() if path.exists() else b"precious, not dtrun's\n")
    path.unlink(missing_ok=True)
    path.symlink_to(outside)


def link_to(target: str) -> Damage:
    def damage(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)

    return damage


def copy_of(other: str) -> Damage:
    """The file replaced by a copy of another record of the run (``other``, relative to it)."""

    def damage(path: Path) -> None:
        path.write_bytes((path.parent / other).read_bytes())

    return damage


def directory_out(path: Path) -> None:
    """The launch directory holding the file is a link to a copy of it outside the run."""
    launch = path.parent
    outside = launch.parents[2] / "outside-launch"
    launch.rename(outside)
    launch.symlink_to(outside)


def number(digits: int, *keys: str) -> Damage:
    """A number of ``digits`` digits, written into the JSON text as it is (as a tool might)."""

    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        put("@NUMBER@", *keys)(data)
        path.write_text(json.dumps(data).replace('"@NUMBER@"', "9" * digits))

    return damage


def drop(*keys: str) -> Callable[[Any], None]:
    """Delete data[keys[0]]...[keys[-1]] (integer keys index lists)."""

    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[int(key) if isinstance(data, list) else key]
        del data[keys[-1]]

    return change


def put(value: Any, *keys: str) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[int(key) if isinstance(data, list) else key]
        data[int(keys[-1]) if isinstance(data, list) else keys[-1]] = value

    return change


def until_decided(**most: Any) -> Callable[[Any], None]:
    """The manifest of an --until-decided sweep, its most launches as given: ``max_launches``,
    or (as written before that field) ``repeat`` alone; with no maximum, neither."""

    def change(data: Any) -> None:
        data["bench"]["until_decided"] = True
        if "max_launches" not in most:
            del data["bench"]["max_launches"]
        if "max_launches" not in most and "repeat" not in most:
            del data["bench"]["repeat"]
        data["bench"].update(most)

    return change


def launch(nodes: int, repeat: int, status: str) -> Callable[[Any], None]:
    """runs.json with one more launch, as the first is but at ``nodes`` and round ``repeat``."""

    def change(data: Any) -> None:
        run = {**data["runs"][0], "nodes": nodes, "repeat": repeat, "status": status}
        data["runs"].append({**run, "run_dir": f"n{nodes}/r{repeat}"})

    return change


def allreduce_result(path: Path) -> None:
    path.write_text(json.dumps(allreduce_data(world=2, busbw={1 << 20: 1.0})))


@dataclass(frozen=True)
class Case:
    file: str  # damaged, relative to the runs' parent: a/... (report's run, compare's A) or b/...
    damage: Damage
    says: str  # what the message must say about it
    command: str = "report"
    options: tuple[str, ...] = ()  # after the run directories


CASES = {
    "manifest-null": Case("a/manifest.json", text("null\n"), "it holds null, not a JSON object"),
    "manifest-list": Case("a/manifest.json", text("[]"), "it holds an empty list, not a JSON"),
    "manifest-empty": Case("a/manifest.json", text(""), "it is empty"),
    "manifest-blank": Case("a/manifest.json", text(" \n"), "it holds only white space"),
    "manifest-cut-short": Case("a/manifest.json", cut_short, "cut short?"),
    "manifest-not-utf8": Case("a/manifest.json", not_utf8, "is not UTF-8"),
    "manifest-directory": Case("a/manifest.json", directory, "it is a directory, not a file"),
    "manifest-unreadable": Case("a/manifest.json", link_loop, "it cannot be read: Too many"),
    "manifest-no-bench": Case("a/manifest.json", edit(drop("bench")), "it has no 'bench'"),
    "manifest-bad-mode": Case(
        "a/manifest.json",
        edit(put("sideways", "bench", "mode")),
        "'bench.mode' is 'sideways', not one of 'weak', 'strong'",
    ),
    "manifest-nodes-number": Case(
        "a/manifest.json",
        edit(put(4, "inventory", "nodes")),
        "'inventory.nodes' is 4, not a list",
    ),
    "manifest-model-missing": Case(
        "a/manifest.json", edit(drop("bench", "model")), "'bench' has no 'model'"
    ),
    "runs-empty": Case("a/runs.json", text(""), "it is empty"),
    "runs-number": Case("a/runs.json", text("3\n"), "it holds 3, not a JSON object"),
    "runs-not-json": Case("a/runs.json", text("{'status': 'complete'}"), "line 1 column 2"),
    "runs-missing": Case("a/runs.json", removed, "the sweep recorded no launch"),
    "runs-entry-no-status": Case(
        "a/runs.json", edit(drop("runs", "1", "status")), "'runs[1]' has no 'status'"
    ),
    "runs-entry-zero-nodes": Case(
        "a/runs.json",
        edit(put(0, "runs", "0", "nodes")),
        "'runs[0].nodes' is 0, outside 1 to 10,000 (--nodes' range)",
    ),
    "runs-bad-status": Case(
        "a/runs.json", edit(put(None, "status")), "'status' is null, not one of 'running'"
    ),
    "runs-entry-outside": Case(
        "a/runs.json",
        edit(put("../../etc", "runs", "0", "run_dir")),
        "'runs[0].run_dir' is '../../etc': a sweep runs launch 0 at 1 node in 'n1/r0'",
    ),
    # a hand-edited runs.json would count a result twice or take a 2-node one for the baseline
    "runs-negative-launch": Case(
        "a/runs.json",
        edit(put(-1, "runs", "0", "repeat")),
        "'runs[0].repeat' is -1: a sweep's launches count from 0",
    ),
    "runs-launch-twice": Case(
        "a/runs.json",
        edit(lambda data: data["runs"].append(dict(data["runs"][0]))),
        "records launch 0 at 1 node a second time",
    ),
    "runs-nodes-relabelled": Case(
        "a/runs.json",
        edit(put(1, "runs", "1", "nodes")),
        "'runs[1].run_dir' is 'n2/r0': a sweep runs launch 0 at 1 node in 'n1/r0'",
    ),
    "result-missing": Case("a/n2/r0/result.json", removed, "records the launch in n2/r0 as"),
    "result-not-json": Case("a/n1/r0/result.json", text("{\n"), "line 2 column 1"),
    "result-null-throughput": Case(
        "a/n2/r0/result.json",
        edit(put(None, "tokens_per_s")),
        "'tokens_per_s' is null, not a number above 0",
    ),
    "result-zero-throughput": Case(
        "a/n1/r0/result.json",
        edit(put(0, "tokens_per_s")),
        "'tokens_per_s' is 0, not a number above 0",
    ),
    "result-infinite-step-time": Case(
        "a/n1/r0/result.json",
        edit(put([0.03, float("inf")], "step_times_s")),
        "'step_times_s[1]' is inf, not a number above 0",
    ),
    "result-zero-sequence": Case(
        "a/n1/r0/result.json",
        edit(put(0, "model", "seq_len")),
        "'model.seq_len' is 0, outside 1 to",
    ),
    "manifest-noise-no-sample": Case(
        "a/manifest.json", edit(put({"steal_share": 0.0}, "noise")), "'noise' has no 'sample_s'"
    ),
    "result-zero-step-time": Case(
        "a/n2/r0/result.json",
        edit(put([0.03, 0], "step_times_s")),
        "'step_times_s[1]' is 0, outside 1e-06 to 1e+06 (a step: a microsecond",
    ),
    "result-step-times-text": Case(
        "a/n1/r0/result.json",
        edit(put("fast", "step_times_s")),
        "'step_times_s' is 'fast', not a list",
    ),
    "manifest-zero-target": Case(
        "a/manifest.json",
        edit(put(0, "bench", "target_efficiency")),
        "'bench.target_efficiency' is 0: --target-efficiency is a fraction above 0 and at most 1",
    ),
    # what `dtrun bench --resume` refuses, the report refuses too
    "manifest-target-above-one": Case(
        "a/manifest.json",
        edit(put(5, "bench", "target_efficiency")),
        "'bench.target_efficiency' is 5: --target-efficiency is a fraction above 0 and at most 1",
    ),
    # a hand-edited value would keep the launches timed in noise in, as an older sweep did
    "manifest-noisy-launches-unknown": Case(
        "a/manifest.json",
        edit(put("kept in", "bench", "noisy_launches")),
        "'bench.noisy_launches' is 'kept in', not one of 'left out'",
    ),
    # each rank's probe median: one of 1e308 s over one of 1e-308 s made an infinite straggler
    # ratio, which summary.json (strict JSON) refused with a traceback
    "result-probe-rank-1e308-seconds": Case(
        "a/n2/r0/result.json",
        edit(put(noise_data(["node-0", "node-1"], probe_s=[1e308, 1e-308]), "noise")),
        "'noise.probe.rank_s[0]' is 1e+308, outside 1e-06 to 1e+06 (a step: a microsecond",
    ),
    # the Cost section's inputs: a launch of -1e300 s or a price of 1e300 USD an hour printed
    # 300-digit node-hours and costs
    "runs-launch-of-minus-1e300-seconds": Case(
        "a/runs.json",
        edit(put(-1e300, "runs", "0", "wall_s")),
        "'runs[0].wall_s' is -1e+300, outside 0 to 1e+08 (a wall time: up to about 3 years)",
    ),
    "runs-sweep-of-1e300-seconds": Case(
        "a/runs.json", edit(put([1e300], "segment_wall_s")), "'segment_wall_s[0]' is 1e+300"
    ),
    "manifest-price-of-1e300-usd": Case(
        "a/manifest.json",
        edit(put({"usd_per_node_hour": 1e300, "source": "--price-per-node-hour"}, "price")),
        "'price.usd_per_node_hour' is 1e+300: --price-per-node-hour is at least 0.0001",
    ),
    # a record of another schema (a later dtrun's) is not read as this dtrun's
    "manifest-later-schema": Case(
        "a/manifest.json",
        edit(put("dtrun.manifest/2", "schema")),
        "has schema 'dtrun.manifest/2': this dtrun reads 'dtrun.manifest/1'",
    ),
    "runs-later-schema": Case(
        "a/runs.json", edit(put("dtrun.runs/2", "schema")), "has schema 'dtrun.runs/2'"
    ),
    "health-no-schema": Case("a/health.json", edit(drop("schema")), "has no schema"),
    "compare-b-manifest-later-schema": Case(
        "b/manifest.json", edit(put("dtrun.manifest/2", "schema")), "'dtrun.manifest/2'", "compare"
    ),
    # figures the report prints: 1e308 other cores printed 300 digits, 10^29 tokens 20-digit days
    "result-noise-1e308-other-cores": Case(
        "a/n2/r0/result.json",
        edit(put(noise_data(["node-0", "node-1"], other_cores=1e308), "noise")),
        "'noise.nodes[0].other_cores' is 1e+308, outside 0 to 1e+06 (cores or a load",
    ),
    "result-noise-steal-share-of-3": Case(
        "a/n2/r0/result.json",
        edit(put(noise_data(["node-0", "node-1"], steal=3.0), "noise")),
        "'noise.nodes[0].steal_share' is 3.0, outside 0 to 1 (a share of the CPU time)",
    ),
    "manifest-node-gpus-a-number": Case(
        "a/manifest.json",
        edit(put(7, "inventory", "nodes", "0", "gpus")),
        "'inventory.nodes[0].gpus' is 7",
    ),
    "manifest-10-to-the-29-project-tokens": Case(
        "a/manifest.json",
        edit(put(10**29, "bench", "project_tokens")),
        "--project-tokens is at least 1 and at most 1,000,000,000,000,000",
    ),
    "manifest-fractional-project-tokens": Case(
        "a/manifest.json",
        edit(put(1.5e9, "bench", "project_tokens")),
        "'bench.project_tokens' is 1500000000.0, not a whole number",
    ),
    # bandwidths: a gate's pass mark or node figure of +-1e308 printed 300 digits in report.md
    "health-node-busbw-minus-1e308": Case(
        "a/health.json",
        edit(put(-1e308, "nodes", "0", "busbw")),
        "'nodes[0].busbw' is -1e+308, outside 0 to 1e+06 (GB/s: none to a million)",
    ),
    "health-pass-mark-1e308": Case(
        "a/health.json", edit(put(1e308, "threshold_gbs")), "'threshold_gbs' is 1e+308, outside"
    ),
    "result-probe-busbw-1e308": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "busbw", "rows", "1", "in_place", "busbw")),
        "'busbw.rows[1].in_place.busbw' is 1e+308, outside 0 to 1e+06",
    ),
    # the all-reduce table's other figures: 1e308 printed 300 digits in report.md
    "result-probe-time-1e308-us": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "busbw", "rows", "1", "in_place", "time_us")),
        "'busbw.rows[1].in_place.time_us' is 1e+308, outside 0 to 1e+12",
    ),
    "result-probe-algbw-1e308": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "busbw", "rows", "1", "out_of_place", "algbw")),
        "'busbw.rows[1].out_of_place.algbw' is 1e+308, outside 0 to 1e+12",
    ),
    "result-probe-1e308-wrong-elements": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "busbw", "rows", "0", "in_place", "wrong")),
        "'busbw.rows[0].in_place.wrong' is 1e+308, not a whole number",
    ),
    "result-probe-count-1e308": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "busbw", "rows", "0", "count")),
        "'busbw.rows[0].count' is 1e+308, not a whole number",
    ),
    # a message of 10^29 bytes: the busbw plot's log axis raised TypeError (exit 1)
    "result-probe-message-of-10-to-the-29-bytes": Case(
        "a/n2/r0/result.json",
        edit(put(10**29, "busbw", "rows", "0", "size")),
        "'busbw.rows[0].size' is 100000000000000000000000000000, outside 1 to 2.74878e+11",
    ),
    "result-probe-rows-empty": Case(
        "a/n2/r0/result.json", edit(put([], "busbw", "rows")), "'busbw.rows' is an empty list"
    ),
    "result-other-schema": Case(
        "a/n1/r0/result.json", edit(put("dtrun.train/99", "schema")), "'dtrun.train/99'"
    ),
    "result-wrong-workload": Case(
        "a/n1/r0/result.json", allreduce_result, "but the sweep's workload is train"
    ),
    "result-list": Case("a/n1/r0/result.json", text("[1, 2]"), "it holds a list"),
    "health-number": Case("a/health.json", text("1.5"), "it holds 1.5, not a JSON object"),
    "health-no-pass-mark": Case(
        "a/health.json", edit(put(None, "threshold_gbs")), "'threshold_gbs' is null, not a number"
    ),
    "health-node-error-number": Case(
        "a/health.json", edit(put(7, "nodes", "1", "error")), "'nodes[1].error' is 7, not text"
    ),
    "report-md-directory": Case("a/report.md", directory, "is in the way: it is not a plain file"),
    # links: nothing is written through one, nothing is read from outside the run directory
    "report-md-link-out": Case("a/report.md", link_out, "a/report.md is a symbolic link"),
    "report-html-link-out": Case("a/report.html", link_out, "writes through no link"),
    "summary-link-out": Case("a/summary.json", link_out, "is a symbolic link"),
    "plot-link-out": Case("a/throughput.png", link_out, "is a symbolic link"),
    "manifest-link-out": Case("a/manifest.json", link_out, "leads it out of the run directory"),
    "result-directory-link-out": Case(
        "a/n1/r0/result.json", directory_out, "leads it out of the run directory"
    ),
    # a link inside the run directory: one launch's result read again as another's
    "result-link-to-another-launch": Case(
        "a/n2/r0/result.json",
        link_to("../../n1/r0/result.json"),
        "a symbolic link leads it to n1/r0/result.json in the run directory",
    ),
    # a copy of another point's result: the 1-node launch counted as a 2-node one
    "result-of-another-point": Case(
        "a/n2/r0/result.json",
        copy_of("../../n1/r0/result.json"),
        "it holds a result of 1 node, but runs.json records the launch in n2/r0 at 2 nodes",
    ),
    # launches the sweep never ran (another run's runs.json): 200,000 of them took the report
    # 85 s and 2 GB listing them
    "runs-launch-of-a-node-count-not-asked-for": Case(
        "a/runs.json",
        edit(launch(4, 0, "failed")),
        "'runs[2].nodes' is 4, but manifest.json's sweep ran 1, 2 nodes",
    ),
    "runs-launch-past-the-most": Case(
        "a/runs.json",
        edit(launch(1, 99, "failed")),
        "'runs[2].repeat' is 99, but manifest.json's sweep runs launches 0 to 4 a node count",
    ),
    # what the launches are checked against is checked first, as --resume checks it: a repeat
    # of 0 said runs.json's launch 0 was past "launches 0 to -1", a step count of 0 blamed
    # each result.json for the manifest's damage
    "manifest-repeat-0": Case(
        "a/manifest.json", edit(put(0, "bench", "repeat")), "'bench.repeat' is 0: --repeat is"
    ),
    "manifest-steps-0": Case(
        "a/manifest.json", edit(put(0, "bench", "steps")), "'bench.steps' is 0: --steps is"
    ),
    "manifest-layers-minus-1": Case(
        "a/manifest.json",
        edit(put(-1, "bench", "model", "layers")),
        "'bench.model.layers' is -1: --layers is",
    ),
    # the node counts asked for: the report's baseline finding named "-1 nodes" as requested
    "manifest-node-counts-negative": Case(
        "a/manifest.json",
        edit(put([0, -1], "bench", "node_counts")),
        "'bench.node_counts[0]' is 0, outside 1 to 10,000 (--nodes' range)",
    ),
    "manifest-node-counts-text": Case(
        "a/manifest.json", edit(put("1,2", "bench", "node_counts")), "is '1,2', not a list"
    ),
    "manifest-node-counts-none": Case(
        "a/manifest.json", edit(put([], "bench", "node_counts")), "'bench.node_counts' is an"
    ),
    # a result of another run's set-up (two runs' files mixed): its step times, averaged in,
    # were read as a launch of this sweep's model
    "result-of-another-model": Case(
        "a/n2/r0/result.json",
        edit(put(24, "model", "layers")),
        "it holds a launch of model.layers 24, but manifest.json's sweep ran model.layers 2",
    ),
    "result-of-another-sequence-length": Case(
        "a/n1/r0/result.json", edit(put(128, "model", "seq_len")), "model.seq_len 128, but"
    ),
    "result-of-another-mode": Case(
        "a/n2/r0/result.json", edit(put("strong", "mode")), "mode 'strong', but manifest.json"
    ),
    "result-steps-as-text": Case(
        "a/n1/r0/result.json", edit(put("60", "steps")), "steps '60', but manifest.json's sweep"
    ),
    "compare-b-result-of-another-run": Case(
        "b/n2/r0/result.json", edit(put(1000, "warmup")), "warmup 1000, but", "compare"
    ),
    "compare-b-runs-link-out": Case(
        "b/runs.json", link_out, "leads it out of the run directory", "compare"
    ),
    # only regular files are read: a FIFO would hang the read
    "result-fifo": Case("a/n1/r0/result.json", fifo, "it is a FIFO (named pipe), not a file"),
    # an MFU of 1e308, scaled to the median step, was infinite: summary.json refused to hold it
    "result-mfu-1e308": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "mfu")),
        "'mfu' is 1e+308, outside 0 to 10 (MFU: the model's FLOP/s over the GPUs' peak",
    ),
    # a whole number read as Infinity: int() raised OverflowError, a traceback (exit 1)
    "result-timed-steps-infinite": Case(
        "a/n2/r0/result.json",
        edit(put(float("inf"), "timed_steps")),
        "'timed_steps' is inf, not a whole number above 0",
    ),
    "result-pipeline-size-infinite": Case(
        "a/n2/r0/result.json", edit(put(float("inf"), "pp_size")), "malformed field"
    ),
    # bytes the report prints: 1e308 peak memory, or machine memory, printed 300 digits
    "result-peak-memory-1e308-bytes": Case(
        "a/n2/r0/result.json",
        edit(put(1e308, "peak_memory_bytes")),
        "'peak_memory_bytes' is 1e+308, not a whole number",
    ),
    "manifest-machine-memory-1e308-bytes": Case(
        "a/manifest.json",
        edit(put(1e308, "machine", "memory_bytes")),
        "'machine.memory_bytes' is 1e+308, not a whole number",
    ),
    # 7 processes on 2 nodes of 1 each: the report's processes, busbw and losses read it
    "result-world-size-not-its-processes": Case(
        "a/n2/r0/result.json",
        edit(put(7, "world_size")),
        "it holds a launch of 7 processes, but 2 nodes of 1 process each run 2",
    ),
    # compare lists each --env pair: a number there was a TypeError
    "compare-b-env-a-number": Case(
        "b/manifest.json", edit(put(-1, "bench", "env")), "'bench.env' is -1, not a list", "compare"
    ),
    "manifest-fifo": Case("a/manifest.json", fifo, "it is a FIFO (named pipe), not a file"),
    "compare-b-result-fifo": Case("b/n2/r0/result.json", fifo, "a FIFO", "compare"),
    # numbers beyond any figure dtrun records: Python refuses 5,000 digits, overflows on 400
    "result-400-digit-throughput": Case(
        "a/n1/r0/result.json", number(400, "tokens_per_s"), "a whole number of 400 digits"
    ),
    "result-5000-digit-throughput": Case(
        "a/n2/r0/result.json", number(5000, "tokens_per_s"), "a whole number of 5,000 digits"
    ),
    "result-400-digit-decimal": Case(
        "a/n1/r0/result.json",
        lambda path: (
            number(400, "tokens_per_s")(path)
            or path.write_text(path.read_text().replace("9" * 400, "9" * 400 + ".5"))
        ),
        "a number too large for any figure",
    ),
    "manifest-5000-digit-memory": Case(
        "a/manifest.json", number(5000, "machine", "memory_bytes"), "5,000 digits"
    ),
    "compare-b-result-400-digits": Case(
        "b/n1/r0/result.json", number(400, "step_time_s", "p50"), "400 digits", "compare"
    ),
    "compare-b-manifest-null": Case("b/manifest.json", text("null"), "it holds null", "compare"),
    "compare-a-runs-cut-short": Case("a/runs.json", cut_short, "cut short?", "compare"),
    "compare-b-result-list": Case("b/n2/r0/result.json", text("[]"), "an empty list", "compare"),
    "compare-b-git-text": Case(
        "b/manifest.json", edit(put("abc", "git")), "'git' is 'abc', not a JSON object", "compare"
    ),
    # until decided, the most launches a node count: 0 or 1 divided by zero, 10^9 never ended
    "manifest-until-decided-max-launches-1": Case(
        "a/manifest.json", edit(until_decided(max_launches=1)), "'bench.max_launches' is 1"
    ),
    "manifest-until-decided-max-launches-1e9": Case(
        "a/manifest.json", edit(until_decided(max_launches=10**9)), "at least 2 and at most 1,000"
    ),
    "manifest-until-decided-old-repeat-0": Case(  # written before max_launches had a field
        "a/manifest.json", edit(until_decided(repeat=0)), "'bench.repeat' is 0"
    ),
    "manifest-until-decided-without-its-maximum": Case(
        "a/manifest.json", edit(until_decided(workload="allreduce")), "'bench.repeat' is null"
    ),
    # `predict --size` looks the size's list price up by the recorded region: .lower() of 5
    "predict-size-region-number": Case(
        "a/manifest.json",
        edit(put(5, "inventory", "region")),
        "'inventory.region' is 5, not text",
        "predict",
        ("--nodes", "4", "--size", "Standard_ND96asr_v4"),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_damaged_run_directory_is_refused_and_left_as_it_was(
    case: Case, tmp_path: Path, fixed_inventory: Inventory
):
    for name in ("a", "b"):
        make_run(tmp_path / name, fixed_inventory)
    damaged = tmp_path / case.file
    case.damage(damaged)
    before = snapshot(tmp_path)
    runs = ["a", "b"] if case.command == "compare" else ["a"]
    with contextlib.chdir(tmp_path):  # in process: 72 cases, each a dtrun start saved
        done = CliRunner(env={"COLUMNS": "250"}).invoke(app, [case.command, *runs, *case.options])
    output = done.stdout + done.stderr
    # exit 2 through dtrun's own error printing, never an exception
    assert isinstance(done.exception, SystemExit), f"{done.exception!r}\n{output}"
    assert done.exit_code == 2, output
    assert "Traceback" not in output
    assert f"error: {case.file}" in done.stderr  # the damaged file comes first, as given
    assert case.says in done.stderr
    assert "next: " in done.stderr
    assert snapshot(tmp_path) == before  # nothing written, removed or left behind


def interrupted(path: Path) -> None:
    """As an interrupted sweep leaves it: a launch that never finished has no result."""
    data = json.loads((path / "runs.json").read_text())
    data["status"] = SweepStatus.INTERRUPTED.value
    data["error"] = "interrupted by the user (Ctrl-C)"
    unfinished = RunResult(2, 1, RunStatus.INTERRUPTED, 2.5, "n2/r1", (), data["error"])
    data["runs"].append(asdict(unfinished))
    (path / "runs.json").write_text(json.dumps(data))


TOLERATED: dict[str, Damage] = {
    "an-unfinished-launch-without-a-result": interrupted,
    "a-damaged-earlier-summary-is-rebuilt": lambda path: (path / "summary.json").write_bytes(
        b"\xff{"
    ),
    "a-leftover-partial-file": lambda path: (path / "runs.json.partial").write_text("{"),
    "a-byte-order-mark-an-editor-added": lambda path: (path / "manifest.json").write_bytes(
        b"\xef\xbb\xbf" + (path / "manifest.json").read_bytes()
    ),
}


@pytest.mark.parametrize("state", TOLERATED.values(), ids=TOLERATED.keys())
def test_normal_states_of_a_run_directory_are_reported(
    state: Damage, tmp_path: Path, fixed_inventory: Inventory
):
    make_run(tmp_path / "a", fixed_inventory)
    state(tmp_path / "a")
    done = run_dtrun("report", "a", "--json", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert [row["nodes"] for row in summary["rows"]] == [1, 2]
    assert "| 1,800 |" in (tmp_path / "a" / "report.md").read_text()


# --resume reads the same records with the same reader, and checks every one (each kept
# launch's result.json included) before it launches or writes anything.
RESUME_CASES = {
    "result-cut-short": ("n1/r0/result.json", cut_short, "cut short?"),
    "result-400-digits": (
        "n1/r0/result.json",
        number(400, "tokens_per_s"),
        "a whole number of 400 digits",
    ),
    "result-fifo": ("n1/r0/result.json", fifo, "it is a FIFO (named pipe), not a file"),
    "steps-text": (
        "manifest.json",
        edit(put("12", "bench", "steps")),
        "'bench.steps' is '12', not a whole",
    ),
    "node-count-text": (
        "manifest.json",
        edit(put([1, "2"], "bench", "node_counts")),
        "'bench.node_counts[1]' is '2', not a whole number",
    ),
    "launch-of-another-run": (  # --resume took it as done, then the report refused the run
        "runs.json",
        edit(launch(8, 0, "ok")),
        "'runs[1].nodes' is 8, but manifest.json's sweep ran 1, 2 nodes",
    ),
    "port-null": (
        "manifest.json",
        edit(put(None, "bench", "rdzv_port")),
        "'bench.rdzv_port' is null, not a whole number",
    ),
    "env-pair-of-one": (
        "manifest.json",
        edit(put([["MODE"]], "bench", "env")),
        "'bench.env[0]' is a list, not a list of 2",
    ),
    "env-number": (
        "manifest.json",
        edit(put([["MODE", 3]], "bench", "env")),
        "'bench.env[0][1]' is 3, not",
    ),
    "mode-unknown": (
        "manifest.json",
        edit(put("sideways", "bench", "mode")),
        "'bench.mode' is 'sideways'",
    ),
    "run-status-number": (
        "runs.json",
        edit(put(7, "runs", "0", "status")),
        "'runs[0].status' is 7, not one of",
    ),
    "run-nodes-text": ("runs.json", edit(put("1", "runs", "0", "nodes")), "'runs[0].nodes' is"),
    # a field with no default missing: BenchSpec(...) raised a TypeError, a traceback
    "bench-empty": ("manifest.json", edit(put({}, "bench")), "'bench' has no 'run_id'"),
}


@pytest.mark.parametrize(("file", "damage", "says"), RESUME_CASES.values(), ids=RESUME_CASES)
def test_resume_refuses_a_damaged_record_before_it_launches_or_writes(
    file: str, damage: Damage, says: str, tmp_path: Path, fixed_inventory: Inventory
):
    bench = BenchSpec(run_id="a", node_counts=(1, 2), steps=4, warmup=1, rdzv_port=29728)
    fake_run_dir(
        tmp_path / "a", bench, fixed_inventory, {1: [1000.0]}, status=SweepStatus.INTERRUPTED
    )
    damage(tmp_path / "a" / file)
    before = snapshot(tmp_path)
    done = run_dtrun("bench", "--resume", "a", cwd=tmp_path, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output
    assert f"error: a/{file} is damaged" in done.stderr
    assert says in done.stderr
    assert snapshot(tmp_path) == before  # nothing launched, written or removed


def test_resume_refuses_a_manifest_of_a_later_schema(tmp_path: Path, fixed_inventory: Inventory):
    bench = BenchSpec(run_id="a", node_counts=(1, 2), steps=4, warmup=1, rdzv_port=29728)
    fake_run_dir(
        tmp_path / "a", bench, fixed_inventory, {1: [1000.0]}, status=SweepStatus.INTERRUPTED
    )
    edit(put("dtrun.manifest/2", "schema"))(tmp_path / "a" / "manifest.json")
    before = snapshot(tmp_path)
    done = run_dtrun("bench", "--resume", "a", cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: a/manifest.json has schema 'dtrun.manifest/2'" in done.stderr
    assert "read it with the dtrun that wrote it" in done.stderr
    assert snapshot(tmp_path) == before  # nothing launched, written or removed


def test_a_recorded_text_that_is_not_unicode_is_reported_as_its_escape(
    tmp_path: Path, fixed_inventory: Inventory
):
    """A command-line byte that is not UTF-8 reaches Python as a lone surrogate (PEP 383) and
    the manifest as its JSON escape: report.md could not be encoded, after summary.json and
    the plots had been rewritten."""
    make_run(tmp_path / "a", fixed_inventory)
    edit(put("dtrun bench -- python train.py \udcff", "command"))(tmp_path / "a" / "manifest.json")
    with contextlib.chdir(tmp_path):
        done = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["report", "a"])
    assert done.exit_code == 0, f"{done.exception!r}\n{done.stdout}{done.stderr}"
    assert "python train.py \\udcff\n" in (tmp_path / "a" / "report.md").read_text()
    assert "python train.py \\udcff" in (tmp_path / "a" / "report.html").read_text()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_record_of_a_gigabyte_is_refused_by_its_size_before_it_is_read(
    command: str, tmp_path: Path, fixed_inventory: Inventory
):
    """A sparse 1 GiB result.json (no disk, all zeros): read whole, it took over 2 GB of
    memory and 10 s before json refused its first byte."""
    for name in ("a", "b"):
        make_run(tmp_path / name, fixed_inventory)
    huge = tmp_path / "a" / "n2" / "r0" / "result.json"
    with huge.open("r+b") as file:
        file.truncate(1 << 30)
    before = snapshot(tmp_path / "b")
    runs = ["a"] if command == "report" else ["a", "b"]
    with contextlib.chdir(tmp_path):
        done = CliRunner(env={"COLUMNS": "250"}).invoke(app, [command, *runs])
    assert done.exit_code == 2, f"{done.exception!r}\n{done.stdout}{done.stderr}"
    assert "error: a/n2/r0/result.json is damaged: it is 1,073,741,824 bytes" in done.stderr
    assert "more than any record dtrun writes" in done.stderr
    # nothing written (the big file is not hashed: that would read it)
    assert huge.stat().st_size == 1 << 30 and snapshot(tmp_path / "b") == before
    assert (tmp_path / "a" / "report.md").read_text() == "report.md from an earlier build\n"


def test_a_program_s_result_with_an_infinite_count_is_refused_not_a_traceback(
    tmp_path: Path, fixed_inventory: Inventory
):
    """int() of a JSON Infinity raises OverflowError: `dtrun report` printed a traceback."""
    bench = BenchSpec("p", program=Program(ProgramKind.SCRIPT, "/w/train.py", ()),
                      node_counts=(1, 2), warmup=2, repeat=1)  # fmt: skip
    run = program_run_dir(tmp_path / "p", bench, fixed_inventory, {1: [[0.1] * 5], 2: [[0.12] * 5]})
    edit(put(float("inf"), "params"))(run.path / "n2" / "r0" / "result.json")
    for command in (["report", str(run.path)], ["compare", str(run.path), str(run.path)]):
        done = CliRunner(env={"COLUMNS": "250"}).invoke(app, command)
        assert isinstance(done.exception, SystemExit), f"{done.exception!r}\n{done.output}"
        assert done.exit_code == 2, done.output
        assert "is not a complete dtrun.program/1 result" in " ".join(done.output.split())
