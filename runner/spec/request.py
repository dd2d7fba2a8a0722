"""What the user asked: a `dtrun bench` sweep (BenchSpec) or a `dtrun run` (RunSpec), with the
model, strategy, launcher and measurement settings they name. Frozen values, checked by
dtrun.plan.resolve; each number's range on its field (runner/spec/bounds.py); stdlib,
dtrun.redact and dtrun.spec only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field, replace
from enum import StrEnum
from typing import Annotated, Any

from dtrun.redact import Redactor, redact_args, redact_env, secret_args, secret_values
from dtrun.spec.bounds import Bound, nodes_range, seconds
from dtrun.spec.cluster import Accelerator
from dtrun.spec.outcome import SuccessRule


class ScalingMode(StrEnum):
    """How the work changes with the node count (docs/facts.md §7)."""

    WEAK = "weak"  # fixed work per process: the global batch grows with the world size
    STRONG = "strong"  # fixed total work: the global batch is split across the world


@dataclass(frozen=True)
class ModelSpec:
    """A GPT-style decoder: layers x (attention + MLP), tied embedding."""

    layers: Annotated[int, Bound("--layers", 1, 1024)] = 2
    d_model: Annotated[int, Bound("--d-model", 1, 1_048_576)] = 128
    heads: Annotated[int, Bound("--heads", 1, 65536)] = 4
    seq_len: Annotated[int, Bound("--seq-len", 1, 16_777_216)] = 64
    vocab: Annotated[int, Bound("--vocab", 1, 16_777_216)] = 1024
    preset: str | None = None  # the preset (runner/plan/presets.py) the shape started from


class PipelineSchedule(StrEnum):
    """torch.distributed.pipelining schedules the pipeline strategy can run."""

    GPIPE = "gpipe"  # every forward, then every backward
    ONE_F_ONE_B = "1f1b"  # one forward, one backward in the steady state
    INTERLEAVED_1F1B = "interleaved-1f1b"  # 1F1B over 2+ stages per rank (Megatron-LM)


class StageSplit(StrEnum):
    """How a pipeline's stages share the GPT's blocks (runner/workloads/stagecost.py)."""

    EVEN = "even"  # as evenly as the layers allow; the embedding and head on the end stages
    BALANCED = "balanced"  # the slowest stage by training FLOPs (embedding, head) the cheapest


class TrainDtype(StrEnum):
    """What the training workload computes in (docs/workloads.md "Training strategies")."""

    AUTO = "auto"  # bfloat16 on GPUs, float32 on CPUs
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"  # autocast (DeepSpeed: its bf16 mode); emulated, slower, on CPUs


@dataclass(frozen=True)
class StrategySpec:
    """How the built-in training workload trains (docs/workloads.md "Training strategies").

    None means "not given": the plan resolves the defaults per point, and refuses pipeline
    settings given to another strategy.
    """

    name: str | None = None  # ddp, fsdp, zero1, zero2, zero3, pipeline; None: the launcher's
    schedule: PipelineSchedule | None = None  # pipeline; None: 1f1b
    # pipeline: micro-batches per step; None: 4
    micro_batches: Annotated[int | None, Bound("--micro-batches", 1, 65536)] = None
    # pipeline: ranks per pipeline; None: every rank of the point
    pp_size: Annotated[int | None, Bound("--pp-size", 1, 1_048_576)] = None
    # pipeline; None: 1, or 2 for interleaved-1f1b
    stages_per_rank: Annotated[int | None, Bound("--stages-per-rank", 1, 1024)] = None
    stage_split: StageSplit | None = None  # pipeline; None: even


class Rendezvous(StrEnum):
    """How torchrun's agents find each other."""

    C10D = "c10d"  # a c10d store on the first node; torchrun numbers the nodes itself
    STATIC = "static"  # fixed --node-rank per node, master address and port given


class HorovodController(StrEnum):
    GLOO = "gloo"
    MPI = "mpi"


class TfStrategy(StrEnum):
    """The tf.distribute strategy the TF_CONFIG files are laid out for."""

    MULTI_WORKER_MIRRORED = "multi-worker-mirrored"  # one worker per node
    PARAMETER_SERVER = "parameter-server"  # workers, parameter servers and a chief


