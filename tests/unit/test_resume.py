"""--resume without running anything: the recorded sweep read back exactly, and every request
it cannot serve refused with exit 2 and nothing changed."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from dtrun.errors import DamagedRunError, UsageError
from dtrun.record.resume import from_dict, read_resume
from dtrun.record.rundir import RunDir, record_resume, write_manifest
from dtrun.record.runsfile import write_runs
from dtrun.spec.outcome import NodeResult, RunResult, RunStatus, SuccessRule, SweepStatus
from dtrun.spec.request import (
    BenchSpec,
    LauncherOptions,
    PipelineSchedule,
    PlatformEnv,
    ScalingMode,
    StrategySpec,
)
from tests.conftest import run_dtrun
from tests.factories import fake_run_dir
from tests.unit.test_peers import ssh_cluster

SPEC = BenchSpec(
    "rs",
    launcher="mpirun",
    procs_per_node=2,
    env=(("WANDB_API_KEY", "s3cret-value"), ("MODE", "fast")),
    launch=LauncherOptions(zero_stage=3),
    platform_env=(PlatformEnv.VOLCANO,),
    success=SuccessRule.WORKER0,
    node_counts=(1, 2, 4),
    mode=ScalingMode.STRONG,
    steps=7,
    global_batch=64,
    strategy=StrategySpec("pipeline", PipelineSchedule.GPIPE, micro_batches=2),
    timeout_s=12.5,
)


def _run_dir(tmp_path: Path, spec: BenchSpec = SPEC) -> RunDir:
    run_dir = RunDir(tmp_path / spec.run_id)
    run_dir.path.mkdir()
    write_manifest(run_dir, spec, ssh_cluster(4))
    node = NodeResult("node-0", "10.0.0.4", 0, "n1/r0/node-0.log", 1.5)
    runs = [
        RunResult(1, 0, RunStatus.OK, 3.0, "n1/r0", (node,)),
        RunResult(2, 0, RunStatus.INTERRUPTED, 1.0, "n2/r0", (), "interrupted"),
    ]
    write_runs(run_dir, runs, SweepStatus.INTERRUPTED, "interrupted")
    return run_dir


def test_the_recorded_sweep_reads_back_as_it_was_given(tmp_path):
    run_dir = _run_dir(tmp_path)
    resumed = read_resume(run_dir.path, (("WANDB_API_KEY", "s3cret-value"),))
    assert resumed.spec == SPEC  # every field, nested specs and enums included
    assert [(r.nodes, r.repeat) for r in resumed.done] == [(1, 0)]  # only launches with a result
    assert resumed.done[0].node_results[0].address == "10.0.0.4"
    assert resumed.is_done(1, 0) and not resumed.is_done(2, 0)


def test_a_resume_keeps_the_earlier_wall_times_and_the_launches_it_runs_again(tmp_path):
    run_dir = _run_dir(tmp_path)
    record_resume(run_dir, ssh_cluster(2), 1)  # a sweep already resumed once
    write_runs(
        run_dir,
        [RunResult(1, 0, RunStatus.OK, 3.0, "n1/r0")],
        SweepStatus.INTERRUPTED,
        "interrupted",
        (40.0, 25.0),
        (RunResult(2, 0, RunStatus.FAILED, 2.0, "n2/r0", (), "node-1 failed"),),
    )
    data = json.loads(run_dir.runs.read_text())
    assert data["wall_s"] == 65.0 and data["segment_wall_s"] == [40.0, 25.0]
    resumed = read_resume(run_dir.path, (("WANDB_API_KEY", "s3cret-value"),))
    assert resumed.walls == (40.0, 25.0)
    assert [(r.nodes, r.status) for r in resumed.replaced] == [(2, RunStatus.FAILED)]
    # a runs.json from before dtrun kept each run's wall time: one run, its wall_s
    (tmp_path / "old").mkdir()
    _run_dir(tmp_path / "old")
    old = read_resume(tmp_path / "old" / SPEC.run_id, (("WANDB_API_KEY", "s3cret-value"),))
    assert old.walls == (None,)  # its wall_s was never written
    assert [(r.nodes, r.status) for r in old.replaced] == [(2, RunStatus.INTERRUPTED)]


def test_each_earlier_run_of_dtrun_keeps_its_own_place_in_the_wall_times(tmp_path):
    """A resume that stopped before it wrote runs.json has no wall time: the next resume's
    lands after it, not in its place; and a runs.json from before dtrun kept each one held only
    the last run's wall time as wall_s."""
    run_dir = _run_dir(tmp_path)
    data = json.loads(run_dir.manifest.read_text())
    data["resumed"] = [{"at": "2026-11-23T10:20:00Z", "inventory": data["inventory"]}] * 2
    run_dir.write_json(run_dir.manifest, data)
    runs = [RunResult(1, 0, RunStatus.OK, 3.0, "n1/r0")]
    write_runs(run_dir, runs, SweepStatus.INTERRUPTED, "x", (40.0, 25.0))  # the third never wrote
    resumed = read_resume(run_dir.path, (("WANDB_API_KEY", "s3cret-value"),))
    assert resumed.walls == (40.0, 25.0, None)
    old = json.loads(run_dir.runs.read_text())
    del old["segment_wall_s"]
    old["wall_s"] = 25.0
    run_dir.write_json(run_dir.runs, old)
    resumed = read_resume(run_dir.path, (("WANDB_API_KEY", "s3cret-value"),))
    assert resumed.walls == (None, None, 25.0)


