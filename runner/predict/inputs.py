"""What `dtrun predict` predicts from: a description of results measured elsewhere (`--from
FILE`, YAML or JSON, the format of docs/prediction.md "From a description"), or a run directory.

The description is checked against a JSON Schema (jsonschema), so that a wrong field is named
by its place in the file with what it should be; nothing is guessed for a missing field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtrun.errors import UsageError
from dtrun.predict.model import Pipeline
from dtrun.spec.bounds import bound_of
from dtrun.spec.request import RunSpec, ScalingMode
from dtrun.spec.text import plural

# All-reduces of the whole gradient per step, by strategy (runner/report/metrics.py's, with
# Horovod's ring all-reduce as DDP's; docs/your-training.md "How much a step synchronises").
STRATEGIES = {"ddp": 1.0, "horovod": 1.0, "zero1": 1.0, "zero2": 1.0, "zero3": 1.5, "fsdp": 1.5}


@dataclass(frozen=True)
class Range:
    """Where a description's number is physically meaningful, and why: a value outside is a
    mistake (a unit, a slip of the exponent), and past these the arithmetic leaves a float's
    range (a step of 5e-324 s gave an efficiency of Infinity; a global batch of 1e-200, a
    division by zero)."""

    low: float
    high: float
    why: str


RANGES = {
    "step_time_s": Range(
        1e-6, 1e6, "seconds one step takes: a microsecond (no step that synchronises ranks is "
        "faster; an all-reduce alone takes microseconds) to about 11 days"
    ),
    "throughput": Range(
        1e-6, 1e15, "units a second, every process together: one a million seconds to 1e15, "
        "far past any cluster's tokens a second"
    ),
    "parameters": Range(1, 1e15, "trainable parameters: one to 1e15, 1,000 times the largest "
                        "models trained"),
    "gradient_bytes_per_parameter": Range(
        0.125, 16, "bytes all-reduced per parameter: one bit to 16 bytes (two float64s)"
    ),
    "busbw_gbs": Range(1e-3, 1e5, "GB/s: 1 MB/s to 100 TB/s, past any fabric's"),
    "busbw_intra_node_gbs": Range(1e-3, 1e5, "GB/s: 1 MB/s to 100 TB/s, past any link's"),
    "step_spread": Range(0, 100, "(p90 - p10) / p50 of the step times: 0 to 100 times the "
                         "median"),
    "batch_per_process": Range(1, 1e12, "units a process's step processes: at least one"),
    "global_batch": Range(1, 1e12, "units a step processes: at least one"),
    "micro_batches": Range(1, 1e9, "micro-batches each pipeline runs a step: at least one"),
}  # fmt: skip


def _ranged(name: str) -> dict[str, Any]:
    bound = RANGES[name]
    return {"type": "number", "minimum": bound.low, "maximum": bound.high}


# the options' own ceilings: a larger count is a mistake, and past ~1e16 ranks the expected
# slowest rank's quantile rounds to 1, where the normal's inverse has no value
_PPN, _NODES = bound_of(RunSpec, "procs_per_node"), bound_of(RunSpec, "nodes")
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["procs_per_node", "mode", "points"],
    "properties": {
        "procs_per_node": {"type": "integer", "minimum": _PPN.low, "maximum": _PPN.high},
        "mode": {"enum": [mode.value for mode in ScalingMode]},
        "strategy": {"enum": sorted(STRATEGIES)},
        "parameters": _ranged("parameters"),
        "gradient_bytes_per_parameter": _ranged("gradient_bytes_per_parameter"),
        "busbw_gbs": _ranged("busbw_gbs"),
        "busbw_intra_node_gbs": _ranged("busbw_intra_node_gbs"),
        "step_spread": _ranged("step_spread"),  # the largest point's (straggler tax)
        # what a step processes, in the throughput's unit: lets step times and throughputs mix
        "batch_per_process": _ranged("batch_per_process"),  # weak: each process's, every count
        "global_batch": _ranged("global_batch"),  # strong scaling: all processes' together
        # pipeline parallelism (strong scaling: its bubble is computed, model.Pipeline)
        "pipeline_parallel": {"type": "integer", "minimum": 1, "maximum": _PPN.high * _NODES.high},
        "virtual_pipeline_stages": {"type": "integer", "minimum": 1, "maximum": 1000},
        "micro_batches": _ranged("micro_batches"),  # each pipeline's, at the smallest count
        "points": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "required": ["nodes"],
                "properties": {
                    "nodes": {"type": "integer", "minimum": _NODES.low, "maximum": _NODES.high},
                    "step_time_s": _ranged("step_time_s"),
                    "throughput": _ranged("throughput"),
                },
                # a step time or a throughput, not both
                "oneOf": [{"required": ["step_time_s"]}, {"required": ["throughput"]}],
            },
        },
    },
    "dependentRequired": {
        "micro_batches": ["pipeline_parallel"],
        "virtual_pipeline_stages": ["pipeline_parallel", "micro_batches"],
    },
}


@dataclass(frozen=True)
class Point:
    nodes: int
    step_time_s: float | None
    throughput: float | None  # global: every rank's together


@dataclass(frozen=True)
class Description:
    """Measured results as `dtrun predict` reads them, from a file or a run directory."""

    source: str  # where they come from, for the messages
    procs_per_node: int
    mode: ScalingMode
    points: tuple[Point, ...]  # by node count, two or more
    strategy: str | None = None
    parameters: float | None = None
    gradient_bytes_per_parameter: float | None = None
    busbw_gbs: float | None = None
    busbw_intra_node_gbs: float | None = None
    step_spread: float | None = None  # (p90 - p10) / p50 of the largest point's step times
    batch_per_process: float | None = None
    global_batch: float | None = None
    pipeline_parallel: int | None = None
    micro_batches: float | None = None  # each pipeline's a step, at the smallest node count
    virtual_pipeline_stages: int | None = None

    @property
    def pipeline(self) -> Pipeline | None:
        """The pipeline whose bubble the model computes: strong scaling (the global batch
        fixed, so each pipeline's micro-batches fall as the nodes grow), 2 or more stages and
        its micro-batches known. Under weak scaling they stay as many: no change to model."""
        stages = self.pipeline_parallel or 1
        if self.weak or stages < 2 or self.micro_batches is None:
            return None
        return Pipeline(stages, self.micro_batches, self.virtual_pipeline_stages or 1)

    @property
    def absolute(self) -> bool:
        """Every point has a step time in seconds (else the model works in ratios)."""
        return all(p.step_time_s is not None for p in self.points)

    def steps(self) -> list[tuple[int, float]]:
        """(nodes, step time) of each point: seconds where every point has one, or where the
        batch turns throughputs into step times; else from throughput X: weak scaling's N/X,
        strong scaling's 1/X (the ratios are the step times', which is all the model needs)."""
        if self.absolute:
            return [(p.nodes, float(p.step_time_s or 0)) for p in self.points]
        batch = self._batch()
        out = []
        for p in self.points:
            if p.step_time_s is not None:
                if batch is None:  # mixed: the step time's own throughput is not known
                    raise UsageError(
                        f"{self.source}: points: the one at {plural(p.nodes, 'node')} gives a "
                        "step time "
                        "and another a throughput",
                        why="a step time and a throughput compare only through the batch",
                        fix="give every point a step_time_s, or every point a throughput, or "
                        "the batch (batch_per_process for weak scaling, global_batch for strong)",
                    )
                out.append((p.nodes, p.step_time_s))
                continue
            throughput = float(p.throughput or 0)
            if batch is not None:  # units per step / units per second: seconds
                per_step = batch * p.nodes * self.procs_per_node if self.weak else batch
                out.append((p.nodes, self._step_seconds(p.nodes, per_step / throughput)))
            else:
                out.append((p.nodes, (p.nodes if self.weak else 1) / throughput))
        return out

    def _step_seconds(self, nodes: int, seconds: float) -> float:
        """A step time the batch and a throughput give, held to a step time's range."""
        bound = RANGES["step_time_s"]
        if not bound.low <= seconds <= bound.high:
            raise UsageError(
                f"{self.source}: points: at {plural(nodes, 'node')} the batch and the throughput "
                f"give a step of {seconds:g} s, outside {bound.low:g} to {bound.high:g} s",
                why=bound.why,
                fix="check the batch's unit against the throughput's (samples or tokens)",
            )
        return seconds

    @property
    def weak(self) -> bool:
        return self.mode is ScalingMode.WEAK

    def _batch(self) -> float | None:
        return self.batch_per_process if self.weak else self.global_batch

    @property
    def seconds(self) -> bool:
        """The step times are in seconds (else only their ratios are known)."""
        return self.absolute or self._batch() is not None

    @property
    def gradient_bytes(self) -> float | None:
        """One step's all-reduced bytes: parameters x bytes each x all-reduces per step."""
        if self.parameters is None or self.gradient_bytes_per_parameter is None:
            return None
        return (
            self.parameters * self.gradient_bytes_per_parameter
            * STRATEGIES.get(self.strategy or "ddp", 1.0)
        )  # fmt: skip


