"""dtrun's step hook (runner/workloads/stephook/sitecustomize.py) on real training programs.

Each e2e test starts a real launcher (torchrun, the deepspeed launcher, horovodrun) on 2
processes with the hook's directory first on PYTHONPATH, as `dtrun bench` does, and holds
the hook's rank-<R>.json files to the program's own clock (own-times-rank<R>.json, written by
the programs in tests/programs/): the program's own time for iteration i is the hook's
interval ends[i] - ends[i-1]. The programs of tests/programs/ that make uneven steps
(1, 2, 3 times --sleep in turn) show a clock that is one step off.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import processes_under
from tests.paths import REPO, TESTS

REPO = REPO
HOOK = REPO / "runner" / "workloads" / "stephook"
PROGRAMS = TESTS / "programs"
BIN = Path(sys.executable).parent
# --log-dir in the launch's working directory: without it torchrun leaves a /tmp/torchelastic_*
TORCHRUN = [
    str(BIN / "torchrun"),
    "--standalone",
    "--nproc-per-node",
    "2",
    "--log-dir=torchelastic",
]
HOROVODRUN = [str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2", sys.executable]
# The toy model of every program: Linear(64, 64) and Linear(64, 8), float32.
PARAMS = 64 * 64 + 64 + 64 * 8 + 8
GRADIENT_BYTES = {"float32": PARAMS * 4}


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A launch directory that must hold no running process when the test ends. (Not the
    shared workdir: that one also ends every dtrun launch on the machine, other sessions'
    included, and these launches are not dtrun's.)"""
    yield tmp_path
    deadline = time.monotonic() + 10  # a launcher's last child may take a moment to go
    while (left := processes_under(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not left, f"processes left behind: {left}"


def deepspeed_launcher(port: int) -> list[str]:
    return [str(BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(port)]


def hook_env(steps: Path | None, *, hook: bool = True) -> dict[str, str]:
    """The environment `dtrun bench` gives a program: the hook first on PYTHONPATH, then the
    repository (dtrun's code directory); without ``hook``, the same program unhooked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTRUN_STEP")}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK), str(REPO)] if hook else [str(REPO)])
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])  # horovodrun's `python`
    env["OMP_NUM_THREADS"] = "1"
    if hook:
        env["DTRUN_STEP_HOOK"] = "1"
    if steps is not None:
        env["DTRUN_STEP_DIR"] = str(steps)
    return env


def launch(
    launcher: list[str], program: str, *args: str, cwd: Path, hook: bool = True
) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [*launcher, str(PROGRAMS / program), *args],
        cwd=cwd,
        env=hook_env(cwd / "steps", hook=hook),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def trained(
    launcher: list[str], program: str, *args: str, cwd: Path
) -> tuple[list[dict[str, Any]], list[list[float]]]:
    """Launch, expect success, and return each rank's hook record and own times."""
    done = launch(launcher, program, *args, cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in (cwd / "steps").iterdir()) == ["rank-0.json", "rank-1.json"]
    records = [json.loads((cwd / "steps" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    own = [json.loads((cwd / f"own-times-rank{r}.json").read_text()) for r in (0, 1)]
    for record in records:
        assert record["schema"] == "dtrun.steps/1"
        assert record["errors"] == []
    return records, own


def assert_matches_own_clock(record: dict[str, Any], own: list[float]) -> None:
    """One step per iteration of the program: each interval its own time within 25% (median),
    the mean within 5%. A miscount is off by a whole step or more: a clock one step off reads
    the uneven programs' steps (1, 2, 3 times --sleep, and a few ms of compute) 40% off or
    more at the median. Single steps of 20-120 ms move by a few ms beside other e2e workers on
    two cores (5.4% at the median seen with two workers; three run now), each step's own bit
    of CPU after its sleep waiting for a core."""
    ends = record["step_ends_s"]
    assert len(ends) == len(own)
    intervals = [later - earlier for earlier, later in itertools.pairwise(ends)]
    errors = [abs(mine - theirs) / theirs for mine, theirs in zip(intervals, own[1:], strict=True)]
    assert statistics.median(errors) <= 0.25, (intervals, own)  # step by step
    # and the mean step time (the first step has no visible start: warm-up)
    assert abs((ends[-1] - ends[0]) / sum(own[1:]) - 1) <= 0.05, (intervals, own)


def require_horovod() -> None:
    """Horovod is part of the test setup (./dev builds it): missing, these tests fail."""
    if importlib.util.find_spec("horovod") is None:
        pytest.fail("Horovod is not installed in this Python: run ./dev setup, which builds it")


def python_with_hook(code: str, env: dict[str, str], python: str = sys.executable) -> Any:
    done = subprocess.run(
        [python, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# What the hook does to a process, seen from inside it.
INSIDE = """
import json, sys
seen = {
    "ours": sys.modules["sitecustomize"].__file__,
    "finder": any(type(f).__name__ == "_Finder" for f in sys.meta_path),
    "torch_at_start": "torch" in sys.modules,
}
import torch.optim.optimizer as o
seen["pre_hooks"] = len(o._global_optimizer_pre_hooks)
seen["post_hooks"] = len(o._global_optimizer_post_hooks)
print(json.dumps(seen))
"""


def test_without_dtrun_step_hook_nothing_is_registered_and_torch_is_not_imported(tmp_path):
    env = hook_env(tmp_path / "steps", hook=True)
    del env["DTRUN_STEP_HOOK"]
    seen = python_with_hook(INSIDE, env)
    assert Path(seen["ours"]).parent == HOOK
    assert seen == {
        "ours": seen["ours"],
        "finder": False,
        "torch_at_start": False,
        "pre_hooks": 0,
        "post_hooks": 0,
    }


def test_with_dtrun_step_hook_the_hooks_wait_for_the_program_to_import_torch(tmp_path):
    seen = python_with_hook(INSIDE, hook_env(tmp_path / "steps"))
    assert Path(seen["ours"]).parent == HOOK
    assert (seen["finder"], seen["torch_at_start"]) == (True, False)
    assert (seen["pre_hooks"], seen["post_hooks"]) == (1, 1)


# An optimizer whose third step raises, caught by the program (an AMP-style skipped step)
RAISES_ONCE = """
import json, torch
p = torch.nn.Parameter(torch.ones(2))
class Flaky(torch.optim.SGD):
    calls = 0
    def step(self, closure=None):
        Flaky.calls += 1
        if Flaky.calls == 3:
            raise RuntimeError("inf in the gradients")
        return super().step(closure)
opt = Flaky([p], lr=0.1)
for _ in range(8):
    p.grad = torch.ones(2)
    try:
        opt.step()
    except RuntimeError:
        pass
print(json.dumps(Flaky.calls))
"""


def test_a_step_that_raises_and_is_caught_does_not_hide_the_later_steps(tmp_path):
    env = hook_env(tmp_path / "steps") | {"RANK": "0"}
    assert python_with_hook(RAISES_ONCE, env) == 8
    record = json.loads((tmp_path / "steps" / "rank-0.json").read_text())
    assert len(record["step_ends_s"]) == 7  # every step that ended; a counter kept 2


WHICH_SITECUSTOMIZE = "import json, sys; print(json.dumps(sys.modules['sitecustomize'].__file__))"


@pytest.mark.parametrize("hook", [True, False], ids=["hooked", "off"])
def test_the_sitecustomize_the_hook_shadows_still_runs_and_is_the_programs(tmp_path, hook):
    other = tmp_path / "other"
    other.mkdir()
    marker = tmp_path / "marker"
    (other / "sitecustomize.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    )
    env = hook_env(None, hook=hook)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK), str(other), str(REPO)])
    seen = python_with_hook(WHICH_SITECUSTOMIZE, env)
    assert Path(seen) == other / "sitecustomize.py"  # the program's, as without dtrun
    assert marker.read_text() == "ran"


DEBIAN_PYTHON = Path("/usr/bin/python3.11")
DEBIAN_SITECUSTOMIZE = Path("/usr/lib/python3.11/sitecustomize.py")


@pytest.mark.skipif(
    not (DEBIAN_PYTHON.exists() and DEBIAN_SITECUSTOMIZE.exists()),
    reason="not a Debian or Ubuntu Python 3.11 (its sitecustomize installs apport's hook)",
)
def test_debians_own_sitecustomize_still_runs_under_the_system_python(tmp_path):
    # Debian's sitecustomize imports apport_python_hook and calls install(): a stand-in on the
    # path records that call.
    fake = tmp_path / "fake"
    fake.mkdir()
    marker = tmp_path / "marker"
    (fake / "apport_python_hook.py").write_text(
        f"import pathlib\ndef install():\n    pathlib.Path({str(marker)!r}).write_text('ran')\n"
    )
    env = hook_env(None)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK), str(fake)])
    seen = python_with_hook(WHICH_SITECUSTOMIZE, env, python=str(DEBIAN_PYTHON))
    assert Path(seen) == DEBIAN_SITECUSTOMIZE
    assert marker.read_text() == "ran"


@pytest.mark.e2e
def test_ddp_steps_match_the_programs_own_clock_and_the_ranks_agree(workdir):
    records, own = trained(TORCHRUN, "ddp_loop.py", "--sleep", "0.05", cwd=workdir)
    for record, times in zip(records, own, strict=True):
        assert_matches_own_clock(record, times)
        assert (record["gradient_bytes"], record["params"]) == (GRADIENT_BYTES, PARAMS)
        assert record["sharded"] is None
    assert records[0]["param_digest"] == records[1]["param_digest"]
    assert [r["rank"] for r in records] == ["0", "1"]
    assert [r["local_rank"] for r in records] == ["0", "1"]


@pytest.mark.e2e
def test_gradient_accumulation_counts_one_step_per_optimizer_step(workdir):
    records, own = trained(
        TORCHRUN, "ddp_loop.py", "--steps", "8", "--accumulate", "4", "--sleep", "0.015",
        cwd=workdir,
    )  # fmt: skip
    for record, times in zip(records, own, strict=True):
        assert len(record["step_ends_s"]) == 8  # not 32 micro-batches
        assert_matches_own_clock(record, times)


@pytest.mark.e2e
def test_ranks_that_diverge_have_different_digests(workdir):
    records, _ = trained(TORCHRUN, "ddp_loop.py", "--steps", "4", "--diverge", cwd=workdir)
    assert records[0]["param_digest"] != records[1]["param_digest"]
    assert records[0]["sharded"] is None


@pytest.mark.e2e
def test_fsdp_steps_are_timed_and_its_parameters_said_sharded(workdir):
    records, own = trained(
        TORCHRUN, "fsdp_loop.py", "--accumulate", "2", "--sleep", "0.02", cwd=workdir
    )
    for record, times in zip(records, own, strict=True):
        assert_matches_own_clock(record, times)
        assert record["sharded"] == "FSDP (DTensor shards)"
        assert (record["gradient_bytes"], record["params"]) == (GRADIENT_BYTES, PARAMS)
    assert records[0]["param_digest"] != records[1]["param_digest"]  # each rank's own shard


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("options", "gradient_bytes"),
    [
        # A flat parameter keeps its parameters' sizes: the whole model is counted.
        ((), GRADIENT_BYTES),
        # The views of use_orig_params are this rank's pieces: only they can be counted.
        (("--use-orig-params",), None),
    ],
    ids=["flat", "use-orig-params"],
)
def test_fsdp1_parameters_are_said_sharded(workdir, options, gradient_bytes):
    records, own = trained(
        TORCHRUN, "fsdp_loop.py", "--fsdp1", *options, "--sleep", "0.02", cwd=workdir
    )
    for record, times in zip(records, own, strict=True):
        assert_matches_own_clock(record, times)
        assert record["sharded"] == "FSDP (flat parameter shards)"
        if gradient_bytes is not None:
            assert (record["gradient_bytes"], record["params"]) == (gradient_bytes, PARAMS)
    assert records[0]["param_digest"] != records[1]["param_digest"]


@pytest.mark.e2e
def test_deepspeed_zero_0_under_its_launcher_counts_its_accumulation_once(workdir, deepspeed_op):
    """DeepSpeed's engine.step() steps the optimizer once per gradient_accumulation_steps."""
    records, own = trained(
        deepspeed_launcher(29581), "deepspeed_loop.py", "--accumulate", "4", "--sleep", "0.01",
        cwd=workdir,
    )  # fmt: skip
    for record, times in zip(records, own, strict=True):
        assert len(record["step_ends_s"]) == 12  # not 48 micro-batches
        assert_matches_own_clock(record, times)
        assert record["sharded"] is None
        assert (record["gradient_bytes"], record["params"]) == (GRADIENT_BYTES, PARAMS)
    assert records[0]["param_digest"] == records[1]["param_digest"]


@pytest.mark.e2e
def test_deepspeed_ranks_that_diverge_have_different_digests(workdir, deepspeed_op):
    records, _ = trained(TORCHRUN, "deepspeed_loop.py", "--steps", "4", "--diverge", cwd=workdir)
    assert records[0]["param_digest"] != records[1]["param_digest"]


@pytest.mark.e2e
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_partitions_are_said_sharded_and_the_model_counted_whole(
    workdir, deepspeed_op, stage
):
    """Under ZeRO 1 and 2 the stepping torch optimizer holds this rank's flat fp32 partition,
    under ZeRO 3 the model's parameters are empty: the gradient bytes are still the model's."""
    records, own = trained(
        TORCHRUN, "deepspeed_loop.py", "--zero-stage", str(stage), "--sleep", "0.03",
        cwd=workdir,
    )  # fmt: skip
    for record, times in zip(records, own, strict=True):
        assert record["sharded"] == f"DeepSpeed ZeRO stage {stage}"
        assert (record["gradient_bytes"], record["params"]) == (GRADIENT_BYTES, PARAMS)
        assert_matches_own_clock(record, times)


@pytest.mark.e2e
def test_horovods_nested_step_counts_once(workdir):
    """Horovod's DistributedOptimizer is a run-time subclass whose step calls its base class's:
    torch's global hooks fire twice per step (24 calls for these 12 steps)."""
    require_horovod()
    records, own = trained(
        HOROVODRUN, "horovod_loop.py", "--accumulate", "2", "--sleep", "0.02", cwd=workdir
    )
    for record, times in zip(records, own, strict=True):
        assert len(record["step_ends_s"]) == 12
        assert_matches_own_clock(record, times)
        assert (record["gradient_bytes"], record["sharded"]) == (GRADIENT_BYTES, None)
    assert records[0]["param_digest"] == records[1]["param_digest"]
    assert [r["local_rank"] for r in records] == ["0", "1"]  # HOROVOD_LOCAL_RANK


@pytest.mark.e2e
def test_horovod_ranks_that_diverge_have_different_digests(workdir):
    require_horovod()
    records, _ = trained(HOROVODRUN, "horovod_loop.py", "--steps", "4", "--diverge", cwd=workdir)
    assert records[0]["param_digest"] != records[1]["param_digest"]


@pytest.mark.e2e
def test_a_program_with_no_optimizer_leaves_no_file(workdir):
    done = launch(TORCHRUN, "no_optimizer.py", cwd=workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workdir / "own-times-rank1.json").is_file()  # it did train, by hand
    assert not (workdir / "steps").exists()


@pytest.mark.e2e
def test_a_rank_that_fails_keeps_its_traceback_and_its_steps(workdir):
    done = launch(TORCHRUN, "fails_rank1.py", cwd=workdir)
    assert done.returncode != 0
    assert "RuntimeError: rank 1 fails at step 3, as planned" in done.stderr
    record = json.loads((workdir / "steps" / "rank-1.json").read_text())
    assert len(record["step_ends_s"]) == 3  # steps 0, 1 and 2, before it raised
    # how it ended, for a failure's cause (runner/sweep/earlyexit.py): when, and of what
    assert record["raised"] == "RuntimeError"
    assert isinstance(record["ended_at_s"], float)


def output_lines(done: subprocess.CompletedProcess[str]) -> Counter[str]:
    """The lines a run printed, without the numbers that differ between runs (times, process
    ids, ports), counted: the ranks' lines interleave in any order."""
    return Counter(re.sub(r"\d+", "N", line) for line in (done.stdout + done.stderr).splitlines())


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("program", "args"),
    [
        ("ddp_loop.py", ("--steps", "4")),
        ("deepspeed_loop.py", ("--steps", "4", "--zero-stage", "1")),
    ],
    ids=["ddp", "deepspeed-zero1"],
)
def test_the_hook_adds_nothing_to_the_programs_output(workdir, program, args, request):
    if program.startswith("deepspeed"):
        request.getfixturevalue("deepspeed_op")
    plain = launch(TORCHRUN, program, *args, cwd=workdir / "plain", hook=False)
    hooked = launch(TORCHRUN, program, *args, cwd=workdir / "hooked")
    assert (plain.returncode, hooked.returncode) == (0, 0), (
        f"plain: {plain.stderr[-3000:]}\nhooked: {hooked.stderr[-3000:]}"
    )
    assert not (workdir / "plain" / "steps").exists()
    assert len(list((workdir / "hooked" / "steps").iterdir())) == 2
    assert output_lines(hooked) == output_lines(plain)


@pytest.mark.e2e
def test_a_step_directory_that_cannot_be_written_changes_nothing_for_the_program(workdir):
    plain = launch(TORCHRUN, "ddp_loop.py", "--steps", "4", cwd=workdir / "plain", hook=False)
    (workdir / "hooked").mkdir()
    (workdir / "hooked" / "steps").write_text("a file where the directory should be")
    hooked = launch(TORCHRUN, "ddp_loop.py", "--steps", "4", cwd=workdir / "hooked")
    assert (plain.returncode, hooked.returncode) == (0, 0), (
        f"plain: {plain.stderr[-3000:]}\nhooked: {hooked.stderr[-3000:]}"
    )
    assert output_lines(hooked) == output_lines(plain)
    assert (workdir / "hooked" / "own-times-rank1.json").is_file()


SCALAR = """
import json, torch
scale = torch.nn.Parameter(torch.tensor(2.0))  # a learnable temperature: a 0-dim parameter
opt = torch.optim.SGD([scale], lr=0.1)
for _ in range(3):
    scale.grad = torch.tensor(1.0)
    opt.step()
print(json.dumps(None))
"""


def test_a_scalar_parameter_still_gets_a_digest(tmp_path):
    python_with_hook(SCALAR, hook_env(tmp_path / "steps") | {"RANK": "0"})
    record = json.loads((tmp_path / "steps" / "rank-0.json").read_text())
    assert record["param_digest"] and record["errors"] == []


BUSY_STEPS = """
import json, torch
p = torch.nn.Parameter(torch.zeros(4))
opt = torch.optim.SGD([p], lr=0.1)
for _ in range(5):
    x = torch.randn(300, 300)
    for _ in range(30):
        x = (x @ x).tanh()  # CPU time the window must count as the launch's own
    p.grad = torch.ones(4)
    opt.step()
print(json.dumps(None))
"""


SLOW_WINDOW = """
import json, sys, time, types, torch
slow = types.ModuleType("_dtrun_noise")  # the window's start, 0.3 s late
slow.snapshot = lambda: time.sleep(0.3)
slow.rank_window = lambda start, end: {}
sys.modules["_dtrun_noise"] = slow  # the hook's own name for runner/workloads/noise.py
p = torch.nn.Parameter(torch.zeros(4))
opt = torch.optim.SGD([p], lr=0.1)
for _ in range(6):
    p.grad = torch.ones(4)
    opt.step()
print(json.dumps(None))
"""


def test_starting_the_noise_window_costs_a_warm_up_step_not_a_timed_one(tmp_path):
    # importing dtrun.workloads.noise took 11.5 ms after torch's import (31 ms without it):
    # taken after the last warm-up step's end, it lengthened the first timed step (the hook
    # now loads it while the program imports torch)
    env = hook_env(tmp_path / "steps") | {"RANK": "0", "DTRUN_WARMUP": "3"}
    python_with_hook(SLOW_WINDOW, env)
    ends = json.loads((tmp_path / "steps" / "rank-0.json").read_text())["step_ends_s"]
    intervals = [b - a for a, b in itertools.pairwise(ends)]
    assert max(intervals[3 - 1 :]) < 0.2, intervals  # the timed ones, as programresult's
    assert max(intervals) > 0.3  # the last warm-up step's


@pytest.mark.parametrize("warmup", ["\u00b2", "9" * 5000, "-1", "3.5"])
def test_a_warm_up_the_hook_cannot_read_counts_one_step_and_breaks_nothing(tmp_path, warmup):
    # "²" passed str.isdigit() and int() raised at the hook's import: Python wrote "Error in
    # sitecustomize" to the program's stderr and no step was recorded
    env = hook_env(tmp_path / "steps") | {"RANK": "0", "DTRUN_WARMUP": warmup}
    done = subprocess.run([sys.executable, "-c", BUSY_STEPS], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    record = json.loads((tmp_path / "steps" / "rank-0.json").read_text())
    assert len(record["step_ends_s"]) == 5 and record["noise_window"] is not None


@pytest.mark.parametrize(("warmup", "window"), [("3", True), ("6", False)])
def test_the_noise_window_starts_after_the_warm_up_steps(tmp_path, warmup, window):
    env = hook_env(tmp_path / "steps") | {"RANK": "0", "DTRUN_WARMUP": warmup}
    python_with_hook(BUSY_STEPS, env)
    record = json.loads((tmp_path / "steps" / "rank-0.json").read_text())
    if not window:  # 5 steps, all of them warm-up: the timed steps never started
        assert record["noise_window"] is None
        return
    noise = record["noise_window"]
    assert set(noise) == {"machine", "cpus", "wall_s", "ticks", "own_cpu_s", "loadavg_1m"}
    assert noise["own_cpu_s"] > 0
    assert noise["wall_s"] > 0
    assert noise["ticks"]["total"] > 0  # /proc/stat read at both ends
    assert record["errors"] == []
