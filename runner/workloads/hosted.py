"""Whether a workload runs inside a host's process: the Spark engine's rank runs it in its own
Python, with no second start (runner/engines/spark/inprocess.py), and leaves without interpreter
finalisation itself once its host is done. A hosted workload's ``exit_now``
(runner/workloads/result.py) then raises SystemExit, so the host records the code.

Standard library only, Python 3.10: the Spark rank imports it before the workload.
"""

from __future__ import annotations

_hosted = False


def host() -> None:
    """From now on, this process hosts a workload."""
    global _hosted
    _hosted = True


def hosted() -> bool:
    return _hosted
