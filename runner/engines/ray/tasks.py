"""Short scripts on Ray's nodes (dtrun exec, --check): one Ray task per node, pinned to the
node's address, running the script with bash."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Mapping

from dtrun.engines.ray.session import RaySession
from dtrun.execute import Answer, LineSink

ANSWER_S = 300.0  # how long a node's script may take, scheduling included


def bash(script: str) -> tuple[str, int]:
    """Run in a Ray worker: the script's output and exit code."""
    done = subprocess.run(
        ["bash", "-s"], input=script.encode(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, check=False, start_new_session=True,
    )  # fmt: skip
    return done.stdout.decode(errors="replace"), done.returncode


def run_commands(
    session: RaySession,
    addresses: Mapping[str, str],
    scripts: dict[str, str],
    on_line: LineSink | None = None,
) -> dict[str, Answer]:
    ray = session.ray
    remote = ray.remote(num_cpus=0, max_retries=0)(bash)
    refs = {
        name: remote.options(resources={f"node:{addresses[name]}": 0.001}).remote(script)
        for name, script in scripts.items()
    }
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=ANSWER_S)
    answers = {}
    for name, ref in refs.items():
        try:
            output, code = ray.get(ref, timeout=0)
        except ray.exceptions.RayError as error:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            reason = "no answer" if isinstance(error, ray.exceptions.GetTimeoutError) else error
            answers[name] = Answer(error=f"Ray: {str(reason).strip().splitlines()[0]}")
            continue
        if on_line is not None:
            for line in output.splitlines():
                on_line(name, line)
        answers[name] = Answer(output.rstrip("\n"), code)
    return answers
