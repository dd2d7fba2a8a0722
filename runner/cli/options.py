"""Every option of the launch commands, defined once (typer Annotated aliases), and the option
groups (frozen dataclasses, spread into commands by runner.cli.groups) that commands share:
``Where`` (bench, run, exec), ``Launching`` (bench, run) and bench's own groups."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from runner.errors import UsageError
from runner.spec.bounds import within
from runner.spec.outcome import SuccessRule
from runner.spec.request import (
    AllreduceSpec,
    HealthGate,
    HorovodController,
    LauncherOptions,
    ModelSpec,
    PipelineSchedule,
    Rendezvous,
    StageSplit,
    StrategySpec,
    TfStrategy,
    TrainDtype,
)
from runner.spec.slurm import DEFAULT_QUEUE_TIMEOUT_S, SlurmRequest

# = LAUNCHERS, tested
LAUNCHER_NAMES = (
    "torchrun, deepspeed, horovodrun, mpirun, tensorflow, torchdistributor, horovod-spark"
)
_DEFAULTS = LauncherOptions()


# bench's --help, grouped by where it runs, what it runs, how it measures and what it writes
# (the model, strategy, all-reduce, gate, Slurm, cost and program panels are below)
WHERE_PANEL = "Where it runs (default: the embedded cluster on this machine)"
WHAT_PANEL = "What it runs"
HOW_PANEL = "How it measures"
_OUT = "What it writes"


def _no_default(panel: str, help: str) -> Any:  # typer.Option's own return type
    """An option in ``panel`` whose default (None) is explained in its help, not shown."""
    return typer.Option(help=help, rich_help_panel=panel, show_default=False)


Launcher = Annotated[
    str,
    typer.Option(
        help=f"How processes are started on the nodes: {LAUNCHER_NAMES}.",
        rich_help_panel=WHAT_PANEL,
    ),
]
ProcsPerNode = Annotated[
    int,
    typer.Option(
        "--procs-per-node",
        "-p",
        help=f"Processes (GPUs) per node{within('--procs-per-node')}.",
        rich_help_panel=WHAT_PANEL,
    ),
]
Env = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        "-e",
        help="KEY=VALUE exported on every node; repeatable; wins.",
        rich_help_panel=WHAT_PANEL,
    ),
]
Port = Annotated[
    int,
    typer.Option(
        help=f"Rendezvous port on the first node (MASTER_PORT is port+1){within('--port')}.",
        rich_help_panel=WHAT_PANEL,
    ),
]
Output = Annotated[
    Path,
    typer.Option("--output", "-o", help="Directory that receives <run-id>/.", rich_help_panel=_OUT),
]
RunId = Annotated[
    str | None, typer.Option(help="Name of this run (default: time-stamped).", rich_help_panel=_OUT)
]
Results = Annotated[
    str | None,
    typer.Option(
        metavar="s3://BUCKET/PREFIX",
        help="Also upload the run directory to s3://BUCKET/PREFIX/<run-id>/ when it ends, "
        "however it ends; the local copy is kept. AWS credentials from the usual chain, "
        "checked before anything runs (not in a dry run).",
        rich_help_panel=_OUT,
    ),
]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print every node's script and launch file; run nothing.",
        rich_help_panel=_OUT,
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Do not stream node output (logs are kept).", rich_help_panel=_OUT
    ),
]
NcclDebug = Annotated[
    bool,
    typer.Option(
        "--nccl-debug", help="Export NCCL_DEBUG=INFO on every node.", rich_help_panel=WHAT_PANEL
    ),
]
ClusterEnv = Annotated[
    bool,
    typer.Option(
        "--cluster-env",
        help="Also export the MPI-style CLUSTER_* variables (workers, GPUs per worker, "
        "host:slots list, hostfile, processes).",
        rich_help_panel=WHAT_PANEL,
    ),
]
PlatformEnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--platform-env",
        metavar="PLATFORMS",
        help="Also export these platforms' own variables on every node, so programs written "
        "for them run unchanged: azureml, volcano, sagemaker (comma-separated or repeated).",
        show_default=False,
        rich_help_panel=WHAT_PANEL,
    ),
]
SuccessOpt = Annotated[
    SuccessRule,
    typer.Option(
        "--success",
        help="When a launch succeeds: all (every node exits 0) or worker0 (node 0 exits 0; "
        "the nodes still running are then stopped, as on Volcano Engine).",
        rich_help_panel=WHAT_PANEL,
    ),
]
RendezvousOpt = Annotated[
    Rendezvous,
    typer.Option(
        "--rendezvous",
        help="torchrun: c10d rendezvous, or static --node-rank.",
        rich_help_panel=WHAT_PANEL,
    ),
]
ZeroStage = Annotated[
    int | None,
    typer.Option(
        "--zero-stage",
        help="ZeRO stage (1, 2, 3) of the train workload: --strategy zeroN.",
        rich_help_panel=WHAT_PANEL,
    ),
]
HorovodControllerOpt = Annotated[
    HorovodController,
    typer.Option(
        "--horovod-controller",
        help="horovodrun: start ranks with gloo or mpi.",
        rich_help_panel=WHAT_PANEL,
    ),
]
TfStrategyOpt = Annotated[
    TfStrategy,
    typer.Option(
        "--tf-strategy", help="tensorflow: the TF_CONFIG layout.", rich_help_panel=WHAT_PANEL
    ),
]
TfPs = Annotated[
    int,
    typer.Option(
        "--tf-ps",
        help=f"tensorflow, parameter-server: parameter server tasks{within('--tf-ps')}.",
        rich_help_panel=WHAT_PANEL,
    ),
]


# `dtrun bench` only: the training workload's model and strategy, each in a help panel of its
# own. The names are written out so that `dtrun --help` imports no registry; tests compare them.
PRESET_NAMES = "tiny, mini, 125m, 350m, 760m, 1.3b"  # = presets.PRESETS
STRATEGY_NAMES = "ddp, fsdp, horovod, zero1, zero2, zero3, pipeline"  # = strategies.STRATEGIES
_MODEL = "Model"
_STRATEGY = "Training strategy"

Preset = Annotated[
    str,
    typer.Option(
        help=f"GPT shape: {PRESET_NAMES}; the options below replace its fields.",
        rich_help_panel=_MODEL,
    ),
]
Layers = Annotated[
    int | None,
    _no_default(_MODEL, f"Transformer layers (tiny: {ModelSpec.layers}){within('--layers')}."),
]
DModel = Annotated[
    int | None,
    _no_default(_MODEL, f"Model width (tiny: {ModelSpec.d_model}){within('--d-model')}."),
]
Heads = Annotated[
    int | None,
    _no_default(
        _MODEL,
        f"Attention heads, dividing the width (tiny: {ModelSpec.heads}){within('--heads')}.",
    ),
]
SeqLen = Annotated[
    int | None,
    _no_default(_MODEL, f"Tokens per sequence (tiny: {ModelSpec.seq_len}){within('--seq-len')}."),
]
Vocab = Annotated[
    int | None,
    _no_default(_MODEL, f"Vocabulary size (tiny: {ModelSpec.vocab}){within('--vocab')}."),
]
Dtype = Annotated[
    TrainDtype,
    typer.Option(
        help="What training computes in: auto is bfloat16 on GPUs and float32 on CPUs; "
        "bfloat16 on CPUs is emulated (slower), for trying the code path.",
        rich_help_panel=_STRATEGY,
    ),
]
Strategy = Annotated[
    str | None,
    _no_default(
        _STRATEGY,
        f"How the model trains: {STRATEGY_NAMES} "
        "(default: ddp; zero2 under deepspeed; horovod under horovodrun).",
    ),
]
Schedule = Annotated[
    PipelineSchedule | None,
    _no_default(_STRATEGY, "pipeline: the schedule (default: 1f1b)."),
]
MicroBatches = Annotated[
    int | None,
    _no_default(
        _STRATEGY,
        "pipeline: micro-batches per step, dividing the batch (default: 4)"
        f"{within('--micro-batches')}.",
    ),
]
PpSize = Annotated[
    int | None,
    _no_default(
        _STRATEGY,
        "pipeline: ranks per pipeline; the rest are data-parallel (default: every rank)"
        f"{within('--pp-size')}.",
    ),
]
StagesPerRank = Annotated[
    int | None,
    _no_default(
        _STRATEGY,
        "pipeline: model stages per rank (default: 1; interleaved-1f1b: 2)"
        f"{within('--stages-per-rank')}.",
    ),
]
StageSplitOpt = Annotated[
    StageSplit | None,
    _no_default(
        _STRATEGY,
        "pipeline: blocks per stage, even (default) or balanced (the slowest stage by FLOPs, "
        "embedding and LM head counted, made as fast as it can be).",
    ),
]


# Where to run: none of these is the embedded cluster.
Hosts = Annotated[
    str | None,
    typer.Option(
        metavar="FILE|HOSTS",
        help="Run on the machines of a hosts file (YAML, MPI `HOST slots=N`, `h1:4,h2:4` lists) "
        'or on these hosts: h1:4,h2:4 (as Horovod -H, "$MLP_MPI_HOSTS").',
        rich_help_panel=WHERE_PANEL,
    ),
]
Stack = Annotated[
    str | None,
    typer.Option(
        "--stack",
        "-s",
        help="Run on the cluster of this Pulumi stack.",
        rich_help_panel=WHERE_PANEL,
    ),
]
OutputsFile = Annotated[
    Path | None,
    typer.Option(
        "--outputs",
        help="Run on the cluster whose outputs this file holds (dtrun outputs --save).",
        rich_help_panel=WHERE_PANEL,
    ),
]
AcceptNewHostKeys = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="Record host keys not yet in known_hosts (never a changed one) and say so.",
        rich_help_panel=WHERE_PANEL,
    ),
]
Check = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Before every launch, check GPUs, InfiniBand ports and Python on nodes.",
        rich_help_panel=WHERE_PANEL,
    ),
]
ReadyTimeout = Annotated[
    float,
    typer.Option(
        help="Stacks: seconds to wait for nodes to boot, register and answer before giving up"
        f"{within('--ready-timeout')}.",
        rich_help_panel=WHERE_PANEL,
    ),
]
ConnectTimeout = Annotated[
    float,
    typer.Option(
        help="Hosts files: seconds every node has to answer SSH (tried every 2 s) before the "
        "run fails, naming the nodes that did not"
        f"{within('--connect-timeout')}.",
        rich_help_panel=WHERE_PANEL,
    ),
]
LocalNodes = Annotated[
    int | None,
    typer.Option(
        help="Size of the embedded cluster, or of the allocation --slurm asks for outside one "
        "(default: the nodes the command needs; exec: 2)"
        f"{within('--local-nodes')}.",
        rich_help_panel=WHERE_PANEL,
    ),
]
Teardown = Annotated[
    bool,
    typer.Option(
        "--teardown/--keep",
        help="With --stack: destroy it afterwards, even after a failure or Ctrl-C (default keep).",
        rich_help_panel=WHERE_PANEL,
    ),
]
# --slurm and the sbatch options passed through to the allocation dtrun asks for.
_SLURM = "Slurm (--slurm)"


def _sbatch(flag: str, what: str) -> Any:  # typer.Option's own return type
    return typer.Option(
        f"--{flag}",
        help=f"--slurm: sbatch --{flag} of the allocation dtrun asks for ({what}).",
        rich_help_panel=_SLURM,
        show_default=False,
    )


SlurmOpt = Annotated[
    bool,
    typer.Option(
        "--slurm",
        help="Run on Slurm: inside the allocation dtrun runs in (salloc, sbatch), or one it asks "
        "for with the largest node count and cancels at the end; every launch is an srun step.",
        rich_help_panel=_SLURM,
    ),
]
Partition = Annotated[str | None, _sbatch("partition", "a partition from sinfo")]
Account = Annotated[str | None, _sbatch("account", "the account charged")]
Qos = Annotated[str | None, _sbatch("qos", "a quality of service")]
TimeLimit = Annotated[str | None, _sbatch("time", "its time limit, e.g. 30 or 2:00:00")]
Constraint = Annotated[str | None, _sbatch("constraint", "node features, e.g. ib&a100")]
Exclude = Annotated[str | None, _sbatch("exclude", "nodes not to use, e.g. gpu[03,07]")]
Nodelist = Annotated[str | None, _sbatch("nodelist", "nodes it must have")]
QueueTimeout = Annotated[
    float,
    typer.Option(
        help="--slurm: seconds dtrun's allocation may wait in the queue (saying Slurm's reason) "
        "before dtrun cancels it and stops"
        f"{within('--queue-timeout')}.",
        rich_help_panel=_SLURM,
    ),
]
DEFAULT_READY_TIMEOUT = 900.0
DEFAULT_CONNECT_TIMEOUT = 30.0

# `dtrun bench` only: the all-reduce measurement, the health gate and the report.
_AR = "All-reduce (--workload allreduce, and each training launch's probe)"
_GATE = "Health gate (before the sweep)"
_AR_DEFAULTS = AllreduceSpec()
Sizes = Annotated[
    str | None,
    typer.Option(
        help="Message sizes: MIN:MAX doubling (nccl-tests -b/-e) or a list like 1M,16M. "
        "Default 4K:16M on CPUs, 4K:1G on GPUs.",
        rich_help_panel=_AR,
    ),
]
ArDtype = Annotated[
    str, typer.Option("--ar-dtype", help="float32, bfloat16 or float16.", rich_help_panel=_AR)
]
ArIters = Annotated[
    int,
    typer.Option(
        "--ar-iters", help=f"Timed operations per size{within('--ar-iters')}.", rich_help_panel=_AR
    ),
]
ArWarmup = Annotated[
    int,
    typer.Option(
        "--ar-warmup",
        help=f"Untimed operations at the largest and smallest size{within('--ar-warmup')}.",
        rich_help_panel=_AR,
    ),
]
Busbw = Annotated[
    bool,
    typer.Option(
        "--busbw/--no-busbw",
        help="After training, time all-reduces up to the gradients' size on the same ranks "
        "(the report's 'where scaling is lost').",
        rich_help_panel=_AR,
    ),
]
HealthGateOpt = Annotated[
    bool,
    typer.Option(
        "--health-gate/--no-health-gate",
        help="Check each node's single-node all-reduce busbw against the size's pass mark "
        "first (skipped where none is known).",
        rich_help_panel=_GATE,
    ),
]
Strict = Annotated[
    bool,
    typer.Option("--strict", help="Stop (exit 4) instead of warning when a node is below the mark.",
                 rich_help_panel=_GATE),
]  # fmt: skip
HealthThreshold = Annotated[
    float | None,
    typer.Option(
        help="Pass mark in GB/s busbw (default: the catalog's for the size)"
        f"{within('--health-threshold')}.",
        rich_help_panel=_GATE,
    ),
]
HealthSize = Annotated[
    str | None,
    typer.Option(help="The gate's message size (default: the catalog's, e.g. 8G).",
                 rich_help_panel=_GATE),
]  # fmt: skip
DrainFailing = Annotated[
    bool,
    typer.Option(
        "--drain-failing",
        help="--slurm: drain the nodes the gate finds below the mark (scontrol update "
        "state=drain, with the reason) and stop the sweep (exit 4); the next allocation gets "
        "other nodes.",
        rich_help_panel=_GATE,
    ),
]
ProjectTokens = Annotated[
    int,
    typer.Option(
        help=f"Tokens for the report's time-to-train projection{within('--project-tokens')}.",
        rich_help_panel=_OUT,
    ),
]
TargetEfficiency = Annotated[
    float,
    typer.Option(
        help="Efficiency a node count must reach to scale, as a fraction (0.9: 90%): the "
        "report's verdicts"
        f"{within('--target-efficiency')}.",
        rich_help_panel=_OUT,
    ),
]
Resume = Annotated[
    Path | None,
    typer.Option(
        "--resume",
        metavar="RUN_DIR",
        help="Run what the sweep recorded in RUN_DIR still lacks (launches without a result), "
        "on this or another cluster, into RUN_DIR, and rebuild its one report.",
        show_default=False,
        rich_help_panel=WHAT_PANEL,
    ),
]
Rerun = Annotated[
    Path | None,
    typer.Option(
        "--rerun",
        metavar="RUN_DIR",
        help="Run the sweep RUN_DIR records again, whole, as a new run beside it (a new run id; "
        "--output elsewhere), on this or another cluster: to repeat a measurement.",
        show_default=False,
        rich_help_panel=WHAT_PANEL,
    ),
]
Json = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the summary as JSON on stdout; everything else goes to stderr.",
        rich_help_panel=_OUT,
    ),
]


Wide = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Print every column of the table at full width and let the terminal wrap the "
        "lines; without it, the columns that do not fit the terminal are left out (a line "
        "under the table names them).",
        rich_help_panel=_OUT,
    ),
]


SparkMaster = Annotated[
    str | None,
    typer.Option(
        "--spark",
        metavar="MASTER",
        help="Run on a Spark master's executors, one per node, with --launcher "
        "torchdistributor or horovod-spark: local-cluster[N,1,1024] (N executors here), "
        "spark://HOST:7077, yarn (docs/spark.md).",
        rich_help_panel=WHERE_PANEL,
    ),
]


@dataclass(frozen=True)
class Where:
    """Which cluster a command runs on: none of hosts, stack, outputs is the embedded one."""

    hosts: Hosts = None
    stack: Stack = None
    outputs: OutputsFile = None
    local_nodes: LocalNodes = None
    accept_new_host_keys: AcceptNewHostKeys = False
    ready_timeout: ReadyTimeout = DEFAULT_READY_TIMEOUT
    connect_timeout: ConnectTimeout = DEFAULT_CONNECT_TIMEOUT
    slurm: SlurmOpt = False
    partition: Partition = None
    account: Account = None
    qos: Qos = None
    time: TimeLimit = None
    constraint: Constraint = None
    exclude: Exclude = None
    nodelist: Nodelist = None
    queue_timeout: QueueTimeout = DEFAULT_QUEUE_TIMEOUT_S
    spark: SparkMaster = None

    def slurm_request(self, drain_failing: bool = False) -> SlurmRequest | None:
        """--slurm's request; Slurm options without --slurm are refused (they would be lost)."""
        request = SlurmRequest(
            self.partition, self.account, self.qos, self.time, self.constraint, self.exclude,
            self.nodelist, self.queue_timeout, drain_failing,
        )  # fmt: skip
        if self.slurm:
            return request
        given = [flag for flag, _ in request.passed_through()]
        if drain_failing:
            given.append("--drain-failing")
        if self.queue_timeout != DEFAULT_QUEUE_TIMEOUT_S:
            given.append("--queue-timeout")
        if given:
            raise UsageError(
                f"{', '.join(given)} shape a Slurm allocation, and --slurm was not given",
                fix="add --slurm, or leave them out",
            )
        return None


