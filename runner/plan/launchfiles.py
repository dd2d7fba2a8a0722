"""One launch: every node's rendered script and every launch file for a program on N nodes.
Every launch dtrun makes (a sweep's point, a health-gate check, `dtrun run`) is laid out here,
so every launcher sees the same environment and settings whatever it runs. Pure."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from dtrun.errors import PlanError
from dtrun.plan.env import launch_env
from dtrun.plan.launchers.base import HOSTFILE, PlanContext, hostfile
from dtrun.plan.platforms import platform_layout
from dtrun.plan.resolve import ResolvedLaunch
from dtrun.render import render
from dtrun.spec.cluster import Inventory
from dtrun.spec.launchplan import EnvVar, LaunchFile, LaunchPlan, NodeLaunch
from dtrun.spec.request import Program
from dtrun.spec.text import plural

# The step hook's directory under the code directory (runner/workloads/stephook/sitecustomize.py)
STEP_HOOK_DIR = "dtrun/workloads/stephook"  # the import name: a checkout links dtrun -> runner


def rdzv_id(run_id: str, nodes: int) -> str:
    return f"dtrun-{run_id}-n{nodes}"


def require_nodes(inventory: Inventory, nodes: int, procs_per_node: int = 1) -> None:
    """The checks a plan makes: the inventory holds the nodes the request needs, and a node
    given its GPUs (an embedded node, docs/bench.md "The embedded local cluster") has one for
    each process: a process past them would ask for a GPU its node cannot see."""
    if not 1 <= nodes <= len(inventory.nodes):
        raise PlanError(
            f"cannot run on {nodes} nodes",
            why=f"the inventory ({inventory.source}) holds {plural(len(inventory.nodes), 'node')}",
            fix=f"pass --nodes with counts up to {len(inventory.nodes)}, or add nodes",
        )
    for node in inventory.nodes[:nodes]:
        if node.gpus is not None and procs_per_node > len(node.gpus):
            raise PlanError(
                f"cannot run {plural(procs_per_node, 'process')} per node on {node.name}",
                why=f"it has {plural(len(node.gpus), 'GPU')} of this machine, and each "
                "process needs one",
                fix=f"pass -p {len(node.gpus)} or fewer, or fewer --nodes to give each more GPUs",
            )


@dataclass(frozen=True)
class What:
    """What one launch runs, beside where: the program and how it is recorded."""

    program: Program
    workload: str  # "train", "allreduce", "health", "run"
    join_timeout_s: int
    batch_per_proc: int | None = None  # None: not a built-in training workload
    extra_files: tuple[LaunchFile, ...] = ()
    extra_env: tuple[EnvVar, ...] = ()  # after every other variable, the user's --env too
    step_hook: bool = False  # the user's program, timed by the step hook


def plan_launch(inventory: Inventory, launch: ResolvedLaunch, nodes: int, what: What) -> LaunchPlan:
    """Every node's script and every launch file for ``what`` on the first ``nodes`` nodes."""
    request, launcher = launch.request, launch.launcher
    require_nodes(inventory, nodes, request.procs_per_node)
    if what.step_hook and os.pathsep in inventory.code_dir:
        raise PlanError(
            f"cannot time the program's steps: dtrun's code folder {inventory.code_dir} holds "
            f"'{os.pathsep}'",
            why="the step hook reaches every process through PYTHONPATH, from under that "
            f"folder, and '{os.pathsep}' splits PYTHONPATH in two",
            fix=f"install or move dtrun to a folder whose path has no '{os.pathsep}'",
        )
    selected = inventory.nodes[:nodes]
    ctx = PlanContext(
        run_id=request.run_id,
        rdzv_id=rdzv_id(request.run_id, nodes),
        nodes=selected,
        procs_per_node=request.procs_per_node,
        master_addr=selected[0].address,
        master_port=request.master_port,
        rdzv_port=request.rdzv_port,
        join_timeout_s=what.join_timeout_s,
        python_bin=inventory.python_bin,
        code_dir=inventory.code_dir,
        env=(*launch_env(inventory, request, nodes), *what.extra_env),
        program=what.program,
        options=request.launch,
        size=inventory.size,
        ssh=inventory.ssh,
        interface=inventory.interface,
        starter=inventory.starter,
        step_hook=f"{inventory.code_dir}/{STEP_HOOK_DIR}" if what.step_hook else None,
    )
    platform = platform_layout(
        ctx, inventory.accelerator, request.platform_env, (key for key, _ in request.env)
    )
    ctx = replace(ctx, node_env=platform.env)
    launches = tuple(
        NodeLaunch(
            node=selected[script.node_rank],
            node_rank=script.node_rank,
            script_name=f"node-{script.node_rank}.sh",
            script=render(launcher.template, launcher.node_context(ctx, script.node_rank)),
            service=script.service,
        )
        for script in launcher.scripts(ctx)
    )
    files = (*launcher.files(ctx), *what.extra_files, *platform.files)
    if (request.cluster_env or platform.hostfile) and all(f.name != HOSTFILE for f in files):
        files = (*files, hostfile(ctx))
    return LaunchPlan(
        launcher=launcher.name,
        workload=what.workload,
        nnodes=nodes,
        procs_per_node=request.procs_per_node,
        world_size=ctx.world_size,
        batch_per_proc=what.batch_per_proc,
        rdzv_id=ctx.rdzv_id,
        master_addr=ctx.master_addr,
        master_port=ctx.master_port,
        launches=launches,
        files=files,
        nodes=selected,
        success=request.success,
    )
