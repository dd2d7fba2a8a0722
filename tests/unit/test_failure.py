"""A failed node's error shows the failing rank's own error, then the launcher's summary.

The logs in tests/data/failures/ were recorded from the real launchers (its README says how).
"""

from __future__ import annotations

import pytest

from dtrun.errors import NodeFailedError
from dtrun.execute.failure import ERROR_LINES, TAIL_LINES, explain, explain_log, read_failure
from tests.paths import TESTS

LOGS = TESTS / "data" / "failures"
RAISED = "ValueError: bad shard 17"


def log(name: str) -> str:
    return (LOGS / f"{name}.log").read_text()


@pytest.mark.parametrize(
    ("name", "rank", "local_rank", "host"),
    [
        ("torchrun", "1", "0", None),
        ("torchrun-tee", "1", "1", None),
        ("torchrun-rank-prefix", "1", "1", None),
        ("torchrun-record", "1", "0", None),
        ("deepspeed", None, "0", None),
        ("deepspeed-pdsh", None, "0", "127.0.0.3"),
        ("mpirun", "1", None, None),
        ("mpirun-tag-output", "1", None, None),
    ],
)
def test_the_failing_rank_s_own_traceback_is_found_under_the_launcher_s(
    name, rank, local_rank, host
):
    failure = read_failure(log(name))
    assert failure.error[0] == "Traceback (most recent call last):"
    assert failure.error[-1] == RAISED
    assert '    raise ValueError(f"bad shard {n}")' in failure.error
    assert not any("ChildFailedError" in line or "torch/distributed/run.py" in line
                   for line in failure.error)  # fmt: skip
    assert (failure.rank, failure.local_rank, failure.host) == (rank, local_rank, host)
    assert failure.exit == "exit code 1"
    assert failure.summary  # the launcher's own account comes after


def test_torchrun_s_summary_is_shortened_to_what_failed_and_the_root_cause():
    failure = read_failure(log("torchrun"))
    assert failure.summary == (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "/home/me/bad.py FAILED",
        "Root Cause (first observed failure):",
        "  rank      : 1 (local_rank: 0)",
        "  exitcode  : 1 (pid: 26176)",
    )


def test_the_launchers_own_lines_are_not_taken_for_the_program_s_output():
    failure = read_failure(log("deepspeed-sigkill"))
    assert failure.output == ("rank 1 starting",)  # not DeepSpeed's accelerator warnings
    assert failure.summary == (
        "['/opt/venv/bin/python', '-u', '/home/me/killed.py', '--local_rank=0'] exits with "
        "return code = -9",
    )
    assert failure.exit == "signal SIGKILL"


def test_deepspeed_s_first_rank_to_fail_is_named_not_the_ranks_stopped_after_it():
    stopped = (
        "127.0.0.2: [2026-11-24 05:50:52,001] [ERROR] [launch.py:259:sigkill_handler] "
        "['./launch-env.sh', '--local_rank=0'] exits with return code = -15"
    )
    failure = read_failure(log("deepspeed-pdsh") + stopped + "\n")
    assert (failure.host, failure.exit) == ("127.0.0.3", "exit code 1")
    assert failure.summary[-1].endswith("exits with return code = -15")


@pytest.mark.parametrize("name", ["torchrun-exit3", "mpirun-exit3"])
def test_a_rank_that_left_no_traceback_shows_its_last_output_and_its_own_exit_code(name):
    failure = read_failure(log(name))
    assert failure.error == ()
    assert failure.output[-1] == "error: config /data/cfg.yaml not found"
    assert (failure.rank, failure.exit) == ("1", "exit code 3")  # torchrun itself exited 1


def test_a_rank_killed_by_a_signal_is_named_with_the_signal():
    torchrun = read_failure(log("torchrun-sigkill"))
    assert (torchrun.rank, torchrun.exit) == ("1", "signal SIGKILL")
    assert "  traceback : Signal 9 (SIGKILL) received by PID 20145" in torchrun.summary
    mpirun = read_failure(log("mpirun-sigkill"))
    assert (mpirun.rank, mpirun.host, mpirun.exit) == ("1", "127.0.0.3", "signal SIGKILL")
    assert not any("plm:rsh" in line for line in (*mpirun.output, *mpirun.summary))