@dataclass(frozen=True)
class Launching:
    """How `dtrun bench` and `dtrun run` start processes, and what they keep."""

    procs_per_node: ProcsPerNode = 1
    launcher: Launcher = "torchrun"
    env: Env = None
    port: Port = 29400
    nccl_debug: NcclDebug = False
    cluster_env: ClusterEnv = False
    platform_env: PlatformEnvOpt = None
    success: SuccessOpt = SuccessRule.ALL
    rendezvous: RendezvousOpt = _DEFAULTS.rendezvous
    zero_stage: ZeroStage = _DEFAULTS.zero_stage
    horovod_controller: HorovodControllerOpt = _DEFAULTS.horovod_controller
    tf_strategy: TfStrategyOpt = _DEFAULTS.tf_strategy
    tf_ps: TfPs = _DEFAULTS.tf_ps
    output: Output = Path("runs")
    run_id: RunId = None
    results: Results = None
    check: Check = False
    teardown: Teardown = False
    dry_run: DryRun = False
    quiet: Quiet = False

    @property
    def options(self) -> LauncherOptions:
        return LauncherOptions(
            self.rendezvous, self.zero_stage, self.horovod_controller, self.tf_strategy, self.tf_ps
        )


@dataclass(frozen=True)
class ModelOptions:
    preset: Preset = "tiny"
    layers: Layers = None
    d_model: DModel = None
    heads: Heads = None
    seq_len: SeqLen = None
    vocab: Vocab = None