@dataclass(frozen=True)
class LauncherOptions:
    """Settings that only some launchers read; each launcher reads its own."""

    rendezvous: Rendezvous = Rendezvous.C10D  # torchrun
    # The ZeRO stage of the built-in training workload, short for --strategy zeroN; None: not
    # given (the deepspeed launcher then trains with ZeRO 2).
    zero_stage: int | None = None
    horovod_controller: HorovodController = HorovodController.GLOO  # horovodrun
    tf_strategy: TfStrategy = TfStrategy.MULTI_WORKER_MIRRORED  # tensorflow
    # tensorflow, parameter-server strategy: parameter server tasks
    tf_ps: Annotated[int, Bound("--tf-ps", 1, 1024)] = 1


class PlatformEnv(StrEnum):
    """A managed platform whose own environment variables --platform-env exports on every node,
    so programs written for it run unchanged (runner/plan/platforms.py, docs/launchers.md)."""

    AZUREML = "azureml"  # Azure Machine Learning
    VOLCANO = "volcano"  # Volcano Engine's machine learning platform (MLP_*)
    SAGEMAKER = "sagemaker"  # Amazon SageMaker training (SM_*, resourceconfig.json)


class LauncherName(StrEnum):
    """How processes are started on the nodes (runner/plan/launchers/, one module each)."""

    TORCHRUN = "torchrun"
    DEEPSPEED = "deepspeed"
    HOROVODRUN = "horovodrun"
    MPIRUN = "mpirun"
    TENSORFLOW = "tensorflow"
    TORCHDISTRIBUTOR = "torchdistributor"  # Spark's TorchDistributor (--spark only)
    HOROVOD_SPARK = "horovod-spark"  # horovod.spark.run (--spark only)


class Framework(StrEnum):
    """The distributed library a built-in workload's processes train with: what a launcher
    starts by default and what a training strategy needs. It picks the workload's module
    (runner/plan/workloads.py). Not to be confused with an engine (embedded, SSH, Slurm: where
    the nodes come from and how scripts start on them) or the workloads' training engine (DDP,
    FSDP, pipeline, DeepSpeed), which result.json records as "engine"."""

    TORCH = "torch"  # torch.distributed: dtrun.workloads.train (DDP, FSDP, pipelines)
    DEEPSPEED = "deepspeed"  # DeepSpeed's engine: dtrun.workloads.train_deepspeed (ZeRO 1-3)
    HOROVOD = "horovod"  # Horovod's DistributedOptimizer: dtrun.workloads.train_horovod


class ProgramKind(StrEnum):
    MODULE = "module"  # python -m TARGET ARGS, with the nodes' Python
    SCRIPT = "script"  # python TARGET ARGS, with the nodes' Python
    EXECUTABLE = "executable"  # TARGET ARGS, run as it is


@dataclass(frozen=True)
class Program:
    """What every process of a launch runs; each launcher places it in its own syntax."""

    kind: ProgramKind
    target: str
    args: tuple[str, ...] = ()

    def secrets(self) -> tuple[str, ...]:
        """Its arguments' secret values; its target's too, a command line quoted as one word
        (`dtrun run -- "train --hf-token X"`) being run as a program's name."""
        return secret_args((self.target, *self.args))

    def redacted(self, hide: Redactor) -> Program:
        """Read with its target, the tool whose flags say which argument is a password
        (`dtrun run -- curl -u bob:PW`: a short PW is not looked for as free text)."""
        target, *args = redact_args((self.target, *self.args), hide)
        return replace(self, target=target, args=tuple(args))


@dataclass(frozen=True)
class AllreduceSpec:
    """The all-reduce measurement, in nccl-tests' all_reduce_perf terms (-b/-e, -d, -w, -n)."""

    sizes: str | None = None  # "4K:64M" doubling or "1M,16M"; None: the accelerator's default
    dtype: str = "float32"
    warmup: Annotated[int, Bound("--ar-warmup", 0, 1_000_000)] = 5
    iters: Annotated[int, Bound("--ar-iters", 1, 1_000_000)] = 20

    def sizes_for(self, accelerator: Accelerator) -> str:
        """The message sizes to measure: the asked ones, or a range that finishes on this
        accelerator in seconds (gloo over loopback moves ~1 GB/s; NCCL hundreds)."""
        if self.sizes is not None:
            return self.sizes
        return "4K:1G" if accelerator is Accelerator.CUDA else "4K:16M"


