"""The workloads' result files (schemas dtrun.train/1, dtrun.allreduce/1) as typed values.

The schemas are documented in docs/workloads.md ("Result file schema ..."); the
modules runner/workloads/train.py and runner/workloads/allreduce.py write them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from dtrun.errors import ResultError
from dtrun.report.launchnoise import LaunchNoise, parse_noise
from dtrun.report.stages import StageSplit, parse_stage_split
from dtrun.spec.text import plural

T = TypeVar("T")
TRAIN_SCHEMA = "dtrun.train/1"
PROGRAM_SCHEMA = "dtrun.program/1"  # `dtrun bench -- PROGRAM` (runner/sweep/programresult.py)
PROGRAM_STRATEGY = "your program"  # a program result's strategy: it trains its own way


@dataclass(frozen=True)
class Timing:
    """One all-reduce size in one mode (out of place or in place), as nccl-tests prints it."""

    time_us: float
    algbw: float  # GB/s, 1e9 bytes
    busbw: float  # GB/s
    wrong: int


@dataclass(frozen=True)
class SizeRow:
    size: int  # bytes of the whole array
    count: int  # elements
    dtype: str
    out_of_place: Timing
    in_place: Timing


@dataclass(frozen=True)
class BusbwProbe:
    """A training launch's all-reduce probe: busbw up to the gradients' size, same ranks."""

    gradient_bytes: int
    rows: tuple[SizeRow, ...]

    @property
    def at_gradient(self) -> SizeRow:
        """The largest size measured: the gradients' own, or the cap below it."""
        return self.rows[-1]


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
    busbw: BusbwProbe | None = None  # None: one process, or the probe was turned off
    python_version: str | None = None
    nccl_version: str | None = None
    deepspeed_version: str | None = None
    rank_os: tuple[str, ...] = ()  # each rank's node OS, by rank (empty in older results)
    # How it trained (docs/workloads.md "Training strategies"); results from before strategies
    # read as DDP, or as the ZeRO stage they name.
    strategy: str = "ddp"
    preset: str | None = None  # the model preset the shape started from
    data_parallel: int | None = None  # replicas splitting the global batch (None: world size)
    schedule: str | None = None  # pipeline only, as are the four below
    micro_batches: int | None = None
    pp_size: int | None = None  # ranks per pipeline
    stages: int | None = None
    stages_per_rank: int | None = None
    split: StageSplit | None = None  # a pipeline's stages (None: other strategies, older results)
    peak_memory_max_bytes: int | None = None  # the most any rank used (rank 0's is above)
    proof_kind: str = "data parallel"  # "data parallel", "pipeline" or "single process"
    checks: tuple[ProofCheck, ...] = ()  # what the proof checked (empty in older results)
    step_times: tuple[float, ...] = ()  # rank 0's timed steps, seconds (empty in older results)
    noise: LaunchNoise | None = None  # steal, other load, the straggler probe (None: older)
    program: ProgramFacts | None = None  # `dtrun bench -- PROGRAM`: what was timed, in what

    @property
    def verified(self) -> bool:
        """The ranks were shown to communicate: every check of the strategy's proof passed."""
        return self.params_in_sync and self.allreduce_ok and all(c.ok for c in self.checks)

    @property
    def proof(self) -> str:
        """Whether the ranks were shown to communicate (see the workload's docstring)."""
        if self.program is not None:  # the user's program: its parameters' digests
            if self.program.proof == "in sync":
                nodes = plural(len(set(self.rank_nodes)), "node")
                return f"in sync: {self.world_size} ranks on {nodes}"
            return f"{self.program.proof}: {self.program.proof_why}"
        if self.world_size == 1:
            return "1 process"
        failed = [check.name for check in self.checks if not check.ok]
        if not self.verified:
            return f"FAILED: {', '.join(failed) if failed else 'ranks disagree'}"
        where = f"{self.world_size} ranks on {plural(len(set(self.rank_nodes)), 'node')}"
        if self.proof_kind == "pipeline":
            return f"pipeline verified: {where}"
        return f"in sync: {where}"

    @property
    def strategy_text(self) -> str:
        """'ddp', 'zero3', or 'pipeline (1f1b, 4 micro-batches)'."""
        if self.strategy != "pipeline":
            return self.strategy
        kind = self.split.kind if self.split is not None else "even"
        split = "" if kind == "even" else f", {kind} stages"
        return f"pipeline ({self.schedule}, {self.micro_batches} micro-batches{split})"

    @property
    def layout_text(self) -> str | None:
        """A pipeline's layout at this launch's size: '4 stages (2 per rank) over 2 ranks,
        1 pipeline'; None for the other strategies."""
        if self.strategy != "pipeline":
            return None
        per_rank = f" ({self.stages_per_rank} per rank)" if (self.stages_per_rank or 1) > 1 else ""
        pipelines = self.data_parallel or 1
        return (
            f"{self.stages} stage{'s' if self.stages != 1 else ''}{per_rank} over {self.pp_size} "
            f"rank{'s' if self.pp_size != 1 else ''}, {pipelines} "
            f"pipeline{'s' if pipelines != 1 else ''}"
        )


