"""This machine's noise as a sweep on the embedded cluster begins, for the manifest.

Half a second of /proc/stat and the 1-minute load average, sampled in a thread so the sweep's
start waits for nothing. The first launch may start within the half second: the CPU time of
dtrun and every process it started is subtracted, so "other load" is everyone else's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import psutil

from dtrun.workloads.noise import (
    clock_ticks,
    machine_figures,
    read_cpu_times,
    read_loadavg,
)

SAMPLE_S = 0.5


def tree_cpu_s() -> float:
    """CPU seconds of this process and every process under it, live or reaped.

    A live process counts its own time and its reaped children's; a reaped one is in its
    reaper's. A process that exited and was not yet reaped is missed.
    """
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def sample_machine(seconds: float = SAMPLE_S) -> dict[str, Any]:
    """Steal and other load over ``seconds`` of /proc/stat, and the load average before."""
    loadavg = read_loadavg()
    start, own_start, began = read_cpu_times(), tree_cpu_s(), time.perf_counter()
    time.sleep(seconds)
    end, own_end, ended = read_cpu_times(), tree_cpu_s(), time.perf_counter()
    wall_s, dtrun_s = ended - began, own_end - own_start
    ticks = None
    if start is not None and end is not None:
        delta = end.minus(start)
        ticks = {"total": delta.total, "busy": delta.busy, "steal": delta.steal}
    figures = machine_figures(ticks, clock_ticks(), wall_s, dtrun_s)
    return {
        "sample_s": round(wall_s, 3),
        "cpus": os.cpu_count(),
        "loadavg_1m": loadavg,
        "dtrun_cpu_s": round(dtrun_s, 3),
        **{key: None if value is None else round(value, 4) for key, value in figures.items()},
    }


class MachineSample:
    """sample_machine in a thread, started now; ``result`` waits for it (half a second from
    the start at most)."""

    def __init__(self, seconds: float = SAMPLE_S) -> None:
        self._result: dict[str, Any] | None = None
        self._thread = threading.Thread(
            target=self._run, args=(seconds,), name="dtrun-noise-sample", daemon=True
        )
        self._thread.start()

    def _run(self, seconds: float) -> None:
        # A sample that fails leaves the manifest's noise null; it never stops a sweep.
        with contextlib.suppress(OSError, psutil.Error):
            self._result = sample_machine(seconds)

    def result(self, *, wait: bool = True) -> dict[str, Any] | None:
        """The sample; None if it failed, or if it is not done and ``wait`` is False."""
        if wait:
            self._thread.join()
        return self._result