_NUMBERS = [key for key in SCHEMA["properties"] if key in RANGES]


def _finite(value: float) -> bool:
    """A float's value: YAML's ints are Python's, of any size (1e400 written out in full)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown(value: Any) -> str:
    """A value as a message shows it, never long: a whole number past 20 digits by its
    length, text cut at 60 characters."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        digits = int(value.bit_length() * 0.30103) + 1  # str() refuses past 4,300 digits
        return f"a whole number of {digits:,} digits" if digits > 20 else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return cut(repr(value), 60)


def cut(text: str, most: int = 200) -> str:
    """``text``, or its first ``most`` characters and how long it was."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


def _kind(value: Any) -> str:
    """What a value is, never what it holds."""
    if value is None:
        return "nothing (an empty file, or comments only)"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list) else "text"


def _where(error: Any) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "the top level"


def description(data: Any, source: str) -> Description:
    """``data`` (a parsed description) checked and read; UsageError (exit 2) naming the first
    field that is wrong and what it should be."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        what, why = (
            cut(error.message),
            (
                "a description of measured results needs procs_per_node, mode and two or more "
                "points, each with nodes and step_time_s or throughput"
            ),
        )
        name = error.absolute_path[-1] if error.absolute_path else None
        if error.validator == "oneOf":
            what = "it needs step_time_s or throughput, one of them, not both"
        elif error.validator == "type" and not error.absolute_path:
            # the whole file: a .env or ~/.netrc given by mistake is one YAML string, and
            # quoting it printed its secrets (docs/security.md, "Redaction")
            what = f"it holds {_kind(error.instance)}, not a mapping of the format's fields"
        elif error.validator in ("minimum", "maximum") and name in RANGES:
            bound = RANGES[str(name)]
            what = f"{shown(error.instance)} is outside {bound.low:g} to {bound.high:g}"
            why = bound.why
        elif error.validator == "dependentRequired":
            why = (
                "micro_batches and virtual_pipeline_stages describe a pipeline: they need its "
                "stages, pipeline_parallel (and virtual_pipeline_stages needs micro_batches)"
            )
        raise UsageError(
            f"{source}: {_where(error)}: {what}",
            why=why,
            fix='see docs/prediction.md "From a description" for the format',
        )
    assert isinstance(data, Mapping)  # the schema says an object
    points = sorted(
        (Point(int(p["nodes"]), p.get("step_time_s"), p.get("throughput")) for p in data["points"]),
        key=lambda p: p.nodes,
    )
    counts = [p.nodes for p in points]
    if len(set(counts)) != len(counts):
        raise UsageError(
            f"{source}: points: a node count is given twice ({counts})",
            fix="give each node count once (the median of its launches)",
        )
    numbers = [
        (f"points (at {plural(p.nodes, 'node')})", p.step_time_s or p.throughput) for p in points
    ]
    # the format's own numbers (other fields are ignored, whatever they hold)
    numbers += [(key, data.get(key)) for key in _NUMBERS]
    for where, value in numbers:
        if value is not None and not _finite(value):
            raise UsageError(
                f"{source}: {where}: {shown(value)} is not a finite number",
                fix="give a finite number",
            )
    return Description(
        source=source,
        procs_per_node=int(data["procs_per_node"]),
        mode=ScalingMode(data["mode"]),
        points=tuple(points),
        strategy=data.get("strategy"),
        parameters=data.get("parameters"),
        gradient_bytes_per_parameter=data.get("gradient_bytes_per_parameter"),
        busbw_gbs=data.get("busbw_gbs"),
        busbw_intra_node_gbs=data.get("busbw_intra_node_gbs"),
        step_spread=data.get("step_spread"),
        batch_per_process=data.get("batch_per_process"),
        global_batch=data.get("global_batch"),
        pipeline_parallel=data.get("pipeline_parallel"),
        micro_batches=data.get("micro_batches"),
        virtual_pipeline_stages=data.get("virtual_pipeline_stages"),
    )
