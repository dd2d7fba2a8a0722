"""The typed, frozen values that dtrun's stages hand each other.

Data flows one way: Inventory + BenchSpec -> LaunchPlan (pure) -> executor -> RunResult ->
report. Nothing here does I/O; validation of user input happens where the input is parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum

# Variable names whose values never reach a log, a report or the terminal.
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SAS|CONNECTION_STRING|PRIVATE|DSN",
    re.IGNORECASE,
)
REDACTED = "<redacted>"


# The words of an option's name (--hf-token, --db_password) that mark its value secret. Whole
# words, unlike variable names: --tokenizer and --keep-last say nothing secret.
_SECRET_WORD = re.compile(
    r"key|apikey|token|secret|passw(or)?d|pwd|pass|credentials?|auth|cookie|sas|dsn|private",
    re.IGNORECASE,
)
# user:password@ in URLs (proxies, package indexes, databases), whatever carries them.
_URL_CREDENTIALS = re.compile(r"(://)([^/@\s]+)@")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_url_credentials(value: str) -> str:
    return _URL_CREDENTIALS.sub(rf"\g<1>{REDACTED}@", value)


def _is_secret_option(name: str) -> bool:
    return any(_SECRET_WORD.fullmatch(word) for word in re.split(r"[-_.]", name) if word)


def secret_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The values in a program's arguments that records must not show: those of options named
    like secrets (``--hf-token X``, ``--api-key=X``, ``DB_PASSWORD=X``) and URL credentials."""
    return _scan_args(args)[1]