@dataclass(frozen=True)
class StrategyOptions:
    strategy: Strategy = None
    schedule: Schedule = None
    micro_batches: MicroBatches = None
    pp_size: PpSize = None
    stages_per_rank: StagesPerRank = None
    stage_split: StageSplitOpt = None
    dtype: Dtype = TrainDtype.AUTO

    @property
    def spec(self) -> StrategySpec:
        return StrategySpec(
            self.strategy, self.schedule, self.micro_batches, self.pp_size, self.stages_per_rank,
            self.stage_split,
        )  # fmt: skip


@dataclass(frozen=True)
class AllreduceOptions:
    sizes: Sizes = None
    ar_dtype: ArDtype = _AR_DEFAULTS.dtype
    ar_iters: ArIters = _AR_DEFAULTS.iters
    ar_warmup: ArWarmup = _AR_DEFAULTS.warmup
    busbw: Busbw = True

    @property
    def spec(self) -> AllreduceSpec:
        return AllreduceSpec(self.sizes, self.ar_dtype, self.ar_warmup, self.ar_iters)


@dataclass(frozen=True)
class GateOptions:
    health_gate: HealthGateOpt = True
    strict: Strict = False
    health_threshold: HealthThreshold = None
    health_size: HealthSize = None
    drain_failing: DrainFailing = False

    @property
    def spec(self) -> HealthGate:
        return HealthGate(self.health_gate, self.strict, self.health_threshold, self.health_size)


@dataclass(frozen=True)
class ProgramOptions:
    """`dtrun bench -- PROGRAM`: what one optimizer step of your program processes."""

    samples_per_step: Annotated[
        int | None,
        typer.Option(
            help="Your program: samples one optimizer step processes, all processes together "
            f"(with --per-process: each process); gives samples/s{within('--samples-per-step')}.",
            rich_help_panel="Your program",
        ),
    ] = None
    tokens_per_step: Annotated[
        int | None,
        typer.Option(
            help="Your program: tokens one optimizer step processes, all processes together "
            f"(with --per-process: each process); gives tokens/s{within('--tokens-per-step')}.",
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
