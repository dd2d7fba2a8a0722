"""After a failed launch on real machines: was a node evicted? (issue 16; docs/bench.md)

A spot VM that Azure takes back gets a Scheduled Event of type ``Preempt`` naming it, about 30 s
ahead, in the instance metadata service (IMDS) every VM of the cluster can read; then it is
gone. So when a launch fails over SSH, dtrun asks the launch's nodes what Scheduled Events say
(templates/remote/scheduled-events.sh.j2): a node named in a ``Preempt`` event, or a node that
no longer answers at all though it answered earlier in the sweep, turns the failure into an
:class:`EvictedError` ("evicted"), whose fix is `dtrun bench --resume`. Nodes that answer with no
such event, and nodes that never answered (a wrong address: the readiness error says so), leave
the failure as it was.

``DTRUN_IMDS_URL`` overrides the metadata service's address (tests: a fake on loopback).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection

from dtrun import __version__
from dtrun.errors import DtrunError, RunError
from dtrun.execute import Answer
from dtrun.render import render
from dtrun.spec.launchplan import LaunchPlan

IMDS = "http://169.254.169.254"
Command = Callable[[dict[str, str]], dict[str, Answer]]


class EvictedError(RunError):
    """A node of the launch was evicted (a spot VM taken back) or vanished."""


def preempted(output: str) -> bool:
    """Whether the script's output shows a Preempt event naming this VM."""
    lines = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    vm = lines.get("dtrun-vm", "").strip()
    try:
        data = json.loads(lines.get("dtrun-events", "{}"))
    except (ValueError, RecursionError):  # not IMDS's answer: no event
        return False
    events = data.get("Events") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return False
    for event in events:
        if not isinstance(event, dict) or event.get("EventType") != "Preempt":
            continue
        resources = event.get("Resources")
        if resources in (None, []) or (isinstance(resources, list) and vm in resources):
            return True  # no list: every VM in the event's scope; a list: the VMs it names
    return False


def check_eviction(
    command: Command,
    plan: LaunchPlan,
    error: RunError,
    run_dir: str,
    answered: Collection[str] | None = None,
) -> RunError:
    """``error`` as it was, or an EvictedError naming the evicted and vanished nodes.
    ``answered``: the nodes that answered earlier in the sweep (None: every node of the plan);
    only those can have vanished."""
    script = render(
        "remote/scheduled-events.sh.j2",
        {"version": __version__, "imds": os.environ.get("DTRUN_IMDS_URL", IMDS)},
    )
    nodes = plan.every_node
    try:
        answers = command({node.name: script for node in nodes})
    except (DtrunError, OSError):  # a refused login, a changed host key: the failure stands
        return error
    said = []
    for node in nodes:
        answer = answers.get(node.name)
        if answer is None or answer.error is not None:
            if answered is not None and node.name not in answered:
                continue  # never reached: not gone, never there (the error names it)
            why = answer.error if answer is not None else "no answer"
            said.append(f"{node.name} ({node.address}) vanished: {why}")
        elif preempted(answer.output):
            said.append(f"{node.name} ({node.address}) was evicted: Azure's Scheduled Events "
                        "name it in a Preempt event")  # fmt: skip
    if not said:
        return error
    evicted = EvictedError(
        "evicted: " + "; ".join(said),
        why=error.message,
        fix=f"the finished points are kept in {run_dir}; run the rest with `dtrun bench "
        f"--resume {run_dir}` (on this cluster once its nodes are back, or on another)",
    )
    evicted.node_results = error.node_results
    return evicted
