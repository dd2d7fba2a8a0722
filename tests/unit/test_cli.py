"""The command line: exit codes and messages for bad input, --dry-run, --help."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dtrun.cli.app import app

runner = CliRunner(env={"COLUMNS": "200"})


def dtrun(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes needs node counts of at least 1"),
        (["--nodes", "two"], "--nodes 'two' is not a list of node counts"),
        (["--nodes", "1,2", "--local-nodes", "1"], "cannot run on 2 nodes"),
        (["--nodes", "64"], "the embedded cluster cannot simulate 64 nodes"),
        (["--local-nodes", "0"], "--local-nodes must be at least 1 and at most 10,000"),
        (["--workload", "resnet"], "unknown workload 'resnet'"),
        (["--run-id", "r" * 300], "--run-id is 300 bytes long"),
        (["--launcher", "torchrn"], "did you mean 'torchrun'"),
        (["--launcher", "mpirn"], "did you mean 'mpirun'"),
        (["--launcher", "tensorflow"], "dtrun run --launcher tensorflow"),
        (["--launcher", "deepspeed", "--zero-stage", "4"], "--zero-stage must be 1, 2 or 3"),
        (["--env", "NOVALUE"], "--env 'NOVALUE' is not KEY=VALUE"),
        (["--warmup", "60"], "--warmup must be at least 0 and less than --steps"),
        (["--run-id", "../x"], "cannot name a run directory"),
        (
            ["--mode", "strong", "--nodes", "1,3", "--global-batch", "8"],
            "cannot split a global batch of 8 over 3 processes",
        ),
        (["--strategy", "zer3"], "did you mean 'zero3'"),
        (["--preset", "2b"], "unknown preset '2b'"),
        (["--strategy", "ddp", "--micro-batches", "4"], "only apply to the pipeline strategy"),
        (["--strategy", "pipeline", "--schedule", "2f2b"], "'2f2b' is not one of"),
        (
            ["--strategy", "pipeline", "--nodes", "2", "--micro-batches", "1"],
            "1f1b needs at least as many micro-batches as stages (2)",
        ),
        (
            ["--strategy", "pipeline", "--nodes", "4", "--pp-size", "3", "--layers", "4"],
            "--pp-size 3 does not divide the 4 processes",
        ),
        (
            ["--strategy", "pipeline", "--micro-batches", "3"],
            "--micro-batches 3 does not divide the batch",
        ),
    ],
)
def test_bad_input_gives_one_message_and_exit_code_2(tmp_path, args, message):
    result = dtrun("bench", "--output", str(tmp_path / "runs"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


def test_an_output_dir_that_cannot_be_written_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = dtrun("bench", "--output", str(blocker / "runs"), "--nodes", "1")
    assert result.exit_code == 2
    assert "cannot write the run directory" in result.stderr
    assert "--output" in result.stderr
    assert "Traceback" not in result.output


def test_an_existing_run_directory_is_never_overwritten(tmp_path):
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    result = dtrun("bench", "--output", str(tmp_path / "runs"), "--run-id", "taken")
    assert result.exit_code == 2
    assert "already exists" in result.stderr


def test_an_output_that_is_a_link_to_nowhere_is_named_not_called_an_existing_run(tmp_path):
    """mkdir found the link "existing": dtrun said the run directory already existed."""
    (tmp_path / "runs").symlink_to(tmp_path / "gone")
    result = dtrun("bench", "--output", str(tmp_path / "runs" / "deeper"), "--run-id", "new")
    assert result.exit_code == 2
    assert "already exists" not in result.stderr
    assert f"{tmp_path / 'runs'} is a symbolic link to {tmp_path / 'gone'}, which is not there" in (
        " ".join(result.stderr.split())
    )
    assert "next: pass --output with a directory you can write" in result.stderr
    assert not (tmp_path / "gone").exists()


def test_unknown_flags_and_non_numbers_are_usage_errors():
    assert dtrun("bench", "--frobnicate").exit_code == 2
    bad = dtrun("bench", "--steps", "many")
    assert bad.exit_code == 2
    assert "Invalid value for '--steps'" in bad.output


def test_dry_run_prints_every_node_script_and_runs_nothing(tmp_path):
    result = dtrun(
        "bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path / "runs"),
        "--env", "HF_TOKEN=hunter2", "--env", "NCCL_DEBUG=INFO",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if line.startswith("# ---- ")]
    assert len(headers) == 3  # 1 node + 2 nodes
    assert result.stdout.count("#!/usr/bin/env bash") == 3
    assert "--local-addr=127.0.0.3" in result.stdout
    assert "export NCCL_DEBUG=INFO" in result.stdout
    assert "hunter2" not in result.stdout
    assert not Path(tmp_path / "runs").exists()


def test_dry_run_ends_with_the_sweeps_estimate_named_as_a_guess(tmp_path):
    result = dtrun(
        "bench", "--dry-run", "--nodes", "1,2", "--output", str(tmp_path / "runs"),
        "--price-per-node-hour", "10",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    *_, hours, cost = result.stdout.splitlines()
    # 2 points x at most 12 launches (until decided, the embedded cluster's most) x (60 s +
    # 60 steps x 1 s); the 2 nodes bill while any runs
    assert hours.startswith(
        "# ==== estimate (a guess, not a measurement): at most 24 launches x 120 s"
    )
    assert "60 s start-up + 60 steps x 1 s, guessed" in hours
    assert "1.600 node-hours" in hours
    assert cost == (
        "# ==== estimated cost: $16.00 at $10 a node-hour (--price-per-node-hour); at most $80.00"
    )


def test_dry_run_without_a_price_says_how_to_give_one(tmp_path):
    result = dtrun("bench", "--dry-run", "--nodes", "1", "--output", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "# ==== estimated cost: no price: pass --price-per-node-hour USD to cost it"
    )


def test_help_lists_every_command_with_a_line_of_help():
    result = dtrun("--help")
    assert result.exit_code == 0
    for command in ("bench", "run", "report"):
        assert command in result.stdout


def test_report_on_a_directory_that_is_not_a_run_says_so(tmp_path):
    result = dtrun("report", str(tmp_path))
    assert result.exit_code == 2
    assert "is not a `dtrun bench` run directory: it holds no manifest.json" in result.stderr
    assert "Traceback" not in result.output


def test_report_on_a_dtrun_run_directory_says_what_it_is(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    result = dtrun("report", str(tmp_path))
    assert result.exit_code == 2
    assert "it is a `dtrun run` directory" in result.stderr
    for command in ("compare",):
        assert dtrun(command, str(tmp_path), str(tmp_path)).exit_code == 2


def test_dry_run_prints_launch_files_beside_the_scripts(tmp_path):
    result = dtrun("bench", "--dry-run", "--nodes", "2", "--launcher", "deepspeed")
    assert result.exit_code == 0, result.output
    assert "launch file ds_config.json (every node)" in result.stdout
    assert "launch file hostfile (every node)" in result.stdout
    assert "--node_rank=1" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "dtrun run needs a command"),
        (["--"], "dtrun run needs a command"),
        (["--", "python"], "cannot tell what `python` runs"),
        (["--nodes", "0", "--", "python", "t.py"], "--nodes must be at least 1"),
        (["--timeout", "0", "--", "python", "t.py"], "--timeout must be a number of seconds"),
        (["--launcher", "horovod", "--", "python", "t.py"], "did you mean 'horovodrun'"),
        (
            ["--launcher", "tensorflow", "-p", "2", "--", "python", "t.py"],
            "one worker per node",
        ),
        (["--nodes", "40", "--", "python", "t.py"], "cannot simulate 40 nodes"),
    ],
)
def test_run_bad_input_gives_one_message_and_exit_code_2(tmp_path, args, message):
    result = dtrun("run", "--output", str(tmp_path / "runs"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


def test_run_dry_run_prints_the_program_quoted_in_every_file(tmp_path):
    result = dtrun(
        "run", "--dry-run", "--nodes", "2", "--launcher", "mpirun", "-e", "API_KEY=hunter2",
        "--", "python", "train.py", "--name", "it's $(id)",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "node-0.sh on node-0 (127.0.0.2) via mpirun, world size 2" in out
    assert "launch file launch-env.sh (every node)" in out
    assert "launch file local-rsh.sh (every node)" in out
    assert "train.py \"$@\" --name 'it'\"'\"'s $(id)'" in out
    assert "hunter2" not in out
    assert not (tmp_path / "runs").exists()


def test_run_takes_the_command_without_dashes_once_it_starts(tmp_path):
    result = dtrun("run", "--dry-run", "python", "train.py", "--nodes", "3")
    assert result.exit_code == 0, result.output
    assert "train.py --nodes 3" in result.stdout  # the program's own --nodes, not dtrun's
    assert "--nnodes=1" in result.stdout


def test_the_launcher_help_names_every_registered_launcher():
    from dtrun.cli.options import LAUNCHER_NAMES
    from dtrun.plan.launchers import BUILT_IN

    # The help text is written out so that `dtrun --help` need not import the launchers; an
    # engine's own launchers are said by its option's help (--ray's: torchtrainer).
    assert LAUNCHER_NAMES.split(", ") == list(BUILT_IN)


def test_a_zero_strategy_without_deepspeed_installed_is_refused_before_any_launch(
    tmp_path, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name)
    )
    result = dtrun("bench", "--output", str(tmp_path / "runs"), "--strategy", "zero3")
    assert result.exit_code == 2, result.output
    assert "--strategy zero3 needs deepspeed, and this Python has none" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_dry_run_shows_the_whole_sweep_plan_gate_points_repeats_and_environment(tmp_path):
    result = dtrun(
        "bench", "--dry-run", "--nodes", "1,2", "--repeat", "2", "--procs-per-node", "2",
        "--health-threshold", "0.5", "--health-size", "64K", "--env", "DB_PASSWORD=hunter2",
        "--output", str(tmp_path / "runs"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    # the gate checks each of the sweep's 2 nodes alone, before the sweep, as it will run
    assert "# ==== health gate: 2 launches, each node alone with 2 processes at 64K" in out
    assert "# ==== health gate launch -> health/node-0" in out
    assert "# ==== health gate launch -> health/node-1" in out
    assert out.count("-m dtrun.workloads.allreduce --sizes 64K") == 2
    # every point once, with its repeats and where their files will go
    assert "# ==== point: 1 node, 2 launches -> n1/r0 to n1/r1, the same scripts" in out
    assert "# ==== point: 2 nodes, 2 launches -> n2/r0 to n2/r1, the same scripts" in out
    # the environment the manifest will record, secrets redacted as everywhere else
    environment = out.split("# ==== environment recorded in manifest.json")[1]
    assert "OMP_NUM_THREADS=" in environment and "DB_PASSWORD=<redacted>" in environment
    assert "hunter2" not in out
    assert not (tmp_path / "runs").exists()


def test_dry_run_says_why_there_is_no_gate(tmp_path):
    result = dtrun("bench", "--dry-run", "--nodes", "1", "--output", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    assert "# ==== health gate: skipped: no expected single-node bus bandwidth" in result.stdout


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["bench", "--steps", "1_0"], "--steps"),
        (["bench", "--steps", "\u0664"], "--steps"),  # an Arabic-Indic 4
        (["bench", "--warmup", " 5"], "--warmup"),
        (["bench", "--ready-timeout", "1_000"], "--ready-timeout"),
        (["run", "--nodes", "1_0", "--", "python", "x.py"], "--nodes"),
        (["run", "--timeout", "6_0", "--", "python", "x.py"], "--timeout"),
        (["extend", "--stack", "dev", "--hours", "2_4"], "--hours"),
    ],
)
def test_number_options_take_plain_ascii_digits_only(tmp_path, args, flag):
    command, *rest = args
    result = dtrun(
        command, *(["--dry-run", "--output", str(tmp_path / "runs")] * (command != "extend")), *rest
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.replace("│", " ").split())
    assert f"Invalid value for '{flag}'" in said
    assert "write it in ASCII digits" in said
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "--timeout", "nan"], "--timeout must be a number of seconds above 0"),
        (["bench", "--timeout", "inf"], "--timeout must be a number of seconds above 0"),
        (["bench", "--timeout", "0"], "--timeout must be a number of seconds above 0"),
        (["bench", "--ready-timeout", "nan"], "--ready-timeout must be a number of seconds"),
        (["bench", "--health-threshold", "nan"], "--health-threshold must be above 0 and at most"),
        (["bench", "--health-threshold", "inf"], "--health-threshold must be above 0 and at most"),
        (["run", "--timeout", "nan", "--", "python", "x.py"], "--timeout must be a number"),
        (["run", "--timeout", "-inf", "--", "python", "x.py"], "--timeout must be a number"),
        (["exec", "--ready-timeout", "inf", "--", "true"], "--ready-timeout must be a number"),
    ],
)
def test_numbers_that_are_not_finite_are_refused_with_one_message(tmp_path, args, message):
    command, *rest = args
    result = (
        dtrun(command, "--dry-run", "--output", str(tmp_path / "runs"), *rest)
        if (command != "exec")
        else dtrun(*args)
    )
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("ignored", "expect"),
    [
        # a normal start: SIGTERM and SIGHUP are stopped like Ctrl-C
        ((), {"SIGINT": "default_int_handler", "SIGTERM": "stop", "SIGHUP": "stop"}),
        # `nohup dtrun ...`: SIGHUP stays ignored, so closing the terminal does not stop it
        (("SIGHUP",), {"SIGINT": "default_int_handler", "SIGTERM": "stop", "SIGHUP": "ignored"}),
        # `dtrun ... &` from a script ignores SIGINT; SIGTERM must still stop dtrun
        (("SIGINT",), {"SIGINT": "default_int_handler", "SIGTERM": "stop", "SIGHUP": "stop"}),
    ],
)
def test_which_signals_stop_dtrun_follows_what_its_parent_ignored(ignored, expect):
    import subprocess
    import sys

    code = (
        "import signal\n"
        # as a terminal starts a command, whatever this test run inherited (nohup, &)
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
        f"for name in {list(ignored)!r}: signal.signal(getattr(signal, name), signal.SIG_IGN)\n"
        "from dtrun.cli.app import _stop_on_signals, _stop_like_ctrl_c\n"
        "_stop_on_signals()\n"
        "for name in ('SIGINT', 'SIGTERM', 'SIGHUP'):\n"
        "    h = signal.getsignal(getattr(signal, name))\n"
        "    print(name, 'ignored' if h == signal.SIG_IGN else 'stop' if h is _stop_like_ctrl_c"
        " else getattr(h, '__name__', h))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert dict(line.split() for line in out.stdout.splitlines()) == expect


def test_a_port_another_program_listens_on_is_named_before_anything_starts(tmp_path):
    import json
    import socket

    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.2", 29871))
        held.listen()  # as another run's rendezvous store would
        result = dtrun(
            "bench", "--nodes", "1", "--port", "29870", "--quiet",
            "--output", str(tmp_path / "runs"), "--run-id", "busy",
        )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "port 29871 on 127.0.0.2 is in use" in result.stderr
    assert "pass another --port" in result.stderr and "Traceback" not in result.output
    runs = json.loads((tmp_path / "runs" / "busy" / "runs.json").read_text())
    assert runs["status"] == "failed" and "is in use" in runs["error"]
    assert not list((tmp_path / "runs" / "busy").glob("n1/r0/*.log"))  # no node was started


@pytest.mark.parametrize("late", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_while_dtrun_exits_leaves_its_exit_code(late):
    """A stop that comes once dtrun's exit is decided (its error printed, 143) changed it: one
    in the interpreter's end, after Python dropped its handlers, killed dtrun with the
    signal's default action (-2 for SIGINT), as a SIGTERM after a Slurm sweep's last point once
    did. The object whose collection sends it stands for that moment."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        "import dtrun.cli.app as cli\n"
        "class Late:\n"
        "    def __init__(self):\n"
        f"        self.kill, self.pid, self.sig = os.kill, os.getpid(), signal.{late}\n"
        "    def __del__(self):  # while the interpreter ends\n"
        "        self.kill(self.pid, self.sig)\n"
        "def stopped():\n"
        "    print('error: stopped by SIGTERM', file=sys.stderr)\n"
        "    raise SystemExit(143)\n"
        "cli.app = stopped\n"
        "sys.late = Late()\n"
        "cli.main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False,
        preexec_fn=_default_stops,
    )  # fmt: skip
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr == "error: stopped by SIGTERM\n"


def _default_stops() -> None:
    """A terminal's command: the stop signals at their defaults, unblocked."""
    import signal

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for signum in stops:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)


def test_a_stop_while_click_ends_dtrun_exits_with_its_code_and_no_traceback():
    """A SIGTERM while click raised dtrun's exit (its error already printed) came out of main
    as KeyboardInterrupt: a traceback, then death by SIGINT (Python's end for a program a
    KeyboardInterrupt ended)."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        "import dtrun.cli.app as cli\n"
        "def stopped():\n"
        "    print('error: the sweep failed', file=sys.stderr)\n"
        "    try:\n"
        "        raise SystemExit(1)\n"
        "    finally:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "cli.app = stopped\n"
        "cli.main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False,
        preexec_fn=_default_stops,
    )  # fmt: skip
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr == "error: the sweep failed\n"
