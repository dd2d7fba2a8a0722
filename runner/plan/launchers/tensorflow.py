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


def tasks(ctx: PlanContext) -> tuple[Task, ...]:
    """Every task of the cluster; tasks sharing a node take consecutive ports from --port."""
    if ctx.procs_per_node != 1:
        raise PlanError(
            "the tensorflow launcher runs one worker per node",
            why=f"got --procs-per-node {ctx.procs_per_node}; a TensorFlow worker uses every GPU "
            "of its node itself",
            fix="pass --procs-per-node 1",
        )
    per_node: list[list[tuple[str, int]]] = [[] for _ in ctx.nodes]
    if ctx.options.tf_strategy is TfStrategy.PARAMETER_SERVER:
        per_node[0].append((CHIEF, 0))
    for rank in range(ctx.nnodes):
        per_node[rank].append((WORKER, rank))
    if ctx.options.tf_strategy is TfStrategy.PARAMETER_SERVER:
        for index in range(ctx.options.tf_ps):
            per_node[index % ctx.nnodes].append((PS, index))
    return tuple(
        Task(kind, index, rank, ctx.rdzv_port + slot)
        for rank, node_tasks in enumerate(per_node)
        for slot, (kind, index) in enumerate(node_tasks)
    )


def by_role(task: Task) -> tuple[int, int]:
    """Chief, workers, parameter servers, each by index: TF_CONFIG's lists are index-ordered."""
    return (CHIEF, WORKER, PS).index(task.type), task.index


def tf_config(ctx: PlanContext, task: Task, every: tuple[Task, ...]) -> str:
    cluster: dict[str, list[str]] = {}
    for other in sorted(every, key=by_role):  # a task's index is its place in its list
        cluster.setdefault(other.type, []).append(
            f"{ctx.nodes[other.node_rank].address}:{other.port}"
        )
    config = {"cluster": cluster, "task": {"type": task.type, "index": task.index}}
    return json.dumps(config, indent=2) + "\n"


class Tensorflow:
    name = "tensorflow"
    template = "launch/tensorflow.sh.j2"
    framework: Framework | None = None  # dtrun's built-in workloads are PyTorch programs

    def scripts(self, ctx: PlanContext) -> tuple[Script, ...]:
        serving = ctx.options.tf_strategy is TfStrategy.PARAMETER_SERVER
        return tuple(Script(rank, service=serving and rank > 0) for rank in range(ctx.nnodes))

    def files(self, ctx: PlanContext) -> tuple[LaunchFile, ...]:
        every = tasks(ctx)
        return tuple(
            LaunchFile(task.file, tf_config(ctx, task, every), node_rank=task.node_rank)
            for task in sorted(every, key=by_role)
        )

    def node_context(self, ctx: PlanContext, node_rank: int) -> dict[str, object]:
        mine = [task for task in tasks(ctx) if task.node_rank == node_rank]
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
