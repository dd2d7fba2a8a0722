"""What a plan hands an executor: every node's rendered script and launch files for one launch.
Frozen values; stdlib, dtrun.spec.cluster and dtrun.spec.outcome only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from dtrun.spec.cluster import Node
from dtrun.spec.outcome import SuccessRule

RESULT_FILE = "result.json"  # what rank 0 of a built-in workload writes beside the launch scripts
STEP_DIR = "dtrun-steps"  # `dtrun bench -- PROGRAM`: the step hook's records, per launch


def point_dir(nodes: int, repeat: int) -> str:
    """Where one launch of a sweep's point keeps its files, relative to the run directory."""
    return f"n{nodes}/r{repeat}"


PROBE_DIR = "probe"  # --probe's launch: in the folder of the program's launch it follows


def staged_path(workdir: PurePath) -> str:
    """Where a cluster's runs/ folder keeps launch directory ``workdir``: its folders from the
    run directory's name on (<id>/n2/r0, <id>/health/node-0, <id>/n2/r0/probe), so that no
    two runs share one there; `dtrun run`'s and `dtrun check`'s keep the run directory's
    parent too (runs/<id>/launch)."""
    return "/".join(workdir.parts[-4 if workdir.name == PROBE_DIR else -3 :])


@dataclass(frozen=True)
class EnvVar:
    """One exported variable of a launch script, with the reason it is there."""

    key: str
    value: str
    why: str = ""


@dataclass(frozen=True)
class NodeEnv:
    """A variable each node exports with a value of its own (a platform's "current host"),
    or with one value that must not travel through a head-only launcher's forwarding (JSON).
    ``values[i]`` is node rank i's; launch-env.sh picks it by NODE_RANK on every rank."""

    key: str
    values: tuple[str, ...]
    why: str = ""

    @property
    def shared(self) -> bool:
        return len(set(self.values)) == 1


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
    """A file a launch needs beside its scripts: hostfile, config, wrapper."""

    name: str
    content: str
    mode: int = 0o644
    # The node (by rank) whose script alone reads it, such as a TensorFlow task's TF_CONFIG;
    # None: every node. Nodes that do not share storage get only theirs (runner/engines/ssh).
    node_rank: int | None = None


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
    success: SuccessRule = SuccessRule.ALL  # when the launch has succeeded (--success)

    @property
    def every_node(self) -> tuple[Node, ...]:
        """Every node of this point: ``nodes``, or where a plan leaves it empty, the nodes
        that run a script (they are all of them then)."""
        return self.nodes or tuple(launch.node for launch in self.launches)