@dataclass(frozen=True)
class HealthGate:
    """A single-node all-reduce on every node before the sweep, against an expected busbw."""

    enabled: bool = True
    strict: bool = False  # fail the sweep below the threshold, instead of warning
    # None: the catalog's pass mark for the size
    threshold_gbs: Annotated[
        float | None, Bound("--health-threshold", 0, 1_000_000, "", "GB/s", above=True)
    ] = None
    size: str | None = None  # message size; None: the catalog's (8G, as Azure's health check)


@dataclass(frozen=True)
class LaunchRequest:
    """What `dtrun bench` and `dtrun run` share about starting processes on the nodes."""

    run_id: str
    _: KW_ONLY
    launcher: str = "torchrun"  # a LauncherName, as typed; dtrun.plan.resolve checks it
    procs_per_node: Annotated[int, Bound("--procs-per-node", 1, 1024)] = 1
    env: tuple[tuple[str, str], ...] = ()  # user --env KEY=VALUE, in order; later keys win
    rdzv_port: Annotated[int, Bound("--port", 1, 65534)] = 29400
    launch: LauncherOptions = field(default_factory=LauncherOptions)
    nccl_debug: bool = False  # NCCL_DEBUG=INFO on every node
    cluster_env: bool = False  # also export the MPI-style cluster variables (docs/launchers.md)
    platform_env: tuple[PlatformEnv, ...] = ()  # also export these platforms' variables
    success: SuccessRule = SuccessRule.ALL  # when a launch has succeeded

    @property
    def master_port(self) -> int:
        """MASTER_PORT sits next to the rendezvous port."""
        return self.rdzv_port + 1

    def secrets(self) -> tuple[str, ...]:
        """The values ``redacted`` hides, for copies of files that hold them (results store)."""
        return secret_values(self.env)


# --until-decided's default --max-launches: 5 looks (after 2 to 6 launches), each at 99%
# (runner/report/sequential.py); a point that decides in none costs 6/5 of --repeat's default.
DEFAULT_MAX_LAUNCHES = 6
# ... on the embedded cluster, where a launch costs seconds of this machine and no node-hours:
# its ranks share the cores, so its launches spread more (docs/report.md "Defaults")
EMBEDDED_MAX_LAUNCHES = 12
MIN_LAUNCHES = 2  # one launch shows nothing of how much a launch moves: no interval
# manifest.json's bench.noisy_launches: the sweep left launches timed in steal or other load out
# of its intervals (runner/report/launchnoise.py); a sweep recorded before kept them all
NOISY_LEFT_OUT = "left out"


def leaves_out(bench: Mapping[str, Any]) -> bool:
    """Whether a manifest's ``bench`` is a sweep's that left its disturbed launches out."""
    return bench.get("noisy_launches") == NOISY_LEFT_OUT


