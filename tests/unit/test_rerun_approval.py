"""A run directory is data (issue 36, class 3): --rerun and --resume show the program and
environment a manifest records and ask before running them, once per record; without a
terminal they refuse unless --yes; and every recorded value is checked as if typed, before
anything is asked, run or written.

The sweeps below record a price and a --max-cost their estimate exceeds, so a request that
passes the approval stops at the cost check (exit 2, "--max-cost") before any cluster opens:
which of the two stops it shows whether it was asked."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from dtrun.record.rundir import RunDir, write_manifest
from dtrun.record.runsfile import write_runs
from dtrun.spec.outcome import RunResult, RunStatus, SweepStatus
from dtrun.spec.request import BenchSpec, Program, ProgramKind
from tests.conftest import DTRUN, run_dtrun
from tests.unit.test_peers import ssh_cluster

# markup in a value is shown as it is, never read (the question goes through dtrun's console)
PROGRAM = Program(ProgramKind.EXECUTABLE, "/usr/bin/sh", ("-c", "touch /tmp/dtrun-swapped #[red]x"))
SPEC = BenchSpec(
    "old",
    node_counts=(1, 2),
    repeat=2,
    env=(("MODE", "fast"), ("WANDB_API_KEY", "s3cret-value-1")),
    program=PROGRAM,
    price_per_node_hour=1000.0,
    max_cost=0.01,
)
SECRET = (("WANDB_API_KEY", "s3cret-value-1"),)
COST_STOP = "--max-cost"


def _run_dir(tmp_path: Path, spec: BenchSpec = SPEC) -> RunDir:
    run_dir = RunDir(tmp_path / "runs" / "old")
    run_dir.path.mkdir(parents=True)
    write_manifest(run_dir, spec, ssh_cluster(2))
    return run_dir


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}


def _rerun(tmp_path: Path, run_dir: RunDir, *extra: str) -> subprocess.CompletedProcess[str]:
    secret = [f"--env={name}={value}" for name, value in SECRET]
    return run_dtrun(
        "bench", "--rerun", str(run_dir.path), *secret, *extra, cwd=tmp_path, env=_env(tmp_path)
    )


def _listing(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "runs").rglob("*"))


def test_a_recorded_program_is_not_run_without_a_terminal_or_yes(tmp_path):
    run_dir = _run_dir(tmp_path)
    before = _listing(tmp_path)
    done = _rerun(tmp_path, run_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "no terminal to ask" in err and "--yes" in err and "Traceback" not in err
    # what it would run is shown, its secret redacted
    assert "program: /usr/bin/sh -c 'touch /tmp/dtrun-swapped #[red]x'" in err
    assert "--env MODE=fast" in err and "s3cret-value-1" not in done.stderr + done.stdout
    assert _listing(tmp_path) == before and not (tmp_path / "config").exists()


def test_yes_runs_the_record_without_asking(tmp_path):
    run_dir = _run_dir(tmp_path)
    done = _rerun(tmp_path, run_dir, "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    assert COST_STOP in done.stderr and "--yes" not in done.stderr  # past the approval
    assert not (tmp_path / "config").exists()  # --yes approves this run, and remembers nothing


def test_yes_without_a_record_to_approve_is_refused(tmp_path):
    done = run_dtrun("bench", "--yes", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--yes approves" in done.stderr and "Traceback" not in done.stderr


def _on_terminal(tmp_path: Path, run_dir: RunDir, answer: str) -> tuple[int, str]:
    """--rerun with a terminal on stdin, answering ``answer`` to the question."""
    main, terminal = pty.openpty()
    secret = [f"--env={name}={value}" for name, value in SECRET]
    with subprocess.Popen(
        [*DTRUN, "bench", "--rerun", str(run_dir.path), *secret],
        cwd=tmp_path, env=_env(tmp_path), stdin=terminal, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as dtrun:  # fmt: skip
        os.close(terminal)
        os.write(main, answer.encode() + b"\n")
        out, err = dtrun.communicate(timeout=120)
    os.close(main)
    return dtrun.returncode, out + err


def test_a_yes_on_the_terminal_is_remembered_for_that_record_in_that_place(tmp_path):
    run_dir = _run_dir(tmp_path)
    code, said = _on_terminal(tmp_path, run_dir, "y")
    assert code == 2 and COST_STOP in said, said  # asked, answered yes, went on
    assert "Run them on every node?" in said and "program: /usr/bin/sh" in said
    assert "#[red]x" in said
    store = tmp_path / "config" / "dtrun" / "approved"
    assert store.stat().st_mode & 0o777 == 0o600 and len(store.read_text().splitlines()) == 1
    again = _rerun(tmp_path, run_dir)  # no terminal now: approved before, not asked
    assert again.returncode == 2 and COST_STOP in again.stderr, again.stderr
    # the same record changed is another record: asked again
    changed = replace(SPEC, env=(("MODE", "fast"), ("BACKEND", "x"), *SECRET))
    write_manifest(run_dir, changed, ssh_cluster(2))
    refused = _rerun(tmp_path, run_dir)
    assert refused.returncode == 2 and "no terminal to ask" in refused.stderr


def test_a_no_on_the_terminal_runs_nothing_and_remembers_nothing(tmp_path):
    run_dir = _run_dir(tmp_path)
    before = _listing(tmp_path)
    code, said = _on_terminal(tmp_path, run_dir, "n")
    assert code == 1 and "not approved, nothing ran" in said and "Traceback" not in said, said
    assert _listing(tmp_path) == before and not (tmp_path / "config").exists()


def test_the_builtin_workload_without_env_is_not_asked_about(tmp_path):
    run_dir = _run_dir(tmp_path, replace(SPEC, program=None, env=()))
    done = run_dtrun("bench", "--rerun", str(run_dir.path), cwd=tmp_path, env=_env(tmp_path))
    assert done.returncode == 2 and COST_STOP in done.stderr, done.stderr


def test_an_approval_is_bound_to_the_record_and_its_place(tmp_path):
    from dtrun.cli.approval import NotApproved, approve, record_digest

    store = tmp_path / "approved"
    asked: list[str] = []

    def yes(question: str) -> bool:
        asked.append(question)
        return True

    here, there = tmp_path / "a", tmp_path / "b"
    approve(here, SPEC, "--rerun", yes=False, ask=yes, store=store)
    approve(here, SPEC, "--rerun", yes=False, ask=yes, store=store)  # remembered
    assert len(asked) == 1
    approve(there, SPEC, "--rerun", yes=False, ask=yes, store=store)  # another place
    approve(here, replace(SPEC, program=replace(PROGRAM, args=("-c", "id"))), "--rerun",
            yes=False, ask=yes, store=store)  # fmt: skip
    assert len(asked) == 3
    assert record_digest(here, SPEC) != record_digest(there, SPEC)
    with pytest.raises(NotApproved):
        approve(here, replace(SPEC, env=()), "--rerun", yes=False, ask=lambda q: False, store=store)
    assert len(store.read_text().splitlines()) == 3


def test_the_approvals_live_in_the_users_config():
    from dtrun.cli.approval import approvals_file

    assert approvals_file({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/dtrun/approved")
    home = Path.home() / ".config" / "dtrun" / "approved"
    assert approvals_file({"XDG_CONFIG_HOME": "relative"}) == home  # the XDG spec ignores it
    assert approvals_file({}) == home


def test_an_unreadable_store_asks_again_and_a_link_is_not_followed(tmp_path):
    from dtrun.cli.approval import approve

    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    store = tmp_path / "approved"
    store.symlink_to(target)
    approve(tmp_path, SPEC, "--rerun", yes=False, ask=lambda q: True, store=store)
    assert target.read_text() == "keep\n"  # the link was not written through


def test_a_fifo_at_the_store_asks_again_and_is_not_waited_on(tmp_path, capsys):
    from dtrun.cli.approval import approve, approved

    store = tmp_path / "approved"
    os.mkfifo(store)  # no writer: reading it would wait for ever
    said: list[str] = []

    def ask(question: str) -> bool:
        said.append(question)
        return True

    approve(tmp_path, SPEC, "--rerun", yes=False, ask=ask, store=store)
    assert said  # it held no approval: the user was asked
    assert "could not remember the approval" in capsys.readouterr().err
    assert not approved(store, "0" * 64)
    assert store.is_fifo()  # left as it was


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"step_pattern": "(["}, "--step-pattern '([' is not a regular expression"),
        ({"env": (("BASH_ENV", "/tmp/x"),)}, "--env BASH_ENV changes how bash runs"),
        ({"env": (("A B", "x"),)}, "--env 'A B' is not a valid variable name"),
        ({"env": (("DTRUN_LAUNCH", "x"),)}, "--env DTRUN_LAUNCH names one of dtrun's own"),
        ({"program": Program(ProgramKind.EXECUTABLE, "python", ("-c", "import os"))},
         "cannot tell what `python -c import os` runs"),
        ({"program": Program(ProgramKind.EXECUTABLE, "python3", ("/w/train.py",))},
         "is not one a command line gives"),
        ({"program": Program(ProgramKind.SCRIPT, "train.py")}, "is not one a command line gives"),
        # refused when the manifest is read, before it is judged as a sweep
        ({"run_id": "../escape"}, "is damaged: 'run_id' is '../escape': a run id holds"),
        ({"until_decided": True, "max_launches": 1}, "--max-launches 1 is out of range"),
        ({"max_cost": -1.0}, "--max-cost"),
        ({"node_counts": (0,)}, "--nodes needs node counts"),
        ({"steps": 10**9}, "--steps must be"),
        ({"program": None, "step_pattern": "x"}, "--step-pattern describes your program"),
    ],
    ids=[
        "step-pattern", "bash-env", "env-name", "own-env", "interpreter-option",
        "interpreter-as-executable", "relative-script",
        "run-id", "max-launches", "max-cost", "nodes", "steps", "pattern-without-program",
    ],
)  # fmt: skip
def test_every_recorded_value_is_checked_as_if_typed_before_anything_is_written(
    tmp_path, change, said
):
    run_dir = _run_dir(tmp_path, replace(SPEC, **{"env": (), **change}))
    write_runs(run_dir, [RunResult(1, 0, RunStatus.FAILED, 1.0, "n1/r0")], SweepStatus.FAILED, "x")
    before = {p: p.read_bytes() for p in run_dir.path.rglob("*") if p.is_file()}
    # a rerun gets a new run id: the recorded one is checked when resuming
    for flag in ("--resume",) if "run_id" in change else ("--resume", "--rerun"):
        done = run_dtrun(
            "bench", flag, str(run_dir.path), "--yes", cwd=tmp_path, env=_env(tmp_path)
        )
        assert done.returncode == 2, done.stdout + done.stderr
        err = " ".join(done.stderr.split())
        lead = "is damaged" if "run_id" in change else "records a sweep dtrun refuses"
        assert f"manifest.json {lead}" in err and said in err, err
        assert "Traceback" not in err
        assert {p: p.read_bytes() for p in run_dir.path.rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in run_dir.path.parent.iterdir()) == ["old"]


def test_a_typed_shell_startup_variable_is_refused(tmp_path):
    done = run_dtrun("bench", "--env", "BASH_ENV=/tmp/x", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--env BASH_ENV changes how bash runs" in done.stderr


@pytest.mark.parametrize("name", ["DTRUN_LAUNCH", "DTRUN_STEP_DIR", "DTRUN_WARMUP"])
def test_a_typed_dtrun_variable_is_refused_as_it_would_hide_the_launch_from_its_stop(
    tmp_path, name
):
    """DTRUN_LAUNCH exported by the launch script in place of the launch's tag: a stop that
    finds the launch's processes by their tag would find none."""
    done = run_dtrun("run", "--env", f"{name}=x", "--dry-run", "--", "python", "t.py",
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--env {name} names one of dtrun's own variables on the nodes" in done.stderr
    lower = run_dtrun("bench", "--env", "dtrun_launch=x", "--dry-run", cwd=tmp_path)
    assert lower.returncode == 0, lower.stderr  # another variable: Linux's names keep case


def test_a_max_launches_recorded_in_repeat_is_checked_as_if_typed(tmp_path):
    # a manifest written while "repeat" held --max-launches (no field of its own) is read so
    run_dir = _run_dir(tmp_path, replace(SPEC, env=(), until_decided=True, max_launches=1))
    manifest = run_dir.manifest
    data = json.loads(manifest.read_text())
    data["bench"]["repeat"] = data["bench"].pop("max_launches")
    manifest.write_text(json.dumps(data))
    done = run_dtrun("bench", "--resume", str(run_dir.path), "--yes", cwd=tmp_path,
                     env=_env(tmp_path))  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "records a sweep dtrun refuses: --max-launches 1 is out of range" in err, err
    assert "Traceback" not in err
