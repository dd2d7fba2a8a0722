"""A torch extension build lock left by a killed process makes every later DeepSpeed start wait
forever (runner/engines/embedded/extensions.py): the embedded bench names it and how to mend it."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.engines.embedded.extensions import stale_locks


def dry_bench(tmp_path):
    runs = str(tmp_path / "runs")
    done = CliRunner(env={"COLUMNS": "400"}).invoke(
        app, ["bench", "--dry-run", "--nodes", "1,2", "--output", runs]
    )
    assert done.exit_code == 0, done.output
    return " ".join(done.output.split())


def test_a_lock_no_process_holds_is_named_with_the_command_that_removes_it(tmp_path, monkeypatch):
    root = tmp_path / "torch extensions"  # a space: the rm command quotes the path
    (root / "deepspeed_shm_comm").mkdir(parents=True)
    lock = root / "deepspeed_shm_comm" / "lock"
    lock.touch()  # what torch's FileBaton leaves when its holder is killed
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(root))
    said = dry_bench(tmp_path)
    assert f"warning: {lock} is a torch extension build lock that no process holds" in said
    assert f"remove it (rm '{lock}')" in said
    assert lock.exists()  # named, not removed: the cache is the user's


def test_torch_s_own_baton_is_not_named_while_held_and_named_once_its_holder_is_killed(
    tmp_path, monkeypatch
):
    """torch's FileBaton, as a rank takes it to build or load an op: held, it is a build under
    way; its holder SIGKILLed (a stopped launch), the file stays and every later load waits."""
    build = tmp_path / "ext" / "deepspeed_shm_comm"
    build.mkdir(parents=True)
    lock = build / "lock"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert stale_locks(settle=0) == []
        assert "torch extension build lock" not in dry_bench(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert lock.exists()
    assert stale_locks(settle=0) == [lock]


HOLD = """
import sys, time
from torch.utils.file_baton import FileBaton
assert FileBaton(sys.argv[1]).try_acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_torch_s_default_root_is_looked_in_a_level_deeper_where_the_nodes_look(
    tmp_path, monkeypatch
):
    """The nodes start without XDG_CACHE_HOME (runner/plan/machineenv.py), so their torch
    builds under HOME's .cache, and that is where dtrun looks."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-the-nodes"))
    build = tmp_path / ".cache" / "torch_extensions" / "py311_cpu" / "deepspeed_shm_comm"
    build.mkdir(parents=True)
    (build / "lock").touch()
    assert stale_locks(settle=0) == [build / "lock"]