@dataclass(frozen=True)
class BenchSpec(LaunchRequest):
    """Everything the user asked of one `dtrun bench` sweep."""

    node_counts: Annotated[tuple[int, ...], nodes_range("--nodes")] = (1, 2)
    workload: str = "train"
    mode: ScalingMode = ScalingMode.WEAK
    # Defaults chosen to reach a verdict (docs/report.md, "Defaults"): 50 timed steps a launch
    # and 5 launches a node count, so the interval holds the noise between launches too.
    steps: Annotated[int, Bound("--steps", 1, 1_000_000)] = 60
    warmup: Annotated[int, Bound("--warmup", 0, 999_999)] = 10
    # --repeat: the fixed launches a node count takes (not until decided)
    repeat: Annotated[int, Bound("--repeat", 1, 1000)] = 5
    # --until-decided: launch at each node count until its efficiency interval decides (at
    # least 2 launches, at most ``max_launches``; runner/report/sequential.py)
    until_decided: bool = False
    # --max-launches (read only until decided); its ceiling: --repeat's
    max_launches: Annotated[int, Bound("--max-launches", MIN_LAUNCHES, 1000)] = DEFAULT_MAX_LAUNCHES
    # per process in weak mode; per process at the smallest node count in strong
    batch: Annotated[int, Bound("--batch", 1, 1_048_576)] = 8
    # strong mode: the fixed global batch (default from batch)
    global_batch: Annotated[int | None, Bound("--global-batch", 1, 16_777_216)] = None
    model: ModelSpec = field(default_factory=ModelSpec)
    timeout_s: Annotated[float, seconds("--timeout")] = 600.0
    strategy: StrategySpec = field(default_factory=StrategySpec)  # the train workload's
    dtype: TrainDtype = TrainDtype.AUTO  # the train workload's arithmetic
    allreduce: AllreduceSpec = field(default_factory=AllreduceSpec)
    busbw: bool = True  # training launches also measure all-reduce busbw at the gradient size
    health: HealthGate = field(default_factory=HealthGate)
    # the report's time-to-train projection: tokens to train on
    project_tokens: Annotated[int, Bound("--project-tokens", 1, 10**15)] = 10**9
    # the report's verdicts: a node count scales when its efficiency's whole 95% interval is
    # at or above this fraction (docs/report.md "Intervals and verdicts")
    target_efficiency: Annotated[
        float, Bound("--target-efficiency", 0, 1, "a fraction", above=True)
    ] = 0.9
    # What a node costs an hour (USD), over the catalog's list price (docs/report.md "Cost"),
    # and the most the sweep's estimate may come to before it is refused. A price under a
    # hundredth of a cent (1e-320 was taken) is a slip, not a rate.
    price_per_node_hour: Annotated[
        float | None, Bound("--price-per-node-hour", 0.0001, 100_000, "", "USD")
    ] = None
    max_cost: Annotated[
        float | None, Bound("--max-cost", 0, 1_000_000_000, "", "USD", above=True)
    ] = None
    # `dtrun bench -- PROGRAM`: the user's own program instead of a built-in workload
    # (docs/your-training.md), and what one of its optimizer steps processes
    program: Program | None = None
    units: StepUnits | None = None
    # a regular expression matched on node 0's output, one match per step: its group
    # `seconds` or `ms` is the step's time, else the time between matches (docs/your-training.md)
    step_pattern: str | None = None
    probe: bool = False  # after each launch of the program, the all-reduce probe on its ranks

    @property
    def launches(self) -> int:
        """The most launches a node count takes: --max-launches until decided, else --repeat."""
        return self.max_launches if self.until_decided else self.repeat

    def redacted(self) -> BenchSpec:
        """This spec with the values of secret-looking --env variables (and program
        arguments) replaced, and their fragments masked wherever another value repeats them."""
        hide = Redactor.of(self.secrets())
        program = self.program.redacted(hide) if self.program is not None else None
        return replace(self, env=redact_env(self.env, hide), program=program)

    def secrets(self) -> tuple[str, ...]:
        return super().secrets() + (self.program.secrets() if self.program is not None else ())


class UnitKind(StrEnum):
    SAMPLES = "samples"
    TOKENS = "tokens"


# dtrun predict's --busbw, as --health-threshold's: a busbw above 0, far above any fabric's
BUSBW = Bound("--busbw", 0, 1_000_000, "", "GB/s", above=True)

# What one step of a program processes (--samples-per-step, --tokens-per-step): past the most
# a step of any model trained processes
UNIT_BOUNDS = {
    UnitKind.SAMPLES: Bound("--samples-per-step", 1, 10**12),
    UnitKind.TOKENS: Bound("--tokens-per-step", 1, 10**15),
}


@dataclass(frozen=True)
class StepUnits:
    """What one optimizer step of the user's program processes: ``count`` samples or tokens,
    for the whole step (every process together) or for each process."""

    kind: UnitKind
    count: int
    per_process: bool = False

    def per_step(self, world_size: int) -> int:
        return self.count * world_size if self.per_process else self.count


@dataclass(frozen=True)
class RunSpec(LaunchRequest):
    """Everything the user asked of one `dtrun run`: their own program, on every node."""

    program: Program
    nodes: Annotated[int, nodes_range("--nodes")] = 1
    timeout_s: Annotated[float | None, seconds("--timeout")] = None  # None: as long as it runs

    def redacted(self) -> RunSpec:
        """This spec with secret-looking --env values and program arguments replaced, and
        their fragments masked wherever another value or argument repeats them."""
        hide = Redactor.of(self.secrets())
        return replace(self, env=redact_env(self.env, hide), program=self.program.redacted(hide))

    def secrets(self) -> tuple[str, ...]:
        return super().secrets() + self.program.secrets()