def test_from_dict_is_the_inverse_of_asdict_for_defaults_too():
    assert from_dict(BenchSpec, asdict(BenchSpec("x"))) == BenchSpec("x")


def test_a_redacted_secret_must_be_given_again(tmp_path):
    run_dir = _run_dir(tmp_path)
    with pytest.raises(UsageError, match="WANDB_API_KEY redacted") as caught:
        read_resume(run_dir.path, ())
    assert "--env WANDB_API_KEY=VALUE" in caught.value.fix


def test_a_value_redacted_in_part_must_be_given_again_too(tmp_path):
    spec = replace(SPEC, env=(("MLFLOW_TRACKING_URI", "https://user:pw@mlflow.example"),))
    run_dir = _run_dir(tmp_path, spec)
    with pytest.raises(UsageError, match="MLFLOW_TRACKING_URI redacted"):
        read_resume(run_dir.path, ())
    given = (("MLFLOW_TRACKING_URI", "https://user:pw@mlflow.example"),)
    assert read_resume(run_dir.path, given).spec.env == given


def test_an_option_given_at_its_default_value_is_refused_too(tmp_path):
    run_dir = _run_dir(tmp_path, replace(SPEC, env=()))
    done = run_dtrun("bench", "--resume", str(run_dir.path), "--launcher", "torchrun", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--launcher would change it" in done.stderr


def test_resume_refuses_options_that_would_change_the_sweep(tmp_path):
    run_dir = _run_dir(tmp_path, replace(SPEC, env=()))
    before = run_dir.runs.read_text()
    done = run_dtrun("bench", "--resume", str(run_dir.path), "--nodes", "1,2,8", "--steps", "9",
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--nodes, --steps would change it" in done.stderr and "Traceback" not in done.stderr
    assert run_dir.runs.read_text() == before


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda d: None, "no such run directory"),
        (lambda d: d.mkdir(), "it is no run directory"),
        (lambda d: (d.mkdir(), (d / "manifest.json").write_text("{not json")), "manifest.json"),
    ],
    ids=["missing", "empty-directory", "damaged-manifest"],
)
def test_resume_of_what_is_no_run_directory_is_one_clear_error(tmp_path, damage, said):
    target = tmp_path / "runs" / "gone"
    target.parent.mkdir()
    damage(target)
    done = run_dtrun("bench", "--resume", str(target), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


def test_a_manifest_whose_sweep_cannot_be_read_is_named(tmp_path):
    run_dir = _run_dir(tmp_path, replace(SPEC, env=()))
    data = json.loads(run_dir.manifest.read_text())
    data["bench"]["mode"] = "sideways"
    run_dir.write_json(run_dir.manifest, data)
    done = run_dtrun("bench", "--resume", str(run_dir.path), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "manifest.json" in done.stderr and "sideways" in done.stderr


def test_a_runs_file_with_a_launch_out_of_place_is_refused_before_anything_launches(
    tmp_path, fixed_inventory
):
    # a hand-edited round of -1 would have sent --resume to launch over a recorded result
    spec = BenchSpec(run_id="moved", node_counts=(1, 2), repeat=3)
    run_dir = fake_run_dir(tmp_path / "moved", spec, fixed_inventory, {1: [1000.0], 2: [1800.0]})
    data = json.loads(run_dir.runs.read_text())
    data["runs"][0]["repeat"] = -1
    run_dir.write_json(run_dir.runs, data)
    with pytest.raises(DamagedRunError, match=r"'runs\[0\]\.repeat' is -1: a sweep's launches"):
        read_resume(run_dir.path, ())


def _tree(path: Path) -> dict[str, bytes]:
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path)): p.read_bytes() for p in files}


