"""The step hook (runner/workloads/stephook/) inside a program that brings its own names: a
``runner`` module, a ``sitecustomize`` (a module, a package, one that raises), a forked child,
and a hook that cannot load. Each runs a real Python process with the hook's environment, as
`dtrun bench` gives it (tests/e2e/test_stephook.py, ``hook_env``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ended, run_dtrun, wait_for
from tests.e2e.test_stephook import HOOK, hook_env
from tests.e2e.test_stephook import workdir as workdir  # a fixture: this test's processes only
from tests.paths import REPO, TESTS

# A program that steps an optimizer STEPS times, as a user writes one.
STEPS = """
import torch
p = torch.nn.Parameter(torch.ones(4))
opt = torch.optim.SGD([p], lr=0.1)
for _ in range(6):
    p.grad = torch.ones(4)
    opt.step()
"""


def run(
    code: str, env: dict[str, str], cwd: Path, name: str = "train.py"
) -> subprocess.CompletedProcess[str]:
    """``python name`` in ``cwd`` (the program's directory: first on its sys.path)."""
    (cwd / name).write_text(code)
    return subprocess.run(
        [sys.executable, name], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def step_record(steps: Path, rank: str = "0") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((steps / f"rank-{rank}.json").read_text())
    return data


def test_a_runner_module_beside_the_program_does_not_shadow_the_hook(tmp_path):
    # The hook imported dtrun.workloads.files and .noise by name: the program's own runner.py
    # (first on its path) took the name, the record was never written, and the launch was
    # timed as a whole program with no warning.
    (tmp_path / "runner.py").write_text("NAME = 'the program s own'\n")
    program = "import runner\nassert runner.NAME == 'the program s own'\n" + STEPS
    env = hook_env(tmp_path / "steps") | {"RANK": "0", "DTRUN_WARMUP": "2"}
    done = run(program, env, tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    record = step_record(tmp_path / "steps")
    assert len(record["step_ends_s"]) == 6
    assert record["errors"] == []
    assert record["noise_window"] is not None  # runner/workloads/noise.py, loaded by its path
    assert record["param_digest"] is not None


WHICH = "import json, sys\nprint(json.dumps(sys.modules['sitecustomize'].__file__))\n"


def test_a_sitecustomize_package_runs_and_is_the_one_the_program_imports(tmp_path):
    package = tmp_path / "lib" / "sitecustomize"
    package.mkdir(parents=True)
    marker = tmp_path / "marker"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = hook_env(None) | {"PYTHONPATH": os.pathsep.join([str(HOOK), str(package.parent)])}
    done = run(WHICH + "import sitecustomize\n", env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == str(package / "__init__.py")
    assert marker.read_text() == "ran"


def test_a_sitecustomize_that_raises_still_raises_and_the_steps_are_timed(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sitecustomize.py").write_text("raise RuntimeError('the site is broken')\n")
    program = "import sys\nprint('sitecustomize' in sys.modules)\n" + STEPS
    seen = {}
    for hooked in (True, False):
        env = hook_env(tmp_path / "steps", hook=hooked) | {"RANK": "0"}
        env["PYTHONPATH"] = os.pathsep.join([str(HOOK)] * hooked + [str(lib)])
        done = run(program, env, tmp_path)
        assert done.returncode == 0, done.stderr
        seen[hooked] = (done.stdout, done.stderr)
    assert seen[True] == seen[False]  # as Python says it without dtrun
    assert seen[True] == (
        "False\n",
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
        "RuntimeError: the site is broken\n",
    )
    assert len(step_record(tmp_path / "steps")["step_ends_s"]) == 6


# Three steps, a fork, seventeen more in the parent; the child exits (through Python's exit
# handlers) once the parent has written its record (at its exit), whatever the load: a child
# that slept a fixed 1.5 s could end first on a loaded machine, and its record be overwritten.
FORKS = """
import os, sys, time
import torch
p = torch.nn.Parameter(torch.ones(4))
opt = torch.optim.SGD([p], lr=0.1)
for step in range(20):
    p.grad = torch.ones(4)
    opt.step()
    if step == 2 and os.fork() == 0:
        open("child.pid", "w").write(str(os.getpid()))
        parents = os.path.join(os.environ["DTRUN_STEP_DIR"], "rank-0.json")
        deadline = time.monotonic() + 60
        while not os.path.exists(parents) and time.monotonic() < deadline:
            time.sleep(0.01)
        sys.exit(0)
print(os.getpid())
"""


def test_a_forked_child_that_exits_last_leaves_the_parents_steps(tmp_path):
    env = hook_env(tmp_path / "steps") | {"RANK": "0"}
    done = run(FORKS, env, tmp_path)
    assert done.returncode == 0, done.stderr
    child = int((tmp_path / "child.pid").read_text())
    # its exit handlers have run once it has exited (a zombie too: init reaps it in its time)
    wait_for(lambda: ended(child), timeout=60, what="the forked child to exit")
    record = step_record(tmp_path / "steps")
    assert (len(record["step_ends_s"]), record["pid"]) == (20, int(done.stdout))  # not 3


def test_a_hook_that_does_not_load_leaves_its_reason_in_a_torch_process(tmp_path):
    broken = tmp_path / "workloads" / "stephook"  # as dtrun's code directory lays it out
    shutil.copytree(HOOK, broken)
    shutil.copy(HOOK.parent / "files.py", broken.parent)
    (broken / "_dtrun_stephook.py").write_text("raise ImportError('the hook is broken')\n")
    env = hook_env(tmp_path / "steps") | {"RANK": "0", "PYTHONPATH": f"{broken}:{REPO}"}
    done = run(STEPS, env, tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr  # the program's run as is
    record = step_record(tmp_path / "steps")
    assert record["step_ends_s"] == []
    assert record["errors"] == ["load: ImportError: the hook is broken"]
    # a process that imports no torch (a launcher, a shell's helper) leaves nothing
    shutil.rmtree(tmp_path / "steps")
    assert run("print('no torch')\n", env, tmp_path).returncode == 0
    assert not (tmp_path / "steps").exists()


# A program that starts its own launcher: 2 processes inside dtrun's 1.
INNER_LAUNCHER = """
import os, sys
torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
os.execv(torchrun, [torchrun, "--standalone", "--nproc-per-node", "2", "--log-dir=inner",
                    {program!r}, "--steps", "6", "--sleep", "0.01"])
"""


@pytest.mark.e2e
def test_a_program_that_starts_its_own_launcher_is_said_to_disagree_with_the_world_size(
    workdir,
):
    # it recorded ranks 0 and 1 while dtrun reported world size 1, without a word
    inner = workdir / "inner.py"
    inner.write_text(INNER_LAUNCHER.format(program=str(TESTS / "programs" / "ddp_loop.py")))
    done = run_dtrun(
        "bench", "--nodes", "1", "--repeat", "1", "--warmup", "2", "--port", "29830",
        "--output", str(workdir / "runs"), "--run-id", "inner", "--", "python", str(inner),
        cwd=workdir, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((workdir / "runs/inner/n1/r0/result.json").read_text())
    said = "not checked: the step records name ranks 0, 1, where dtrun launched 1 process (rank 0)"
    assert f"{result['proof']['answer']}: {result['proof']['why']}".startswith(said)
    assert said in " ".join(done.stdout.split())  # the console's line for the launch
    assert said in (workdir / "runs/inner/report.md").read_text()


@pytest.mark.e2e
def test_a_program_beside_its_own_runner_module_is_timed_by_its_steps(workdir):
    # the launch exited 0 "whole-program time, 5465.6 ms" instead of about 20 ms a step
    # (in a folder of its own: the tests start dtrun as `python -m dtrun.cli` from their
    # working directory, which Python puts first on dtrun's own path)
    project = workdir / "project"
    project.mkdir()
    (project / "runner.py").write_text("NAME = 'the program s own'\n")
    program = project / "train.py"
    program.write_text(
        "import runner\nassert runner.NAME == 'the program s own'\n"
        + STEPS.replace("range(6)", "range(8)")
    )
    done = run_dtrun(
        "bench", "--nodes", "1", "--repeat", "1", "--warmup", "2", "--port", "29832",
        "--output", str(workdir / "runs"), "--run-id", "own", "--", "python", str(program),
        cwd=workdir, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((workdir / "runs/own/n1/r0/result.json").read_text())
    assert (result["timing"], result["optimizer_steps"]) == ("optimizer steps", 8)
    assert result["hook_errors"] == []
