"""When a launch is decided, by its success rule (--success): one rule for every executor.

Each executor learns of node exits its own way (a waiter thread, an SSH channel, srun's labelled
output) and asks ``after_exit`` what one exit means; the Slurm executor, which reads every exit
from the step's output, replays them in order with ``settle``. Under ``all`` (the default) a
launch succeeds when every node's script has exited 0; under ``worker0`` (Volcano Engine's
rule) when node 0's has: the nodes still running are then stopped, and recorded as stopped
after worker 0, not as failures. Under both rules a node that exits non-zero before the launch
is decided fails it at once. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from dtrun.spec.launchplan import NodeLaunch
from dtrun.spec.outcome import NodeResult, SuccessRule


class Next(Enum):
    """What one node's exit means for the launch."""

    WAIT = "wait"  # nothing yet: wait for the other nodes
    FAILED = "failed"  # this node failed the launch: stop the others
    DONE = "done"  # the launch succeeded: stop the nodes still running


def after_exit(success: SuccessRule, launch: NodeLaunch, code: int) -> Next:
    """What ``launch``'s node exiting with ``code`` means under ``success``."""
    if code != 0:
        return Next.FAILED
    if success is SuccessRule.WORKER0 and launch.node_rank == 0:
        return Next.DONE
    return Next.WAIT


@dataclass(frozen=True)
class Settled:
    """The exit that decided a launch, if one did."""

    next: Next  # WAIT: none decided it (every node exited 0 under `all`, or some still run)
    launch: NodeLaunch | None = None  # the node whose exit decided it
    at: float | None = None  # when that exit happened


def settle(success: SuccessRule, exits: Iterable[tuple[float, NodeLaunch, int]]) -> Settled:
    """The first of these exits (when, node, code) that decides the launch, in time order."""
    for when, launch, code in sorted(exits, key=lambda exit: (exit[0], exit[1].node_rank)):
        step = after_exit(success, launch, code)
        if step is not Next.WAIT:
            return Settled(step, launch, when)
    return Settled(Next.WAIT)


def mark_stopped(success: SuccessRule, results: tuple[NodeResult, ...]) -> tuple[NodeResult, ...]:
    """A launch that succeeded: under `worker0` the nodes dtrun stopped (no exit code) were
    still running when node 0 exited 0, and say so."""
    if success is not SuccessRule.WORKER0:
        return results
    return tuple(
        replace(result, stopped_after_worker0=True) if result.exit_code is None else result
        for result in results
    )