def test_torchrun_s_root_cause_traceback_stands_in_when_the_program_s_is_not_in_the_log():
    lines = log("torchrun-record").splitlines()
    start = lines.index("Traceback (most recent call last):")  # the program's, first
    without = "\n".join(lines[:start] + lines[lines.index(RAISED) + 1 :])
    failure = read_failure(without)
    assert failure.error[0] == "Traceback (most recent call last):"
    assert failure.error[-1] == RAISED
    assert "    load_shard(17)" in failure.error


def test_with_rank_prefixes_the_failing_rank_s_traceback_wins_over_a_later_one():
    lines = log("torchrun-rank-prefix").splitlines()
    after = next(i for i, line in enumerate(lines) if line.startswith("E1124"))
    later = [
        "[rank0]:Traceback (most recent call last):",
        '[rank0]:  File "/home/me/bad.py", line 20, in <module>',
        "[rank0]:    dist.barrier()",
        "[rank0]:RuntimeError: Connection closed by peer",
    ]
    failure = read_failure("\n".join(lines[:after] + later + lines[after:]))
    assert failure.error[-1] == RAISED
    # without prefixes to tell the ranks apart, the last traceback is the one shown
    plain = read_failure("\n".join(line.removeprefix("[rank0]:") for line in later))
    assert plain.error[-1] == "RuntimeError: Connection closed by peer"


def test_a_traceback_is_read_from_its_own_rank_s_lines_when_ranks_interleave():
    text = "\n".join(
        [
            "[0]<stdout>:step 1",
            "[1]<stderr>:Traceback (most recent call last):",
            "[0]<stdout>:step 2",
            '[1]<stderr>:  File "train.py", line 9, in <module>',
            "[0]<stdout>:step 3",
            "[1]<stderr>:    shard = load(17)",
            "[1]<stderr>:OSError: shard 17 is missing",
            "[0]<stdout>:step 4",
        ]
    )  # horovodrun's tags
    assert read_failure(text).error == (
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "    shard = load(17)",
        "OSError: shard 17 is missing",
    )


def test_a_deep_traceback_keeps_its_last_frames_and_its_whole_message():
    frames = [f'  File "/home/me/deep.py", line {n}, in f{n}\n    f{n + 1}()' for n in range(30)]
    text = "\n".join(
        ["step 1", "Traceback (most recent call last):", *frames,
         "RuntimeError: NCCL error: unhandled system error", "Last error:", "socket closed",
         "[2026-11-24 05:49:10,350] [ERROR] [launch.py:259:sigkill_handler] ['python'] exits "
         "with return code = 1"]
    )  # fmt: skip
    error = read_failure(text).error
    assert len(error) <= ERROR_LINES
    assert error[:2] == ("Traceback (most recent call last):", "  ...")
    assert error[-5:] == (
        '  File "/home/me/deep.py", line 29, in f29',
        "    f30()",
        "RuntimeError: NCCL error: unhandled system error",
        "Last error:",
        "socket closed",
    )


def test_error_lines_after_a_handled_traceback_are_shown_after_it():
    lines = log("torchrun").splitlines()
    after = lines.index(RAISED) + 1
    later = [
        "INFO:root:step 5 loss 0.25",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG 0 Rank 1] Watchdog caught collective operation timeout",
    ]
    failure = read_failure("\n".join(lines[:after] + later + lines[after:]))
    assert failure.error[-1] == RAISED
    assert failure.later == tuple(later[1:])  # not the progress line
    assert read_failure(log("torchrun")).later == ()
    message = explain("\n".join(lines[:after] + later + lines[after:]))
    assert message.index(RAISED) < message.index("  and after it:") < message.index("what():")


def test_a_program_s_own_dashed_table_is_not_taken_for_mpirun_s_notice():
    text = "\n".join(
        ["-" * 30, "step  loss", "1     0.5", "-" * 30, "Traceback (most recent call last):",
         '  File "train.py", line 3, in <module>', "KeyError: 'lr'"]
    )  # fmt: skip
    failure = read_failure(text)
    assert failure.error[-1] == "KeyError: 'lr'"
    assert failure.summary == ()