@dataclass(frozen=True)
class ProgramFacts:
    """What a user program's launch measured (docs/your-training.md)."""

    timing: str  # "optimizer steps" or "whole program"
    unit: str  # "samples", "tokens", "process-steps" or "steps": what the throughput counts
    unit_given: bool  # --samples-per-step / --tokens-per-step, not dtrun's stand-in
    optimizer_steps: int  # every step the lowest rank made, warm-up included
    proof: str  # "in sync", "diverged", "not comparable", "not checked"
    proof_why: str
    gradient_bytes: int  # every trainable parameter's bytes, all dtypes
    # how the ranks' parameters are sharded ("FSDP (DTensor shards)", "FSDP (flat parameter
    # shards)", "DeepSpeed ZeRO stage N"); None: whole on every rank, or the hook saw no steps
    sharded: str | None = None
    probe_error: str | None = None  # --probe: why the all-reduce probe after it failed


@dataclass(frozen=True)
class ProofCheck:
    name: str
    ok: bool
    detail: str


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
            **launch_fields(data),
            params=int(data["model"]["params"]),
            global_batch=int(data["global_batch"]),
            seq_len=int(data["model"]["seq_len"]),
            timed_steps=int(data["timed_steps"]),
            tokens_per_s=float(data["tokens_per_s"]),
            samples_per_s=float(data["samples_per_s"]),
            step_time_p50=float(steps["p50"]),
            step_time_p90=float(steps["p90"]),
            step_times=tuple(float(t) for t in data.get("step_times_s") or ()),
            noise=_noise(data),
            mfu=None if data["mfu"] is None else float(data["mfu"]),
            peak_memory_bytes=int(data["peak_memory_bytes"]),
            loss_first=float(data["loss"]["first"]),
            loss_last=float(data["loss"]["last"]),
            allreduce_ok=bool(comm["allreduce_ok"]),
            initial_params_differed=comm["initial_params_differed"],
            params_in_sync=bool(comm["params_in_sync"]),
            engine=str(data.get("engine", "ddp")),
            zero_stage=None if data.get("zero_stage") is None else int(data["zero_stage"]),
            busbw=_probe(data.get("busbw")),
            deepspeed_version=data.get("deepspeed_version"),
            rank_os=tuple(str(rank.get("os", "")) for rank in data["ranks"]),
            strategy=str(data.get("strategy") or _old_strategy(data)),
            preset=_opt(data["model"].get("preset"), str),
            data_parallel=_opt(data.get("data_parallel"), int),
            schedule=_opt(data.get("schedule"), str),
            micro_batches=_opt(data.get("micro_batches"), int),
            pp_size=_opt(data.get("pp_size"), int),
            stages=_opt(data.get("stages"), int),
            stages_per_rank=_opt(data.get("stages_per_rank"), int),
            split=parse_stage_split(data),
            peak_memory_max_bytes=_opt(data.get("peak_memory_max_bytes"), int),
            proof_kind=str(comm.get("proof", "data parallel")),
            checks=tuple(
                ProofCheck(str(c["name"]), bool(c["ok"]), str(c["detail"]))
                for c in comm.get("checks", ())
            ),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: int(Infinity)
        raise ResultError(
            f"{source} is not a complete {TRAIN_SCHEMA} result",
            why=f"missing or malformed field {exc}",
        ) from None


