"""`dtrun bench --rerun RUN_DIR` without launching: the recorded sweep planned again whole, and
every request that would change it refused with exit 2 and nothing written (issue 27)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dtrun.errors import UsageError
from dtrun.record.resume import read_spec
from dtrun.record.rundir import RunDir, write_manifest
from dtrun.spec.request import BenchSpec
from tests.conftest import run_dtrun
from tests.unit.test_peers import ssh_cluster

SPEC = BenchSpec("old", node_counts=(1, 2), repeat=2, steps=7, warmup=2, env=(("MODE", "fast"),))


def _run_dir(tmp_path, spec: BenchSpec = SPEC) -> RunDir:
    run_dir = RunDir(tmp_path / "runs" / spec.run_id)
    run_dir.path.mkdir(parents=True)
    write_manifest(run_dir, spec, ssh_cluster(2))
    return run_dir


def test_a_rerun_plans_the_recorded_sweep_whole(tmp_path):
    run_dir = _run_dir(tmp_path)
    done = run_dtrun("bench", "--rerun", str(run_dir.path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# ==== point: 1 node, 2 launches -> n1/r0 to n1/r1" in done.stdout
    assert "# ==== point: 2 nodes, 2 launches -> n2/r0 to n2/r1" in done.stdout
    assert "--steps 7 --warmup 2" in done.stdout and "MODE=fast" in done.stdout
    assert sorted(p.name for p in run_dir.path.parent.iterdir()) == ["old"]  # nothing written


def test_the_rerun_spec_is_the_recorded_one_with_the_secrets_given_again(tmp_path):
    spec = replace(SPEC, env=(("WANDB_API_KEY", "s3cret-value"),))
    run_dir = _run_dir(tmp_path, spec)
    with pytest.raises(UsageError, match="WANDB_API_KEY redacted, and --rerun needs") as caught:
        read_spec(run_dir.path, (), "--rerun")
    assert f"--rerun {run_dir.path} --env WANDB_API_KEY=VALUE" in caught.value.fix
    assert read_spec(run_dir.path, (("WANDB_API_KEY", "s3cret-value"),), "--rerun") == spec


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--steps", "9"), "--steps would change it"),
        (("--launcher", "torchrun"), "--launcher would change it"),  # even at its default
        (("--resume", "runs/old"), "--resume would change it"),
        (("--", "python", "train.py"), "a program after -- would change it"),
    ],
    ids=["steps", "default-launcher", "resume", "program"],
)
def test_a_rerun_refuses_what_would_change_the_sweep(tmp_path, extra, said):
    run_dir = _run_dir(tmp_path)
    done = run_dtrun("bench", "--rerun", str(run_dir.path), *extra, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in run_dir.path.parent.iterdir()) == ["old"]


def test_a_rerun_of_what_is_no_run_directory_is_one_clear_error(tmp_path):
    done = run_dtrun("bench", "--rerun", str(tmp_path / "gone"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--rerun" in done.stderr and "no such run directory" in done.stderr