def test_a_log_with_nothing_recognised_is_quoted_by_its_last_lines():
    text = "\n".join(f"line {n}" for n in range(40)) + "\nnode-0.sh: line 9: torchrun: not found"
    said = explain(text)
    assert said.startswith("the last lines of its log:\n")
    assert said.splitlines()[-1] == "    node-0.sh: line 9: torchrun: not found"
    assert len(said.splitlines()) == 1 + TAIL_LINES
    assert explain("\n\n") == ""


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda path: path.stem)
def test_every_recorded_failure_is_told_in_a_bounded_message(path):
    error = NodeFailedError("node-1", "127.0.0.3", 1, str(path), explain_log(path))
    lines = error.message.splitlines()
    assert len(lines) <= 30
    assert lines[0].startswith("node-1 (127.0.0.3) failed with exit code 1; the other nodes")
    if path.stem == "torchrun-port-taken":  # the next step is the port's (below)
        return
    assert lines[-1] == f"  next: read {path}, fix the cause, and run again"


def test_a_rendezvous_port_another_run_holds_is_named_with_what_to_do():
    path = LOGS / "torchrun-port-taken.log"
    error = NodeFailedError("node-0", "127.0.0.2", 1, str(path), explain_log(path))
    assert "EADDRINUSE" in error.why
    assert error.fix == (
        "port 29400 is taken on node-0: another run (a second dtrun on the same machine) or "
        "program listens there; pass --port with a free one, or wait for it"
    )


def test_the_message_says_the_rank_then_its_error_then_the_launcher_s_summary():
    path = LOGS / "torchrun.log"
    message = NodeFailedError("node-1", "127.0.0.3", 1, str(path), explain_log(path)).message
    assert message.splitlines()[0] == (
        "node-1 (127.0.0.3) failed with exit code 1; the other nodes were stopped: "
        "rank 1 (local rank 0) exited with exit code 1; its error:"
    )
    assert message.index(RAISED) < message.index("the launcher's summary:")
    assert message.index("the launcher's summary:") < message.index("ChildFailedError")
    assert "torch/distributed/run.py" not in message


def test_a_short_secret_a_long_line_is_cut_through_shows_none_of_it(monkeypatch):
    """The quoted lines are cut at 240 characters after their secrets are masked: a cut
    through a 12-character password leaves none of it for the message's redaction to miss."""
    from dtrun import redact

    monkeypatch.setattr(redact, "_process", redact.Redactor.of(["Hunter2Pass!"]))
    line = "RuntimeError: login failed: " + "x" * 195 + " password=Hunter2Pass! at db"
    assert "Hunter" not in explain(f"step 1\n{line}\n")


def test_a_private_key_printed_before_a_failure_is_not_quoted_from_its_last_lines(tmp_path):
    """The error quotes a log's last 20 lines: those of a 2048-bit key printed line by line
    (print(key)) without its BEGIN line, which alone says they are a key."""
    import base64
    import hashlib

    from dtrun.redact import redact_text

    digits = base64.b64encode(b"".join(hashlib.sha512(bytes([i])).digest() for i in range(25)))
    body = [digits[i : i + 64].decode() for i in range(0, len(digits), 64)]
    key = ["-----BEGIN RSA PRIVATE KEY-----", *body, "-----END RSA PRIVATE KEY-----"]
    (tmp_path / "node-0.log").write_text("\n".join(["loading", *key, "exit 1"]) + "\n")
    shown = redact_text(explain_log(tmp_path / "node-0.log"))
    assert len(body) > TAIL_LINES and "exit 1" in shown
    assert [line for line in body if line in shown] == []


def test_a_short_secret_cut_by_a_log_s_line_break_is_masked_where_a_quoted_line_is_cut(
    tmp_path, monkeypatch
):
    """A node's error quotes its log's last lines, a long one cut short with "…": a secret the
    program's wrapped output cut at that line's end shows none of its rest on the next line."""
    from dtrun import redact
    from dtrun.redact import REDACTED, Redactor, redact_text

    monkeypatch.setattr(redact, "_process", Redactor.of(["hunter2x"]))
    (tmp_path / "node-0.log").write_text("step 1\n" + "x" * 300 + " pw hun\nter2x failed\n")
    shown = redact_text(explain_log(tmp_path / "node-0.log"))
    assert "…" in shown and f"\n    {REDACTED} failed" in shown and "ter2x" not in shown
