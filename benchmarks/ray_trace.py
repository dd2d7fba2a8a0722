"""Where the time of one `dtrun bench --ray` goes: runs dtrun's CLI in this process with
timestamps around the Ray engine's phases, and writes them as JSON (phase: seconds since the
process started) to the file named first. Used by benchmarks/ray_vs_torchrun.py --trace.

    .venv/bin/python benchmarks/ray_trace.py TRACE.json bench --ray HEAD:PORT ...

The phases: the imports before dtrun's CLI runs; joining the cluster (``import ray`` and
``ray.init``); each launch's placement group (made, ready), its actors (each started its
script), the first line of each node's output, the last node's exit, the stop (scripts, actors,
group); leaving the cluster (detached actors, ``ray.shutdown``), beside the report, and the
engine's block waiting for it; the end of the process.
"""

from __future__ import annotations

import atexit
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

BORN = psutil.Process().create_time()
MARKS: list[tuple[str, float]] = []


def mark(what: str) -> None:
    MARKS.append((what, time.time() - BORN))


def around(owner: Any, name: str, what: str) -> None:
    """``owner.name`` marked at its start and its end."""
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        mark(f"{what} begins")
        try:
            return inner(*args, **kwargs)
        finally:
            mark(f"{what} ends")

    setattr(owner, name, timed)


def install() -> None:
    from dtrun.engines.ray import executor, session

    around(session.RaySession, "open", "join (import ray, ray.init)")
    around(session.RaySession, "_close", "leave (detached actors, ray.shutdown)")
    around(session.RaySession, "close", "the engine's block left (the leave waited for)")
    around(session.RaySession, "kill_detached", "detached actors looked up")
    around(executor._Launch, "stop", "stop (scripts, actors, group)")
    around(executor._Launch, "supervise", "run (first poll to last exit)")
    place = executor._Launch.place

    def placed(self: Any) -> None:
        import ray

        pg: Any = sys.modules["ray.util.placement_group"]  # the module (ray.util's: a function)

        made, wait, get = pg.placement_group, ray.wait, ray.get

        def group(*args: Any, **kwargs: Any) -> Any:
            mark("placement group asked")
            return made(*args, **kwargs)

        def waited(*args: Any, **kwargs: Any) -> Any:
            try:
                return wait(*args, **kwargs)
            finally:
                mark("placement group ready")

        def got(*args: Any, **kwargs: Any) -> Any:
            try:
                return get(*args, **kwargs)
            finally:
                mark("an actor started its script")

        pg.placement_group, ray.wait, ray.get = group, waited, got
        try:
            place(self)
        finally:
            pg.placement_group, ray.wait, ray.get = made, wait, get

    executor._Launch.place = placed  # type: ignore[method-assign]
    write = executor._Launch.write
    heard: set[str] = set()

    def written(self: Any, node: Any, lines: list[bytes]) -> None:
        name = node.launch.node.name
        if lines and name not in heard:
            heard.add(name)
            mark(f"first line of {name}")
        write(self, node, lines)

    executor._Launch.write = written  # type: ignore[method-assign]


def main() -> None:
    out = Path(sys.argv[1])
    mark("python started, dtrun imported next")
    from dtrun.cli.app import app

    install()
    mark("dtrun's CLI runs")

    def save() -> None:
        mark("process ends")
        out.write_text(json.dumps(MARKS, indent=1) + "\n")

    atexit.register(save)
    app(sys.argv[2:], prog_name="dtrun")


if __name__ == "__main__":
    main()
