"""The options of what a sweep measures, one group each, with their typer metadata on the fields:
the model, the training strategy, the all-reduce workload and probe, the health gate, and what
your program's steps process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from dtrun.cli.groups import spec_from
from dtrun.cli.options import no_default
from dtrun.spec.bounds import within
from dtrun.spec.request import (
    UNIT_BOUNDS,
    AllreduceSpec,
    HealthGate,
    ModelSpec,
    PipelineSchedule,
    StageSplit,
    StrategySpec,
    TrainDtype,
    UnitKind,
)

# What one step of your program processes (ProgramOptions): runner/spec/request.py
SAMPLES_PER_STEP = UNIT_BOUNDS[UnitKind.SAMPLES]
TOKENS_PER_STEP = UNIT_BOUNDS[UnitKind.TOKENS]

# `dtrun bench` only: the training workload's model and strategy, each in a help panel of its
# own. The names are written out so that `dtrun --help` imports no registry; tests compare them.
PRESET_NAMES = "tiny, mini, 125m, 350m, 760m, 1.3b"  # = presets.PRESETS


STRATEGY_NAMES = "ddp, fsdp, horovod, zero1, zero2, zero3, pipeline"  # = strategies.STRATEGIES


_MODEL = "Model"


_STRATEGY = "Training strategy"


# `dtrun bench` only: the all-reduce measurement, the health gate and the report.
_AR = "All-reduce (--workload allreduce, and each training launch's probe)"


_GATE = "Health gate (before the sweep)"


_AR_DEFAULTS = AllreduceSpec()


# Where an option's name differs from its spec field's (spec field="option field"); every
# other option reaches its spec under its own name (runner/cli/groups.py spec_from).
STRATEGY_NAMES_OF = {"name": "strategy"}
ALLREDUCE_NAMES_OF = {"dtype": "ar_dtype", "warmup": "ar_warmup", "iters": "ar_iters"}
GATE_NAMES_OF = {
    "enabled": "health_gate",
    "threshold_gbs": "health_threshold",
    "size": "health_size",
}


@dataclass(frozen=True)
class ModelOptions:
    preset: Annotated[
        str,
        typer.Option(
            help=f"GPT shape: {PRESET_NAMES}; the options below replace its fields.",
            rich_help_panel=_MODEL,
        ),
    ] = "tiny"
    layers: Annotated[
        int | None,
        no_default(
            _MODEL, f"Transformer layers (tiny: {ModelSpec.layers}){within(ModelSpec, 'layers')}."
        ),
    ] = None
    d_model: Annotated[
        int | None,
        no_default(
            _MODEL, f"Model width (tiny: {ModelSpec.d_model}){within(ModelSpec, 'd_model')}."
        ),
    ] = None
    heads: Annotated[
        int | None,
        no_default(
            _MODEL,
            f"Attention heads, dividing the width (tiny: {ModelSpec.heads})"
            f"{within(ModelSpec, 'heads')}.",
        ),
    ] = None
    seq_len: Annotated[
        int | None,
        no_default(
            _MODEL,
            f"Tokens per sequence (tiny: {ModelSpec.seq_len}){within(ModelSpec, 'seq_len')}.",
        ),
    ] = None
    vocab: Annotated[
        int | None,
        no_default(
            _MODEL, f"Vocabulary size (tiny: {ModelSpec.vocab}){within(ModelSpec, 'vocab')}."
        ),
    ] = None


@dataclass(frozen=True)
class StrategyOptions:
    strategy: Annotated[
        str | None,
        no_default(
            _STRATEGY,
            f"How the model trains: {STRATEGY_NAMES} "
            "(default: ddp; zero2 under deepspeed; horovod under horovodrun).",
        ),
    ] = None
    schedule: Annotated[
        PipelineSchedule | None,
        no_default(_STRATEGY, "pipeline: the schedule (default: 1f1b)."),
    ] = None
    micro_batches: Annotated[
        int | None,
        no_default(
            _STRATEGY,
            "pipeline: micro-batches per step, dividing the batch (default: 4)"
            f"{within(StrategySpec, 'micro_batches')}.",
        ),
    ] = None
    pp_size: Annotated[
        int | None,
        no_default(
            _STRATEGY,
            "pipeline: ranks per pipeline; the rest are data-parallel (default: every rank)"
            f"{within(StrategySpec, 'pp_size')}.",
        ),
    ] = None
    stages_per_rank: Annotated[
        int | None,
        no_default(
            _STRATEGY,
            "pipeline: model stages per rank (default: 1; interleaved-1f1b: 2)"
            f"{within(StrategySpec, 'stages_per_rank')}.",
        ),
    ] = None
    stage_split: Annotated[
        StageSplit | None,
        no_default(
            _STRATEGY,
            "pipeline: blocks per stage, even (default) or balanced (the slowest stage by FLOPs, "
            "embedding and LM head counted, made as fast as it can be).",
        ),
    ] = None
    dtype: Annotated[
        TrainDtype,
        typer.Option(
            help="What training computes in: auto is bfloat16 on GPUs and float32 on CPUs; "
            "bfloat16 on CPUs is emulated (slower), for trying the code path.",
            rich_help_panel=_STRATEGY,
        ),
    ] = TrainDtype.AUTO

    @property
    def spec(self) -> StrategySpec:
        return spec_from(self, StrategySpec, **STRATEGY_NAMES_OF)


@dataclass(frozen=True)
class AllreduceOptions:
    sizes: Annotated[
        str | None,
        typer.Option(
            help="Message sizes: MIN:MAX doubling (nccl-tests -b/-e) or a list like 1M,16M. "
            "Default 4K:16M on CPUs, 4K:1G on GPUs.",
            rich_help_panel=_AR,
        ),
    ] = None
    ar_dtype: Annotated[
        str, typer.Option("--ar-dtype", help="float32, bfloat16 or float16.", rich_help_panel=_AR)
    ] = _AR_DEFAULTS.dtype
    ar_iters: Annotated[
        int,
        typer.Option(
            "--ar-iters",
            help=f"Timed operations per size{within(AllreduceSpec, 'iters')}.",
            rich_help_panel=_AR,
        ),
    ] = _AR_DEFAULTS.iters
    ar_warmup: Annotated[
        int,
        typer.Option(
            "--ar-warmup",
            help="Untimed operations at the largest and smallest size"
            f"{within(AllreduceSpec, 'warmup')}.",
            rich_help_panel=_AR,
        ),
    ] = _AR_DEFAULTS.warmup
    busbw: Annotated[
        bool,
        typer.Option(
            "--busbw/--no-busbw",
            help="After training, time all-reduces up to the gradients' size on the same ranks "
            "(the report's 'where scaling is lost').",
            rich_help_panel=_AR,
        ),
    ] = True

    @property
    def spec(self) -> AllreduceSpec:
        return spec_from(self, AllreduceSpec, **ALLREDUCE_NAMES_OF)


@dataclass(frozen=True)
class GateOptions:
    health_gate: Annotated[
        bool,
        typer.Option(
            "--health-gate/--no-health-gate",
            help="Check each node's single-node all-reduce busbw against the size's pass mark "
            "first (skipped where none is known).",
            rich_help_panel=_GATE,
        ),
    ] = True
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Stop (exit 4) instead of warning when a node is below the mark.",
            rich_help_panel=_GATE,
        ),
    ] = False
    health_threshold: Annotated[
        float | None,
        typer.Option(
            help="Pass mark in GB/s busbw (default: the catalog's for the size)"
            f"{within(HealthGate, 'threshold_gbs')}.",
            rich_help_panel=_GATE,
        ),
    ] = None
    health_size: Annotated[
        str | None,
        typer.Option(
            help="The gate's message size (default: the catalog's, e.g. 8G).", rich_help_panel=_GATE
        ),
    ] = None

    @property
    def spec(self) -> HealthGate:
        return spec_from(self, HealthGate, **GATE_NAMES_OF)


@dataclass(frozen=True)
class ProgramOptions:
    """`dtrun bench -- PROGRAM`: what one optimizer step of your program processes."""

    samples_per_step: Annotated[
        int | None,
        SAMPLES_PER_STEP,
        typer.Option(
            help="Your program: samples one optimizer step processes, all processes together "
            f"(with --per-process: each process); gives samples/s{SAMPLES_PER_STEP.within}.",
            rich_help_panel="Your program",
        ),
    ] = None
    tokens_per_step: Annotated[
        int | None,
        TOKENS_PER_STEP,
        typer.Option(
            help="Your program: tokens one optimizer step processes, all processes together "
            f"(with --per-process: each process); gives tokens/s{TOKENS_PER_STEP.within}.",
            rich_help_panel="Your program",
        ),
    ] = None
    step_pattern: Annotated[
        str | None,
        typer.Option(
            help="Your program: a regular expression matched on node 0's output, one match "
            "per step; its group (?P<seconds>...) or (?P<ms>...) is the step's time, else the "
            "time between matches is.",
            rich_help_panel="Your program",
        ),
    ] = None
    probe: Annotated[
        bool,
        typer.Option(
            "--probe",
            help="Your program: after each launch, time all-reduces up to its gradients' size "
            "on the same ranks, for the report's 'where scaling is lost'.",
            rich_help_panel="Your program",
        ),
    ] = False
    per_process: Annotated[
        bool,
        typer.Option(
            "--per-process",
            help="--samples-per-step / --tokens-per-step count one process's share.",
            rich_help_panel="Your program",
        ),
    ] = False
