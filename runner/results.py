"""The workload's result file (schema dtrun.train/1) as a typed value.

The schema is documented in the README ("Result files"); runner/workloads/train.py writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ResultError

TRAIN_SCHEMA = "dtrun.train/1"


@dataclass(frozen=True)
class TrainResult:
    world_size: int
    nnodes: int
    procs_per_node: int
    backend: str
    device: str
    device_name: str
    dtype: str
    torch_version: str
    params: int
    global_batch: int
    seq_len: int
    timed_steps: int
    tokens_per_s: float
    samples_per_s: float
    step_time_p50: float
    step_time_p90: float
    mfu: float | None
    peak_memory_bytes: int
    loss_first: float
    loss_last: float
    allreduce_ok: bool
    initial_params_differed: bool | None
    params_in_sync: bool
    rank_nodes: tuple[str, ...]  # the node each rank ran on, by rank
    engine: str = "ddp"  # ddp or deepspeed (results written before engines existed: ddp)
    zero_stage: int | None = None  # DeepSpeed's ZeRO stage

    @property
    def proof(self) -> str:
        """Whether the ranks were shown to communicate (see the workload's docstring)."""
        if self.world_size == 1:
            return "1 process"
        if not (self.params_in_sync and self.allreduce_ok):
            return "FAILED: ranks disagree"
        return f"in sync: {self.world_size} ranks on {len(set(self.rank_nodes))} nodes"


def parse_train_result(data: Mapping[str, Any], source: str) -> TrainResult:
    """Check the schema version and pull out the fields dtrun's report uses."""
    schema = data.get("schema")
    if schema != TRAIN_SCHEMA:
        raise ResultError(
            f"{source} has schema {schema!r}",
            why=f"this dtrun reads {TRAIN_SCHEMA!r}",
            fix="rerun the bench with this dtrun, or read the file with the dtrun that wrote it",
        )
    try:
        comm = data["communication"]
        steps = data["step_time_s"]
        return TrainResult(
            world_size=int(data["world_size"]),
            nnodes=int(data["nnodes"]),
            procs_per_node=int(data["procs_per_node"]),
            backend=str(data["backend"]),
            device=str(data["device"]),
            device_name=str(data["device_name"]),
            dtype=str(data["dtype"]),
            torch_version=str(data["torch_version"]),
            params=int(data["model"]["params"]),
            global_batch=int(data["global_batch"]),
            seq_len=int(data["model"]["seq_len"]),
            timed_steps=int(data["timed_steps"]),
            tokens_per_s=float(data["tokens_per_s"]),
            samples_per_s=float(data["samples_per_s"]),
            step_time_p50=float(steps["p50"]),
            step_time_p90=float(steps["p90"]),
            mfu=None if data["mfu"] is None else float(data["mfu"]),
            peak_memory_bytes=int(data["peak_memory_bytes"]),
            loss_first=float(data["loss"]["first"]),
            loss_last=float(data["loss"]["last"]),
            allreduce_ok=bool(comm["allreduce_ok"]),
            initial_params_differed=comm["initial_params_differed"],
            params_in_sync=bool(comm["params_in_sync"]),
            rank_nodes=tuple(str(rank["node"]) for rank in data["ranks"]),
            engine=str(data.get("engine", "ddp")),
            zero_stage=None if data.get("zero_stage") is None else int(data["zero_stage"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultError(
            f"{source} is not a complete {TRAIN_SCHEMA} result",
            why=f"missing or malformed field {exc}",
        ) from None


def load_train_result(path: Path) -> TrainResult:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultError(
            f"no result at {path}",
            why="every node exited 0 but rank 0 wrote no result file",
            fix="read the node logs beside it",
        ) from None
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path} is not valid JSON", why=str(exc)) from None
    return parse_train_result(data, str(path))