def parse_program_result(data: Mapping[str, Any], source: str) -> TrainResult:
    """A user program's launch (dtrun.program/1), read as a training result: its throughput
    counts its units (docs/your-training.md "Units") and its proof is the digests'."""
    try:
        steps = data["step_time_s"]
        units, proof = data["units"], data["proof"]
        per_step = int(units["per_step"])
        diverged = str(proof["answer"]) == "diverged"
        facts = ProgramFacts(
            timing=str(data["timing"]),
            unit=str(units["kind"]),
            unit_given=bool(units["given"]),
            optimizer_steps=int(data["optimizer_steps"]),
            proof=str(proof["answer"]),
            proof_why=str(proof["why"]),
            gradient_bytes=_gradient_bytes(data),
            sharded=_program_sharded(data),
            probe_error=_opt(data.get("probe_error"), str),
        )
        p50 = float(steps["p50"])
        return TrainResult(
            **launch_fields(data),
            params=int(data.get("params") or 0),
            global_batch=per_step,
            seq_len=1,
            timed_steps=int(data["timed_steps"]),
            tokens_per_s=per_step / p50,
            samples_per_s=per_step / p50,
            step_time_p50=p50,
            step_time_p90=float(steps["p90"]),
            step_times=tuple(float(t) for t in data["step_times_s"]),
            mfu=None,
            peak_memory_bytes=int(data["peak_memory_bytes"]),
            peak_memory_max_bytes=int(data["peak_memory_max_bytes"]),
            loss_first=math.nan,
            loss_last=math.nan,
            allreduce_ok=True,
            initial_params_differed=None,
            params_in_sync=not diverged,
            engine="program",
            strategy=PROGRAM_STRATEGY,
            proof_kind="program",
            checks=(ProofCheck("parameters agree", not diverged, str(proof["why"])),),
            busbw=_probe(data.get("busbw")),
            noise=_noise(data),
            program=facts,
        )
    except (KeyError, TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
        raise ResultError(
            f"{source} is not a complete {PROGRAM_SCHEMA} result",
            why=f"missing or malformed field {exc}",
        ) from None


def _gradient_bytes(data: Mapping[str, Any]) -> int:
    """The program's gradients' bytes, every dtype together (an AttributeError where the
    field was no object: a traceback in `dtrun report`)."""
    from dtrun.record.readback import describe

    given = data.get("gradient_bytes") or {}
    if not isinstance(given, dict):
        raise TypeError(f"'gradient_bytes' is {describe(given)}, not an object")
    return sum(int(b) for b in given.values())


def _program_sharded(data: Mapping[str, Any]) -> str | None:
    """result.json's ``sharded``; results written before it say it in the proof alone."""
    if "sharded" in data:
        return _opt(data["sharded"], str)
    proof = data["proof"]
    why = str(proof["why"])
    if str(proof["answer"]) == "not comparable" and why.startswith("sharded: "):
        return why.removeprefix("sharded: ")
    return None


def _noise(data: Mapping[str, Any]) -> LaunchNoise | None:
    """The launch's noise figures, each rank named with its node's host where the result
    records one (``ranks[].address``)."""
    ranks = data["ranks"]
    addresses = [None if rank.get("address") is None else str(rank["address"]) for rank in ranks]
    step_s = float(data["step_time_s"]["p50"])
    return parse_noise(data.get("noise"), [str(rank["node"]) for rank in ranks], addresses, step_s)


def launch_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every workload's result has: where and with what the launch ran."""
    return {
        "world_size": int(data["world_size"]),
        "nnodes": int(data["nnodes"]),
        "procs_per_node": int(data["procs_per_node"]),
        "backend": str(data["backend"]),
        "device": str(data["device"]),
        "device_name": str(data["device_name"]),
        "dtype": str(data["dtype"]),
        "torch_version": str(data["torch_version"]),
        "python_version": data.get("python_version"),
        "nccl_version": data.get("nccl_version"),
        "rank_nodes": tuple(str(rank["node"]) for rank in data["ranks"]),
    }


def _old_strategy(data: Mapping[str, Any]) -> str:
    """Results from before strategies: DDP, or DeepSpeed's ZeRO stage."""
    stage = data.get("zero_stage")
    return "ddp" if stage is None else f"zero{stage}"


def _opt(value: Any, kind: Callable[[Any], T]) -> T | None:
    return None if value is None else kind(value)


def _timing(data: Mapping[str, Any]) -> Timing:
    return Timing(
        time_us=float(data["time_us"]),
        algbw=float(data["algbw"]),
        busbw=float(data["busbw"]),
        wrong=int(data["wrong"]),
    )


def size_rows(data: Any) -> tuple[SizeRow, ...]:
    rows = tuple(
        SizeRow(
            size=int(row["size"]),
            count=int(row["count"]),
            dtype=str(row["type"]),
            out_of_place=_timing(row["out_of_place"]),
            in_place=_timing(row["in_place"]),
        )
        for row in data
    )
    if not rows:
        raise ValueError("'rows' is empty")
    return rows


def _probe(data: Mapping[str, Any] | None) -> BusbwProbe | None:
    if data is None:
        return None
    return BusbwProbe(gradient_bytes=int(data["gradient_bytes"]), rows=size_rows(data["rows"]))
