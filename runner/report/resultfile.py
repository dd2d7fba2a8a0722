"""A launch's result.json, whichever kind: the all-reduce workload's result, the schema dispatch,
and the loaders (runner/report/results.py parses the training and program kinds)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtrun.errors import DamagedRunError, ResultError
from dtrun.record.readback import describe, load_json
from dtrun.report.results import (
    PROGRAM_SCHEMA,
    TRAIN_SCHEMA,
    SizeRow,
    TrainResult,
    launch_fields,
    parse_program_result,
    parse_train_result,
    size_rows,
)
from dtrun.spec.text import plural

ALLREDUCE_SCHEMA = "dtrun.allreduce/1"


@dataclass(frozen=True)
class AllreduceResult:
    world_size: int
    nnodes: int
    procs_per_node: int
    backend: str
    device: str
    device_name: str
    dtype: str
    torch_version: str
    python_version: str | None
    nccl_version: str | None
    iters: int
    rows: tuple[SizeRow, ...]
    wrong: int
    rank_nodes: tuple[str, ...]

    @property
    def peak_busbw(self) -> float:
        """The highest in-place busbw of any size (the network at its best)."""
        return max(row.in_place.busbw for row in self.rows)

    @property
    def avg_busbw(self) -> float:
        """nccl-tests' "Avg bus bandwidth": the in-place mean over every size."""
        return sum(row.in_place.busbw for row in self.rows) / len(self.rows)

    @property
    def largest(self) -> SizeRow:
        return self.rows[-1]

    @property
    def proof(self) -> str:
        if self.world_size == 1:
            return "1 process"
        if self.wrong:
            return f"FAILED: {self.wrong} wrong elements"
        nodes = plural(len(set(self.rank_nodes)), "node")
        return f"correct sums: {self.world_size} ranks on {nodes}"


def parse_allreduce_result(data: Mapping[str, Any], source: str) -> AllreduceResult:
    try:
        return AllreduceResult(
            **launch_fields(data),
            iters=int(data["iters"]),
            rows=size_rows(data["rows"]),
            wrong=int(data["communication"]["wrong"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: int(Infinity)
        raise ResultError(
            f"{source} is not a complete {ALLREDUCE_SCHEMA} result",
            why=f"missing or malformed field {exc}",
        ) from None


Result = TrainResult | AllreduceResult


PARSERS: dict[str, Callable[[Mapping[str, Any], str], Result]] = {
    TRAIN_SCHEMA: parse_train_result,
    ALLREDUCE_SCHEMA: parse_allreduce_result,
    PROGRAM_SCHEMA: parse_program_result,
}


def parse_result(data: Mapping[str, Any], source: str) -> Result:
    """Either workload's result, by its schema."""
    parser = PARSERS.get(str(data.get("schema")))
    if parser is None:
        raise ResultError(
            f"{source} has schema {data.get('schema')!r}",
            why=f"this dtrun reads {', '.join(map(repr, PARSERS))}",
            fix="rerun the bench with this dtrun, or read the file with the dtrun that wrote it",
        )
    return parser(data, source)


def load_train_result(path: Path) -> TrainResult:
    result = load_result(path)
    if not isinstance(result, TrainResult):
        raise ResultError(f"{path} is not a training result", why="it has the all-reduce schema")
    return result


def load_result(path: Path) -> Result:
    if not (path.exists() or path.is_symlink()):
        raise ResultError(
            f"no result at {path}",
            why="every node exited 0 but rank 0 wrote no result file",
            fix="read the node logs beside it",
        )
    try:
        data = load_json(path, root=path.parent)
    except DamagedRunError as exc:  # not JSON, not a file, numbers beyond any figure, ...
        raise ResultError(f"{path} is not valid JSON", why=exc.why) from None
    return parse_result(data, str(path))


def point_problem(
    result: Result,
    nodes: int,
    recorded: str,
    sweep: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> str | None:
    """Why ``result`` is no launch of the point of ``nodes`` that ``recorded`` says it is:
    another point's, or processes that do not add up (the report's processes column, busbw
    and losses read the world size), or (``sweep``: its JSON and manifest.json's bench)
    another run's; None when it is one."""
    if result.nnodes != nodes:
        held, meant = plural(result.nnodes, "node"), plural(nodes, "node")
        return f"it holds a result of {held}, but {recorded} at {meant}"
    ranks = nodes * result.procs_per_node
    if result.world_size != ranks:
        return (
            f"it holds a launch of {plural(result.world_size, 'process')}, but "
            f"{plural(nodes, 'node')} of {plural(result.procs_per_node, 'process')} each "
            f"run {ranks}"
        )
    return None if sweep is None else sweep_problem(*sweep)


# What the sweep passes every launch of the training workload (runner/plan/workloads.py,
# train_args), and its result records (runner/workloads/result.py): a result that holds other
# values is a launch of another run, copied in or mixed with this one's files, and its step
# times are no measurement of this sweep's model.
SWEEP_FIELDS = ("mode", "steps", "warmup")
MODEL_FIELDS = ("layers", "d_model", "heads", "seq_len", "vocab")


def sweep_problem(data: Mapping[str, Any], bench: Mapping[str, Any]) -> str | None:
    """Why the training result ``data`` is no launch of the sweep manifest.json's ``bench``
    records; None when it is one. A field either lacks is not compared: an older dtrun's
    records fewer."""
    if data.get("schema") != TRAIN_SCHEMA:
        return None
    model = data.get("model")
    model = model if isinstance(model, Mapping) else {}
    ran = bench.get("model")
    ran = ran if isinstance(ran, Mapping) else {}
    pairs = [(key, data[key], bench[key]) for key in SWEEP_FIELDS if key in data and key in bench]
    pairs += [(f"model.{key}", model[key], ran[key])
              for key in MODEL_FIELDS if key in model and key in ran]  # fmt: skip
    for name, held, ran in pairs:
        if type(held) is not type(ran) or held != ran:  # 60.0 or true: not what dtrun writes
            return (
                f"it holds a launch of {name} {describe(held)}, but manifest.json's sweep ran "
                f"{name} {describe(ran)}: a launch of another run, or one edited"
            )
    return None
