"""The suite's own TORCH_EXTENSIONS_DIR, with DeepSpeed's shared-memory op built once in it.

A user's DeepSpeed program (tests/programs/deepspeed_loop.py) JIT-builds or loads
`deepspeed_shm_comm` in every rank's init_distributed (docs/launchers.md, "deepspeed"). Each
build or load takes torch's FileBaton: a `lock` file made with O_CREAT|O_EXCL and held open
until the build is done (torch/utils/file_baton.py, torch 2.13.0). A process killed while it
holds one leaves the file behind, and every later load waits for it forever: in CI that hung all
seven DeepSpeed program tests until their timeouts (2026-12-02).

So the tests build the op once, outside any launch a test may kill, in a directory of the
suite's own; and before each DeepSpeed program test they remove a lock that no process holds.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from dtrun.engines.embedded.extensions import stale_locks
from tests.paths import REPO

DIRECTORY = REPO / ".cache" / "torch-extensions"  # under .cache/, which git ignores
BUILD = (
    "from deepspeed.accelerator import get_accelerator\n"
    "builder = get_accelerator().create_op_builder('ShareMemCommBuilder')\n"
    "builder is None or builder.load()\n"
)
_built = False  # in this process (one per xdist worker)


def use_own_directory() -> None:
    """Every process the tests start builds and loads torch extensions in DIRECTORY."""
    os.environ["TORCH_EXTENSIONS_DIR"] = str(DIRECTORY)


def ready() -> list[Path]:
    """Remove stale batons, then build the op once per process; return what was removed."""
    global _built
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    with (DIRECTORY / ".tests.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # released by the kernel if this process dies
        removed = stale_locks(DIRECTORY)  # dtrun's own look (runner/engines/embedded)
        for lock in removed:
            lock.unlink(missing_ok=True)
        if not _built:
            done = subprocess.run(
                [sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=900,
                check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"building DeepSpeed's op failed:\n{done.stderr[-3000:]}")
            _built = True
    return removed
