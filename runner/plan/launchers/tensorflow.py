"""TensorFlow: no launcher process, a TF_CONFIG per task, read by tf.distribute.

MultiWorkerMirroredStrategy: one worker task per node, using all of the node's GPUs.
ParameterServerStrategy: a worker task on every node, `--tf-ps` parameter-server tasks spread
over the nodes from node 0, and the chief (the coordinator that runs the training) on node 0.
Workers and parameter servers serve until stopped, so the launch is done when the chief is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dtrun.errors import PlanError
from dtrun.plan.launchers.base import PlanContext, Script, common_context, program_argv
from dtrun.spec.launchplan import LaunchFile
from dtrun.spec.request import Framework, TfStrategy

CHIEF, WORKER, PS = "chief", "worker", "ps"


@dataclass(frozen=True)
class Task:
    type: str
    index: int
    node_rank: int
    port: int

    @property
    def file(self) -> str:
        return f"tf-config-{self.type}-{self.index}.json"


def tasks_of(ctx: PlanContext, node_rank: int) -> tuple[Task, ...]:
    """The tasks of one node, on consecutive ports from --port: the chief first (node 0 under
    ParameterServerStrategy), its worker, then the parameter servers spread over the nodes from
    node 0. Without the other nodes': a node's script is planned with its own (issue 41)."""
    if ctx.procs_per_node != 1:
        raise PlanError(
            "the tensorflow launcher runs one worker per node",
            why=f"got --procs-per-node {ctx.procs_per_node}; a TensorFlow worker uses every GPU "
            "of its node itself",
            fix="pass --procs-per-node 1",
        )
    serving = ctx.options.tf_strategy is TfStrategy.PARAMETER_SERVER
    mine = [(CHIEF, 0)] if serving and node_rank == 0 else []
    mine.append((WORKER, node_rank))
    if serving:
        mine += [(PS, index) for index in range(node_rank, ctx.options.tf_ps, ctx.nnodes)]
    return tuple(
        Task(kind, index, node_rank, ctx.rdzv_port + slot)
        for slot, (kind, index) in enumerate(mine)
    )


def tasks(ctx: PlanContext) -> tuple[Task, ...]:
    """Every task of the cluster, node by node."""
    return tuple(task for rank in range(ctx.nnodes) for task in tasks_of(ctx, rank))


def by_role(task: Task) -> tuple[int, int]:
    """Chief, workers, parameter servers, each by index: TF_CONFIG's lists are index-ordered."""
    return (CHIEF, WORKER, PS).index(task.type), task.index


def tf_configs(ctx: PlanContext) -> tuple[tuple[Task, str], ...]:
    """Every task's TF_CONFIG, in role order: the cluster, the same in every file, written
    once and nested as json.dumps(indent=2) nests it; only the task differs. One encoding of
    the cluster per task was N x N addresses (issue 41)."""
    ordered = sorted(tasks(ctx), key=by_role)  # a task's index is its place in its list
    cluster: dict[str, list[str]] = {}
    for task in ordered:
        cluster.setdefault(task.type, []).append(f"{ctx.nodes[task.node_rank].address}:{task.port}")
    nested = json.dumps(cluster, indent=2).replace("\n", "\n  ")
    return tuple(
        (task, f'{{\n  "cluster": {nested},\n  "task": {_nested_task(task)}\n}}\n')
        for task in ordered
    )


def _nested_task(task: Task) -> str:
    return json.dumps({"type": task.type, "index": task.index}, indent=2).replace("\n", "\n  ")


class Tensorflow:
    name = "tensorflow"
    template = "launch/tensorflow.sh.j2"
    framework: Framework | None = None  # dtrun's built-in workloads are PyTorch programs

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        serving = ctx.options.tf_strategy is TfStrategy.PARAMETER_SERVER
        return tuple(Script(rank, service=serving and rank > 0) for rank in range(ctx.nnodes))

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        return tuple(
            LaunchFile(task.file, config, node_rank=task.node_rank)
            for task, config in tf_configs(ctx)
        )

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        mine = tasks_of(ctx, node_rank)
        chief = [task for task in mine if task.type == CHIEF]
        context = common_context(ctx, node_rank)
        context.update(
            strategy=ctx.options.tf_strategy.value,
            program=program_argv(ctx),
            # One task: it is the node's process. More: servers in the background, and the
            # chief in the foreground on node 0 (elsewhere the node serves until stopped).
            single=mine[0] if len(mine) == 1 else None,
            servers=[task for task in mine if task.type != CHIEF] if len(mine) > 1 else [],
            chief=chief[0] if chief else None,
        )
        return context