def redact_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` with every value ``secret_args`` names replaced by <redacted>."""
    return _scan_args(args)[0]


def _scan_args(args: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    redacted: list[str] = []
    found: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("-"):
            redacted.append(REDACTED)
            found.append(arg)
            hide_next = False
            continue
        name, equals, value = arg.partition("=")
        secret_name = _is_secret_option(name.lstrip("-"))
        hide_next = not equals and arg.startswith("-") and secret_name
        if equals and value and secret_name:
            redacted.append(f"{name}={REDACTED}")
            found.append(value)
            continue
        found.extend(match.group(2) for match in _URL_CREDENTIALS.finditer(arg))
        redacted.append(redact_url_credentials(arg))
    return tuple(redacted), tuple(dict.fromkeys(found))


def secret_values(env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    return tuple(value for name, value in env if is_secret_name(name) and value)


def redact_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, REDACTED if is_secret_name(name) else value) for name, value in env)


class ScalingMode(StrEnum):
    """How the work changes with the node count (shared/FACTS.md section 7)."""

    WEAK = "weak"  # fixed work per process: the global batch grows with the world size
    STRONG = "strong"  # fixed total work: the global batch is split across the world


class Accelerator(StrEnum):
    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class Node:
    """One machine that runs one launch script."""

    name: str  # stable label used in logs: node-0, node-1, ...
    address: str  # the address other nodes reach it on (rendezvous, --local-addr)
    slots: int = 1  # processes it is meant to run: its GPUs, or a CPU share on CPU nodes
    cpus: int = 1  # cores this node may use; split between its processes
    # How to log in, where it differs from the inventory's SshAccess (hosts files).
    ssh_host: str | None = None  # default: address
    ssh_port: int | None = None
    ssh_user: str | None = None
    ssh_key: str | None = None  # path of a private key file


@dataclass(frozen=True)
class SshAccess:
    """How the nodes of a real cluster are reached over SSH: by dtrun from this machine, and
    by a head-only launcher (mpirun, horovodrun, DeepSpeed over pdsh) from node 0."""

    user: str | None = None  # None: the local user name
    port: int = 22
    # The private key node 0 uses to reach the other nodes; None: ssh's own defaults there.
    identity_file: str | None = None
    jump_host: str | None = None  # dtrun reaches the nodes through this host (the head VM)
    known_hosts: tuple[str, ...] = ()  # lines to check host keys against; empty: the user's
    private_key: str | None = field(default=None, repr=False)  # secret: never printed
    key_path: str | None = None  # a private key file, when not given inline
    known_hosts_file: str | None = None  # where to check host keys; None: ~/.ssh/known_hosts
    workdir: str = "/tmp/dtrun"  # where dtrun stages scripts on nodes without shared storage

    def redacted(self) -> SshAccess:
        return replace(self, private_key=REDACTED if self.private_key else None)


@dataclass(frozen=True)
class Inventory:
    """The nodes a benchmark may use, and how to run Python on them."""

    source: str  # where it came from: "embedded", "hosts:FILE", "stack:NAME"
    nodes: tuple[Node, ...]
    python_bin: str  # directory, on every node, holding python and torchrun
    code_dir: str  # directory, on every node, that holds the runner/workloads package
    accelerator: Accelerator = Accelerator.CPU
    size: str | None = None  # Azure VM size when known (catalog key)
    # None: the nodes are processes on this machine and run no sshd (the embedded cluster),
    # so launchers use their no-SSH modes.
    ssh: SshAccess | None = None
    shared_dir: str | None = None  # a directory every node mounts, when there is one
    interface: str = "eth0"  # the network interface the nodes reach each other on
    image: str | None = None  # the nodes' OS image (URN), when the cluster says

    @property
    def description(self) -> str:
        return f"{self.source}: {len(self.nodes)} node(s), {self.accelerator.value}"

    def redacted(self) -> Inventory:
        """This inventory without secrets, for records and reports."""
        return replace(self, ssh=self.ssh.redacted() if self.ssh else None)


@dataclass(frozen=True)
class ModelSpec:
    """A GPT-style decoder: layers x (attention + MLP), tied embedding."""

    layers: int = 2
    d_model: int = 128
    heads: int = 4
    seq_len: int = 64
    vocab: int = 1024
    preset: str | None = None  # the preset (runner/presets.py) the shape started from


class PipelineSchedule(StrEnum):
    """torch.distributed.pipelining schedules the pipeline strategy can run."""

    GPIPE = "gpipe"  # every forward, then every backward
    ONE_F_ONE_B = "1f1b"  # one forward, one backward in the steady state
    INTERLEAVED_1F1B = "interleaved-1f1b"  # 1F1B over 2+ stages per rank (Megatron-LM)


class TrainDtype(StrEnum):
    """What the training workload computes in (README "Training strategies")."""

    AUTO = "auto"  # bfloat16 on GPUs, float32 on CPUs
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"  # autocast (DeepSpeed: its bf16 mode); emulated, slower, on CPUs


@dataclass(frozen=True)
class StrategySpec:
    """How the built-in training workload trains (README "Training strategies").

    None means "not given": the plan resolves the defaults per point, and refuses pipeline
    settings given to another strategy.
    """

    name: str | None = None  # ddp, fsdp, zero1, zero2, zero3, pipeline; None: the launcher's
    schedule: PipelineSchedule | None = None  # pipeline; None: 1f1b
    micro_batches: int | None = None  # pipeline: micro-batches per step; None: 4
    pp_size: int | None = None  # pipeline: ranks per pipeline; None: every rank of the point
    stages_per_rank: int | None = None  # pipeline; None: 1, or 2 for interleaved-1f1b


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
    tf_ps: int = 1  # tensorflow, parameter-server strategy: parameter server tasks


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


@dataclass(frozen=True)
class AllreduceSpec:
    """The all-reduce measurement, in nccl-tests' all_reduce_perf terms (-b/-e, -d, -w, -n)."""

    sizes: str | None = None  # "4K:64M" doubling or "1M,16M"; None: the accelerator's default
    dtype: str = "float32"
    warmup: int = 5
    iters: int = 20

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
    threshold_gbs: float | None = None  # None: the catalog's pass mark for the size
    size: str | None = None  # message size; None: the catalog's (8G, as Azure's health check)


@dataclass(frozen=True)
class BenchSpec:
    """Everything the user asked of one `dtrun bench` sweep."""

    run_id: str
    node_counts: tuple[int, ...] = (1, 2)
    procs_per_node: int = 1
    workload: str = "train"
    launcher: str = "torchrun"
    mode: ScalingMode = ScalingMode.WEAK
    steps: int = 20
    warmup: int = 5
    repeat: int = 1
    batch: int = 8  # per process in weak mode; per process at the smallest node count in strong
    global_batch: int | None = None  # strong mode: the fixed global batch (default from batch)
    model: ModelSpec = field(default_factory=ModelSpec)
    env: tuple[tuple[str, str], ...] = ()  # user --env KEY=VALUE, in order; later keys win
    rdzv_port: int = 29400
    timeout_s: float = 600.0
    launch: LauncherOptions = field(default_factory=LauncherOptions)
    nccl_debug: bool = False  # NCCL_DEBUG=INFO on every node
    cluster_env: bool = False  # also export the MPI-style cluster variables (README)
    strategy: StrategySpec = field(default_factory=StrategySpec)  # the train workload's
    dtype: TrainDtype = TrainDtype.AUTO  # the train workload's arithmetic
    allreduce: AllreduceSpec = field(default_factory=AllreduceSpec)
    busbw: bool = True  # training launches also measure all-reduce busbw at the gradient size
    health: HealthGate = field(default_factory=HealthGate)
    project_tokens: int = 10**9  # the report's time-to-train projection: tokens to train on

    @property
    def master_port(self) -> int:
        """MASTER_PORT sits next to the rendezvous port."""
        return self.rdzv_port + 1

    def redacted(self) -> BenchSpec:
        """This spec with the values of secret-looking --env variables replaced."""
        return replace(self, env=redact_env(self.env))

    def secrets(self) -> tuple[str, ...]:
        """The values ``redacted`` hides, for copies of files that hold them (results store)."""
        return secret_values(self.env)


@dataclass(frozen=True)
class RunSpec:
    """Everything the user asked of one `dtrun run`: their own program, on every node."""

    run_id: str
    program: Program
    nodes: int = 1
    procs_per_node: int = 1
    launcher: str = "torchrun"
    env: tuple[tuple[str, str], ...] = ()
    rdzv_port: int = 29400
    timeout_s: float | None = None  # None: as long as the program runs
    launch: LauncherOptions = field(default_factory=LauncherOptions)
    nccl_debug: bool = False
    cluster_env: bool = False

    @property
    def master_port(self) -> int:
        return self.rdzv_port + 1

    def redacted(self) -> RunSpec:
        """This spec with secret-looking --env values and program arguments replaced."""
        program = replace(self.program, args=redact_args(self.program.args))
        return replace(self, env=redact_env(self.env), program=program)

    def secrets(self) -> tuple[str, ...]:
        """The values ``redacted`` hides, for copies of files that hold them (results store)."""
        return secret_values(self.env) + secret_args(self.program.args)


@dataclass(frozen=True)
class EnvVar:
    """One exported variable of a launch script, with the reason it is there."""

    key: str
    value: str
    why: str = ""


@dataclass(frozen=True)
class CliArg:
    """Command-line arguments of a launcher, with the reason they are there."""

    args: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class NodeLaunch:
    """What one node runs for one point of the sweep."""

    node: Node
    node_rank: int
    script_name: str
    script: str
    # A service node runs servers that never exit on their own (TensorFlow's parameter servers):
    # the launch is done when every other node has exited 0, and then it is stopped.
    service: bool = False


@dataclass(frozen=True)
class LaunchFile:
    """A file a launch needs beside its scripts: hostfile, config, wrapper. Same on every node."""

    name: str
    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class LaunchPlan:
    """Every node's rendered launch for one node count. Pure data: print it, test it, run it."""

    launcher: str
    workload: str
    nnodes: int
    procs_per_node: int
    world_size: int
    batch_per_proc: int | None  # None: not a built-in workload
    rdzv_id: str
    master_addr: str
    master_port: int
    # The nodes that run a script: every node, or only the head for launchers that start the
    # other nodes' ranks themselves (mpirun, horovodrun, deepspeed over pdsh).
    launches: tuple[NodeLaunch, ...]
    files: tuple[LaunchFile, ...] = ()  # written beside the scripts on every node
    nodes: tuple[Node, ...] = ()  # every node of this point, whether it runs a script or not


@dataclass(frozen=True)
class NodeResult:
    """How one node's launch ended."""

    node: str
    address: str
    exit_code: int | None  # None: still running when dtrun stopped it
    log_path: str
    wall_s: float


class RunStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class RunResult:
    """One launch of one plan: a (node count, repeat) point of the sweep."""

    nodes: int
    repeat: int
    status: RunStatus
    wall_s: float
    run_dir: str  # relative to the sweep's directory, e.g. "n2/r0"
    node_results: tuple[NodeResult, ...] = ()
    error: str | None = None


class StorageKind(StrEnum):
    AZURE_FILES = "azurefiles"  # Azure Files premium, NFS 4.1
    NETAPP = "netapp"  # Azure NetApp Files, NFS 4.1 on a delegated subnet
    LUSTRE = "lustre"  # Azure Managed Lustre on its own subnet


@dataclass(frozen=True)
class StorageSpec:
    kind: StorageKind
    size_gib: int
    mount_path: str
    lustre_sku: str

    # Where dtrun keeps its things on the shared storage (part of the stack outputs contract).
    @property
    def dtrun_dir(self) -> str:
        return f"{self.mount_path}/.dtrun"

    @property
    def registry_dir(self) -> str:
        """One JSON file per booted machine (README: "Node registry")."""
        return f"{self.dtrun_dir}/nodes"

    @property
    def venv_dir(self) -> str:
        return f"{self.dtrun_dir}/venv"


@dataclass(frozen=True)
class ClusterSpec:
    """An Azure InfiniBand cluster as the stack configuration describes it (validated)."""

    name_prefix: str
    location: str
    vm_size: str
    node_count: int
    admin_user: str
    admin_cidrs: tuple[str, ...]
    ssh_public_key: str | None  # None: generate a key pair and export the private key
    storage: StorageSpec
    spot: bool
    spot_max_price: float  # -1: up to the on-demand price
    image: str  # URN: the catalog's for the size, or the override
    head_vm_size: str
    vnet_cidr: str
    tags: tuple[tuple[str, str], ...]
    python_packages: tuple[str, ...]
