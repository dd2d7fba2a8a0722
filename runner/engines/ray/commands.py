"""Short scripts on Ray's nodes (``dtrun exec``, the readiness of ``dtrun check``): one Ray
task per node, pinned to the node's address, runs the script with bash and hands its output
back as it comes (a generator task), so each node's lines are shown while it runs.

The script runs in a process group of its own with a guard (runner/engines/ray/node.py): a
killed raylet or Ray worker, a stopped dtrun (its job ends, and Ray kills the job's workers) or
a script past ANSWER_S (its task cancelled) ends the whole group. A node whose task Ray lost is
answered with Ray's reason, at once; the other nodes' scripts run on (docs/ray.md).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Mapping
from typing import Any

from dtrun.engines.common.scripts import AnswerLines, line_text
from dtrun.engines.ray.node import NodeProcess
from dtrun.engines.ray.session import RaySession, said
from dtrun.execute import Answer, LineSink

ANSWER_S = 300.0  # how long a node's script may take, scheduling included
CHUNK_S = 0.2  # how often a node's task hands over the lines it has


def bash(script: str, tag: str) -> Iterator[tuple[list[bytes], int | None]]:
    """Run in a Ray worker: the script's lines as they come, its exit code with the last."""
    process = NodeProcess(tag)
    process.spawn(["bash", "-c", script, "bash"])
    while True:
        lines, code = process.poll(CHUNK_S)
        if code is not None:
            rest, _ = process.stop(0.5)  # what it left in its group goes with it, as a launch's
            yield lines + rest, code
            return
        if lines:
            yield lines, None


def run_commands(
    session: RaySession,
    addresses: Mapping[str, str],
    scripts: dict[str, str],
    on_line: LineSink | None = None,
) -> dict[str, Answer]:
    ray = session.ray
    tag = secrets.token_hex(8)
    remote = ray.remote(num_cpus=0, max_retries=0)(bash)
    running: dict[str, Any] = {
        name: remote.options(resources={f"node:{addresses[name]}": 0.001}).remote(script, tag)
        for name, script in scripts.items()
    }
    by_generator = {id(generator): name for name, generator in running.items()}
    output = {name: AnswerLines() for name in scripts}  # each one's last lines (ANSWER_MOST)
    answers: dict[str, Answer] = {}
    deadline = time.monotonic() + ANSWER_S
    while running and time.monotonic() < deadline:
        ready, _ = ray.wait(list(running.values()), num_returns=1,
                            timeout=max(0.0, deadline - time.monotonic()))  # fmt: skip
        for generator in ready:
            name = by_generator[id(generator)]
            answer = _next(ray, generator, name, output[name], on_line)
            if answer is not None:
                answers[name] = answer
                del running[name]
    for name, generator in running.items():  # past ANSWER_S: its group ends with its worker
        ray.cancel(generator, force=True)
        answers[name] = Answer(output[name].text(), error=f"no answer in {ANSWER_S:g} s")
    return {name: answers[name] for name in scripts}


def _next(
    ray: Any, generator: Any, name: str, output: AnswerLines, on_line: LineSink | None
) -> Answer | None:
    """The node's answer once its task has ended (None while it runs); its lines shown."""
    try:
        lines, code = ray.get(next(generator))
    except StopIteration:  # never: the last chunk carries the exit code
        return Answer(output.text(), error="Ray: the task ended without an exit code")
    except ray.exceptions.RayError as error:  # a lost raylet or worker
        return Answer(output.text(), error=f"Ray: {said(error)}")
    for raw in lines:
        line = line_text(raw.decode(errors="replace"))
        output.add(line)
        if on_line is not None:
            on_line(name, line)
    return None if code is None else Answer(output.text(), code)
