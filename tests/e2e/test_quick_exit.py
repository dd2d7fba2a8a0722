"""torchrun and DeepSpeed as dtrun's nodes run them: their own entry point, leaving as soon as
it returns (runner/plan/launchers/quickexit.py), against their console scripts.

Each test starts real launchers (torchrun ``--standalone`` or ``deepspeed --no_ssh``, one
worker) on a tiny program. Port 29962.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from dtrun.plan.launchers import deepspeed
from dtrun.plan.launchers.torchrun import QUICK_EXIT

BIN = Path(sys.executable).parent
# --log-dir in the working directory: without it torchrun leaves a /tmp/torchelastic_*
ARGS = ["--standalone", "--nproc-per-node=1", "--max-restarts=0", "--log-dir=torchelastic"]
MARKER = """
import atexit, os
atexit.register(lambda: open(os.path.join(os.environ["MARKS"], str(os.getpid())), "w").close())
"""


def _launch(quick: bool, program: Path, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    torchrun = [str(BIN / "python"), "-c", QUICK_EXIT] if quick else [str(BIN / "torchrun")]
    done = subprocess.run(
        [*torchrun, *ARGS, str(program)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_quick_exit_leaves_with_torchrun_s_exit_code_and_output(tmp_path: Path) -> None:
    works = tmp_path / "works.py"
    works.write_text('print("trained", flush=True)\n')
    fails = tmp_path / "fails.py"
    fails.write_text('raise RuntimeError("rank blew up")\n')
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for program, code in ((works, 0), (fails, 1)):
        plain = _launch(False, program, tmp_path, env)
        quick = _launch(True, program, tmp_path, env)
        assert plain[0] == quick[0] == code, (plain, quick)
        said = "trained" if code == 0 else "ChildFailedError"
        assert said in plain[1] and said in quick[1], (plain, quick)
        if code:  # torchrun's summary names the failed rank and the program, as before
            assert "rank blew up" in quick[1] and str(fails) in quick[1], quick


def test_quick_exit_runs_the_exit_handlers_and_ignores_the_user_s_modules(tmp_path: Path) -> None:
    """Every atexit handler of the agent runs (here one a sitecustomize registers in every
    process); a ``torch.py`` in the working directory (the user's code) shadows nothing."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(MARKER))
    marks = tmp_path / "marks"
    marks.mkdir()
    code = tmp_path / "code"
    code.mkdir()
    (code / "torch.py").write_text('raise SystemExit("the user\'s torch.py was imported")\n')
    program = tmp_path / "works.py"
    program.write_text('print("trained", flush=True)\n')
    env = dict(os.environ, PYTHONPATH=str(site), MARKS=str(marks), PYTHONUNBUFFERED="1")
    returncode, output = _launch(True, program, code, env)
    assert returncode == 0, output
    assert "trained" in output
    assert len(list(marks.iterdir())) == 2, output  # the agent's and its worker's


def test_deepspeed_s_quick_exit_leaves_with_its_exit_code(tmp_path: Path) -> None:
    """The deepspeed script exits with its launcher's non-zero code; so does the quick exit
    (its success is every DeepSpeed e2e launch's)."""
    (tmp_path / "hostfile").write_text("localhost slots=1\n")
    fails = tmp_path / "fails.py"
    fails.write_text('raise RuntimeError("rank blew up")\n')
    args = ["--no_ssh", "--node_rank=0", "--hostfile=hostfile", "--master_addr=127.0.0.1",
            "--master_port=29962", str(fails)]  # fmt: skip
    codes = []
    for command in ([str(BIN / "deepspeed")], [str(BIN / "python"), "-c", deepspeed.QUICK_EXIT]):
        done = subprocess.run(
            [*command, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
        assert "rank blew up" in done.stdout + done.stderr, done.stdout + done.stderr
        codes.append(done.returncode)
    assert codes[0] == codes[1] != 0, codes
