"""Torch extension build locks that no process holds, on the machine the embedded nodes run on.

torch builds or loads a JIT extension under a FileBaton: ROOT/NAME/lock, made with
O_CREAT|O_EXCL and held open until the build is done; a process that finds the file waits, with
no end, until it is gone (torch/utils/file_baton.py, torch 2.13.0). A user's DeepSpeed program
takes it in every rank on CPUs, for deepspeed_shm_comm (docs/launchers.md). A rank killed while
it holds one (a stopped launch, Ctrl-C during a first build) leaves the file behind, and every
later launch of that program hangs in its first line of DeepSpeed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path

from dtrun.plan.machineenv import node_environment


def extensions_root() -> Path:
    """Where the embedded nodes' torch builds extensions: TORCH_EXTENSIONS_DIR, or torch's
    default, the cache directory's torch_extensions (torch.utils.cpp_extension's
    get_default_build_root: appdirs' user_cache_dir, XDG_CACHE_HOME or ~/.cache on Linux), in
    the environment a node starts with (runner/plan/machineenv.py)."""
    env = node_environment(os.environ)
    given = env.get("TORCH_EXTENSIONS_DIR")
    if given:
        return Path(given)
    cache = env.get("XDG_CACHE_HOME")
    home = Path(env.get("HOME") or Path.home())
    return (Path(cache) if cache else home / ".cache") / "torch_extensions"


def _held(lock: Path) -> bool:
    """Whether a live process has the lock open: the baton's holder keeps its descriptor."""
    import psutil  # only where a lock is found: not on every command's import path

    target = str(lock)
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(f.path == target for f in proc.open_files()):
                return True
    return False


def stale_locks(root: Path | None = None, *, settle: float = 1.0) -> list[Path]:
    """The build locks under ``root`` that no process holds. Under TORCH_EXTENSIONS_DIR a lock
    is NAME/lock; under torch's default root a level more (py311_cpu/NAME/lock). A holder
    closes its descriptor just before it removes the file, so a lock is looked at twice,
    ``settle`` seconds apart."""
    root = extensions_root() if root is None else root
    try:
        found = [p for p in (*root.glob("*/lock"), *root.glob("*/*/lock")) if not _held(p)]
    except OSError:
        return []
    if not found:
        return []
    time.sleep(settle)
    return [lock for lock in found if lock.is_file() and not _held(lock)]


def stale_lock_warnings() -> list[str]:
    """One warning per stale lock: what it does, and the command that mends it."""
    return [
        f"{lock} is a torch extension build lock that no process holds (a process was killed "
        "while it built or loaded the extension): DeepSpeed and every other JIT-built op wait "
        f"for it forever; remove it (rm {shlex.quote(str(lock))})"
        for lock in stale_locks()
    ]
