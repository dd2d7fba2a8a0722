"""What recording a run's manifest costs before the first node starts (issue 29): the git
processes it starts, counted by a wrapper on PATH that logs each call and runs the real git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from dtrun.record.manifest import git_revision


def _logging_wrapper(bin_dir: Path, name: str, log: Path) -> None:
    real = shutil.which(name)
    assert real is not None, f"{name} is needed on PATH"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / name
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)


def _git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def test_the_checkout_s_commit_and_state_come_from_one_git_process(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "tracked.txt").write_text("one\n")
    (root / "untracked.txt").write_text("not counted\n")
    _git(root, "add", "tracked.txt")
    _git(root, "commit", "-q", "-m", "first")
    head = _git(root, "rev-parse", "HEAD")
    log = tmp_path / "git.log"
    _logging_wrapper(tmp_path / "bin", "git", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    assert git_revision(root) == {"revision": head, "dirty": False}  # untracked files do not count
    (root / "tracked.txt").write_text("two\n")
    assert git_revision(root) == {"revision": head, "dirty": True}
    assert len(log.read_text().splitlines()) == 2  # one git process per look


def test_a_directory_outside_git_or_before_its_first_commit_has_no_revision(tmp_path):
    assert git_revision(tmp_path) is None
    _git(tmp_path, "init", "-q")
    assert git_revision(tmp_path) is None
