"""Every option of the launch commands, defined once (typer Annotated aliases), and the option
groups (frozen dataclasses, spread into commands by dtrun.cli.groups) that commands share:
``Where`` (bench, run, exec), ``Launching`` (bench, run) and bench's own groups."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from dtrun.cli.groups import spec_from
from dtrun.engines.base import WHERE_PANEL
from dtrun.engines.registry import EngineOptions
from dtrun.spec.bounds import within
from dtrun.spec.outcome import SuccessRule
from dtrun.spec.request import (
    BenchSpec,
    HorovodController,
    LauncherOptions,
    LaunchRequest,
    Rendezvous,
    TfStrategy,
)

# = LAUNCHERS, tested
LAUNCHER_NAMES = (
    "torchrun, deepspeed, horovodrun, mpirun, tensorflow, torchdistributor, horovod-spark"
)
_DEFAULTS = LauncherOptions()


# bench's --help, grouped by where it runs, what it runs, how it measures and what it writes
# (the model, strategy, all-reduce, gate, Slurm, cost and program panels are below)
WHAT_PANEL = "What it runs"
HOW_PANEL = "How it measures"
OUT_PANEL = "What it writes"


def no_default(panel: str, help: str) -> Any:  # typer.Option's own return type
    """An option in ``panel`` whose default (None) is explained in its help, not shown."""
    return typer.Option(help=help, rich_help_panel=panel, show_default=False)


Check = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Before every launch, check GPUs, InfiniBand ports and Python on nodes.",
        rich_help_panel=WHERE_PANEL,
    ),
]

TargetEfficiency = Annotated[
    float,
    typer.Option(
        help="Efficiency a node count must reach to scale, as a fraction (0.9: 90%): the "
        "report's verdicts"
        f"{within(BenchSpec, 'target_efficiency')}.",
        rich_help_panel=OUT_PANEL,
    ),
]
Json = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the summary as JSON on stdout; everything else goes to stderr.",
        rich_help_panel=OUT_PANEL,
    ),
]


Wide = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Print every column of the table at full width and let the terminal wrap the "
        "lines; without it, the columns that do not fit the terminal are left out (a line "
        "under the table names them).",
        rich_help_panel=OUT_PANEL,
    ),
]


# Where to run: every engine's options, each declared in its own package
# (runner/engines/NAME/options.py) and gathered by the registry. None given: the embedded cluster.
Where = EngineOptions


@dataclass(frozen=True)
class Launching:
    """How `dtrun bench` and `dtrun run` start processes, and what they keep."""

    procs_per_node: Annotated[
        int,
        typer.Option(
            "--procs-per-node",
            "-p",
            help=f"Processes (GPUs) per node{within(LaunchRequest, 'procs_per_node')}.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = 1
    launcher: Annotated[
        str,
        typer.Option(
            help=f"How processes are started on the nodes: {LAUNCHER_NAMES}.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = "torchrun"
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            "-e",
            help="KEY=VALUE exported on every node; repeatable; wins.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = None
    port: Annotated[
        int,
        typer.Option(
            help="Rendezvous port on the first node (MASTER_PORT is port+1)"
            f"{within(LaunchRequest, 'rdzv_port')}.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = 29400
    nccl_debug: Annotated[
        bool,
        typer.Option(
            "--nccl-debug", help="Export NCCL_DEBUG=INFO on every node.", rich_help_panel=WHAT_PANEL
        ),
    ] = False
    cluster_env: Annotated[
        bool,
        typer.Option(
            "--cluster-env",
            help="Also export the MPI-style CLUSTER_* variables (workers, GPUs per worker, "
            "host:slots list, hostfile, processes).",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = False
    platform_env: Annotated[
        list[str] | None,
        typer.Option(
            "--platform-env",
            metavar="PLATFORMS",
            help="Also export these platforms' own variables on every node, so programs written "
            "for them run unchanged: azureml, volcano, sagemaker (comma-separated or repeated).",
            show_default=False,
            rich_help_panel=WHAT_PANEL,
        ),
    ] = None
    success: Annotated[
        SuccessRule,
        typer.Option(
            "--success",
            help="When a launch succeeds: all (every node exits 0) or worker0 (node 0 exits 0; "
            "the nodes still running are then stopped, as on Volcano Engine).",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = SuccessRule.ALL
    rendezvous: Annotated[
        Rendezvous,
        typer.Option(
            "--rendezvous",
            help="torchrun: c10d rendezvous, or static --node-rank.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = _DEFAULTS.rendezvous
    zero_stage: Annotated[
        int | None,
        typer.Option(
            "--zero-stage",
            help="ZeRO stage (1, 2, 3) of the train workload: --strategy zeroN.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = _DEFAULTS.zero_stage
    horovod_controller: Annotated[
        HorovodController,
        typer.Option(
            "--horovod-controller",
            help="horovodrun: start ranks with gloo or mpi.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = _DEFAULTS.horovod_controller
    tf_strategy: Annotated[
        TfStrategy,
        typer.Option(
            "--tf-strategy", help="tensorflow: the TF_CONFIG layout.", rich_help_panel=WHAT_PANEL
        ),
    ] = _DEFAULTS.tf_strategy
    tf_ps: Annotated[
        int,
        typer.Option(
            "--tf-ps",
            help="tensorflow, parameter-server: parameter server tasks"
            f"{within(LauncherOptions, 'tf_ps')}.",
            rich_help_panel=WHAT_PANEL,
        ),
    ] = _DEFAULTS.tf_ps
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Directory that receives <run-id>/.", rich_help_panel=OUT_PANEL
        ),
    ] = Path("runs")
    run_id: Annotated[
        str | None,
        typer.Option(help="Name of this run (default: time-stamped).", rich_help_panel=OUT_PANEL),
    ] = None
    results: Annotated[
        str | None,
        typer.Option(
            metavar="s3://BUCKET/PREFIX",
            help="Also upload the run directory to s3://BUCKET/PREFIX/<run-id>/ when it ends, "
            "however it ends; the local copy is kept. AWS credentials from the usual chain, "
            "checked before anything runs (not in a dry run).",
            rich_help_panel=OUT_PANEL,
        ),
    ] = None
    check: Check = False
    teardown: Annotated[
        bool,
        typer.Option(
            "--teardown/--keep",
            help="With --stack: destroy it afterwards, even after a failure or Ctrl-C (default "
            "keep).",
            rich_help_panel=WHERE_PANEL,
        ),
    ] = False
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print every node's script and launch file; run nothing.",
            rich_help_panel=OUT_PANEL,
        ),
    ] = False
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Do not stream node output (logs are kept).",
            rich_help_panel=OUT_PANEL,
        ),
    ] = False

    @property
    def options(self) -> LauncherOptions:
        return spec_from(self, LauncherOptions)