def test_resume_of_a_complete_sweep_says_so_and_changes_nothing(tmp_path, fixed_inventory):
    from dtrun.report.build import build_report

    run_dir = fake_run_dir(
        tmp_path / "done", BenchSpec("done", node_counts=(1, 2)), fixed_inventory,
        {1: [100.0, 101.0], 2: [190.0, 191.0]},
    )  # fmt: skip
    build_report(run_dir)
    before = _tree(run_dir.path)
    done = run_dtrun("bench", "--resume", str(run_dir.path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing to resume" in done.stdout and f"dtrun report {run_dir.path}" in done.stdout
    assert _tree(run_dir.path) == before  # no resume recorded, no report rewritten
    as_json = run_dtrun("bench", "--resume", str(run_dir.path), "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["run_id"] == "done"  # the summary, as after a sweep
    assert "nothing to resume" in as_json.stderr
    assert _tree(run_dir.path) == before


def test_resume_of_a_stopped_sweep_is_not_called_complete(tmp_path):
    assert not read_resume(_run_dir(tmp_path).path, (("WANDB_API_KEY", "x"),)).complete


def _stopped(tmp_path: Path, inventory) -> RunDir:
    """A sweep of 1 and 2 nodes, 2 launches each, stopped before n2/r1: n2/r1 runs again."""
    spec = BenchSpec("linked", node_counts=(1, 2), repeat=2)
    run_dir = fake_run_dir(
        tmp_path / "linked", spec, inventory, {1: [100.0, 101.0], 2: [190.0]},
        SweepStatus.INTERRUPTED,
    )  # fmt: skip
    (run_dir.path / "n2" / "r1").mkdir()  # the stopped launch's folder, as it left it
    (run_dir.path / "report.md").write_text("# earlier report\n")
    return run_dir


@pytest.mark.parametrize(
    ("link", "named"),
    [
        ("n2/r1", "n2/r1"),
        ("n2/r1/node-0.sh", "n2/r1/node-0.sh"),
        ("report.md", "report.md"),
        ("throughput.png", "throughput.png"),  # a plot: refused before, not after, the launches
        ("busbw.png", "busbw.png"),
        ("health", "health"),  # the gate's launches go in health/<node>/, the gate goes first
    ],
)
def test_resume_refuses_a_link_where_it_writes_before_anything_runs(
    tmp_path, fixed_inventory, link, named
):
    run_dir = _stopped(tmp_path, fixed_inventory)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = run_dir.path / link
    if planted.is_dir():
        planted.rmdir()
    elif planted.exists():
        planted.unlink()
    planted.symlink_to(elsewhere if link in ("n2/r1", "health") else elsewhere / "file")
    before = _tree(run_dir.path)
    done = run_dtrun("bench", "--resume", str(run_dir.path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{named} in {run_dir.path} is a symbolic link, and --resume writes there" in (
        done.stderr
    )
    assert "remove the link" in done.stderr
    assert _tree(run_dir.path) == before and not any(elsewhere.iterdir())


def test_resume_refuses_a_fifo_where_it_writes_a_log_before_anything_runs(
    tmp_path, fixed_inventory
):
    """Opening a FIFO (no reader) to write a node's log waited forever, SIGTERM or not."""
    run_dir = _stopped(tmp_path, fixed_inventory)
    os.mkfifo(run_dir.path / "n2" / "r1" / "node-0.log")
    done = run_dtrun("bench", "--resume", str(run_dir.path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"n2/r1/node-0.log in {run_dir.path} is a FIFO, and --resume writes there" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_links_a_program_left_in_a_kept_launch_are_not_refused(tmp_path, fixed_inventory):
    from dtrun.record.resume import refuse_links, written_paths

    run_dir = _stopped(tmp_path, fixed_inventory)
    (run_dir.path / "n1" / "r0" / "ckpt").symlink_to(tmp_path)  # n1/r0 is kept: only read
    resumed = read_resume(run_dir.path, ())
    refuse_links(resumed)
    written = {str(p.relative_to(run_dir.path)) for p in written_paths(resumed)}
    assert {"n2", "n2/r1", "report.md", "summary.json"} <= written
    assert not any(name.startswith("n1/") for name in written)


def test_links_a_failed_launch_s_program_made_below_its_folder_are_not_refused(
    tmp_path, fixed_inventory
):
    """W&B's wandb/latest-run is a link: the program makes it again when its launch reruns,
    and dtrun writes nothing there. A link at the top of that folder, where dtrun's files go,
    is still refused (test above)."""
    from dtrun.record.resume import refuse_links, written_paths

    run_dir = _stopped(tmp_path, fixed_inventory)
    wandb = run_dir.path / "n2" / "r1" / "wandb"
    wandb.mkdir(parents=True, exist_ok=True)
    (wandb / "latest-run").symlink_to(wandb)
    resumed = read_resume(run_dir.path, ())
    refuse_links(resumed)  # no exit 2
    assert run_dir.path / "n2" / "r1" / "wandb" in written_paths(resumed)
