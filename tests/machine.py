"""What two pytest-xdist workers cannot share even in network namespaces of their own
(--worker-netns, tests/conftest.py), and how they are kept apart.

- The Slurm tests' daemons use the machine's munged and kill it after.
- The Ray tests each start a two-raylet cluster per module (tests/raycluster.py): one worker runs
  them all, so a module's tests share its cluster and two clusters never run at once.
- The Spark tests each start JVMs of a GiB or more (a local-cluster's master, workers and
  executors, or a standalone cluster); two such at once on a 2-core machine were not tried,
  and their executor waits are timed. (They also wrote every application's directory under
  pyspark/work/ in the venv, named by the second it started, until the driver gave a
  local-cluster a Spark home of its own: runner/engines/spark/driver.py. A SparkSession a test
  starts itself still writes there: test_spark_torchrun.py's, which test_e2e_spark.py's check
  that nothing new appears there would see.)

Under ``--dist loadgroup``, ``MachineGroups`` runs each such group of files on one worker, one
test after another. It takes the place of xdist's own loadgroup: it is xdist's
LoadScopeScheduling with the scope taken from the file's name. xdist 3.8's loadgroup reads a
test's group from a suffix it writes into the test's node id, which pytest 9.2 no longer lets
it write (pytest-dev/pytest-xdist#1386): its groups silently stop, and the Slurm tests ran on
both workers.
``hold`` makes a broken grouping fail at once, naming the cause, instead of two workers
racing for the same daemons.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

SHARED_BY_MACHINE = {"test_e2e_slurm.py": "slurm", "test_check_slurm.py": "slurm",
                     "test_untagged_orphans.py": "slurm",
                     "test_e2e_spark.py": "spark", "test_e2e_spark_app.py": "spark",
                     "test_check_spark.py": "spark", "test_spark_torchrun.py": "spark",
                     "test_e2e_ray.py": "ray", "test_e2e_ray_faults.py": "ray",
                     "test_e2e_ray_exec.py": "ray", "test_check_ray.py": "ray",
                     "test_e2e_ray_hang.py": "ray"}  # fmt: skip
# where the claims live; a scratch suite (tests/unit/test_parts.py) gets its own
LOCKS = Path(os.environ.get("DTRUN_TEST_LOCKS", "/tmp/dtrun-tests-locks"))


def scope_of(nodeid: str) -> str:
    """A test's scheduling unit: its machine group, or the test alone."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return SHARED_BY_MACHINE.get(name, nodeid)


def machine_groups(config: Any, log: Any) -> Any:
    """xdist's load-by-scope scheduler, each machine group one scope (imported here: xdist is
    there only under -n)."""
    from xdist.scheduler import LoadScopeScheduling

    class MachineGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return MachineGroups(config, log)


_HELD: dict[str, int] = {}  # group -> the open lock file: held until this process exits


def hold(group: str) -> None:
    """This test process's claim on a group's daemons, for the rest of its life (its session):
    a second process that claims the group while the first lives fails, naming why."""
    if group in _HELD:
        return
    LOCKS.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(LOCKS / group, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(
            f"another test process runs the {group} tests on this machine: under -n they must "
            "all run on one worker (tests/machine.py, --worker-netns); or another pytest run "
            "is using them: wait for it to end"
        ) from None
    _HELD[group] = fd
