"""Stub launcher binaries that record how they were called, and players of what they would do.

A stub (torchrun, deepspeed, horovodrun, mpirun, python) writes its argv, environment and working
directory to $STUB_LOG as JSON and exits 0. The python stub records ``python -c QUICK_EXIT ...``,
torchrun's or DeepSpeed's entry point as their launchers run it, as a call of that launcher.
The players then do, for a recorded head-only launcher, what the real one does for every
process (documented behaviour, cited per launcher): start launch-env.sh with the variables that
launcher sets and the environment it forwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtrun.engines.common.scripts import write_launch_files
from dtrun.plan.launchers import deepspeed, torchrun
from dtrun.spec.launchplan import LaunchPlan

STUBS = ("torchrun", "deepspeed", "horovodrun", "mpirun", "python")
# python -c CODE as the launcher whose entry point CODE runs
QUICK_EXITS = {torchrun.QUICK_EXIT: "torchrun", deepspeed.QUICK_EXIT: "deepspeed"}

_STUB = """#!{python}
import json, os, sys, time
name, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
launchers = {quick_exits!r}
if name == "python" and len(argv) > 1 and argv[0] == "-c" and argv[1] in launchers:
    name, argv = launchers[argv[1]], argv[2:]
record = {{"name": name, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}}
stamp = f"{{time.monotonic_ns()}}-{{os.getpid()}}"
path = os.path.join(os.environ["STUB_LOG"], f"{{name}}-{{stamp}}.json")
with open(path + ".partial", "w") as out:
    json.dump(record, out)
os.replace(path + ".partial", path)
time.sleep(float(os.environ.get("STUB_LINGER_S", "0")))
"""


@dataclass(frozen=True)
class Call:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: str


def make_stubs(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in STUBS:
        path = bin_dir / name
        path.write_text(_STUB.format(python=sys.executable, quick_exits=QUICK_EXITS))
        path.chmod(0o755)
    return bin_dir


class StubCluster:
    """Runs a plan's scripts with bash, against stub binaries, in one launch directory."""

    def __init__(self, root: Path) -> None:
        self.bin = make_stubs(root / "bin")
        self.log = root / "log"
        self.log.mkdir()
        self.workdir = root / "launch"
        self.linger_s = 0.0  # how long each stub stays after recording its call

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(base if base is not None else os.environ)
        env["PATH"] = f"{self.bin}:{os.environ['PATH']}"
        env["STUB_LOG"] = str(self.log)
        env["STUB_LINGER_S"] = str(self.linger_s)
        return env

    def run_scripts(self, plan: LaunchPlan) -> None:
        self.workdir.mkdir(exist_ok=True)
        write_launch_files(plan, self.workdir)
        for launch in plan.launches:
            (self.workdir / launch.script_name).write_text(launch.script)
            done = subprocess.run(
                ["bash", launch.script_name],
                cwd=self.workdir,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, f"{launch.script_name}: {done.stdout}{done.stderr}"

    def run_wrapper(self, argv: list[str], env: dict[str, str]) -> None:
        """Start a command in the launch directory as a launcher would, with exactly ``env``."""
        done = subprocess.run(
            argv,
            cwd=self.workdir,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"

    def calls(self, name: str) -> list[Call]:
        found = []
        for path in sorted(self.log.glob(f"{name}-*.json")):  # complete records only
            data: dict[str, Any] = json.loads(path.read_text())
            found.append(Call(data["name"], data["argv"], data["env"], data["cwd"]))
        return found


def after(argv: list[str], marker: str) -> list[str]:
    return argv[argv.index(marker) :]


def values_of(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def option(argv: list[str], name: str) -> str:
    """The value of ``--name=value`` in argv."""
    prefix = f"{name}="
    return next(arg[len(prefix) :] for arg in argv if arg.startswith(prefix))


# A player: (the head launcher's call, the plan) -> (argv, environment) of every process.
Player = Callable[[Call, LaunchPlan], list[tuple[list[str], dict[str, str]]]]


def _ompi(rank: int, plan: LaunchPlan) -> dict[str, str]:
    """What OpenMPI sets per rank with --map-by ppr:N:node (ranks node by node)."""
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % plan.procs_per_node),
        "OMPI_COMM_WORLD_SIZE": str(plan.world_size),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(plan.procs_per_node),
        "OMPI_COMM_WORLD_NODE_RANK": str(rank % plan.procs_per_node),
    }


def play_mpirun(call: Call, plan: LaunchPlan) -> list[tuple[list[str], dict[str, str]]]:
    """mpirun gives each rank only the variables named with -x, plus its own."""
    forwarded = {name: call.env[name] for name in values_of(call.argv, "-x")}
    command = after(call.argv, "./launch-env.sh")
    return [(command, forwarded | _ompi(rank, plan)) for rank in range(plan.world_size)]


def play_horovodrun(call: Call, plan: LaunchPlan) -> list[tuple[list[str], dict[str, str]]]:
    """horovodrun passes its whole environment on (gloo_run.py), plus Horovod's or MPI's ranks."""
    command = after(call.argv, "./launch-env.sh")
    ranks = []
    for rank in range(plan.world_size):
        if "--mpi" in call.argv:
            own = _ompi(rank, plan)
        else:
            own = {
                "HOROVOD_RANK": str(rank),
                "HOROVOD_LOCAL_RANK": str(rank % plan.procs_per_node),
                "HOROVOD_SIZE": str(plan.world_size),
                "HOROVOD_LOCAL_SIZE": str(plan.procs_per_node),
                "HOROVOD_CROSS_RANK": str(rank // plan.procs_per_node),
                "HOROVOD_CROSS_SIZE": str(plan.nnodes),
            }
        ranks.append((command, call.env | own))
    return ranks


# Prefixes deepspeed's runner exports from the head's environment (runner.py EXPORT_ENVS).
_DS_EXPORTED = ("MLFLOW", "PYTHON", "MV2", "UCX", "NCCL")


def play_deepspeed_pdsh(call: Call, plan: LaunchPlan) -> list[tuple[list[str], dict[str, str]]]:
    """pdsh runs deepspeed.launcher.launch on each node with .deepspeed_env's exports and the
    head's PYTHON*/UCX*/NCCL* variables; launch.py starts each rank with its ranks and
    `--local_rank=N` after the script (deepspeed/launcher/launch.py)."""
    exported = {k: v for k, v in call.env.items() if k.startswith(_DS_EXPORTED)}
    # read as DeepSpeed reads it (runner.py: text-mode readlines, split at the first '=', and
    # add_export's strip): only a line break ends a line, not \x85 or U+2028 as splitlines has it
    with Path(call.cwd, ".deepspeed_env").open() as lines:
        pairs = [line.split("=", 1) for line in lines.readlines()]
    exported |= {key.strip(): value.strip() for key, value in pairs}
    command = after(call.argv, "--no_python")[1:]
    ranks = []
    for rank in range(plan.world_size):
        local = rank % plan.procs_per_node
        own = {
            "MASTER_ADDR": option(call.argv, "--master_addr"),
            "MASTER_PORT": option(call.argv, "--master_port"),
            "WORLD_SIZE": str(plan.world_size),
            "CROSS_RANK": str(rank // plan.procs_per_node),
            "CROSS_SIZE": str(plan.nnodes),
            "LOCAL_SIZE": str(plan.procs_per_node),
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
        }
        ranks.append(([*command, f"--local_rank={local}"], exported | own))
    return ranks
