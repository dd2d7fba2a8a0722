"""Parsing of free-form option values."""

from __future__ import annotations

import re
import sys

import pytest

from dtrun.cli.parse import check_run_id, new_run_id, parse_command, parse_env, parse_node_counts
from dtrun.errors import UsageError
from dtrun.spec.request import Program, ProgramKind, RunSpec


def test_node_counts_are_sorted_and_deduplicated():
    assert parse_node_counts("4,1, 2,2") == (1, 2, 4)


@pytest.mark.parametrize("text", ["two", "1,,2", "1.5", ""])
def test_node_counts_that_are_not_numbers_are_refused(text):
    with pytest.raises(UsageError, match="is not a list of node counts") as caught:
        parse_node_counts(text)
    assert "--nodes 1,2,4" in caught.value.message


def test_node_counts_are_read_where_python_has_no_digit_limit():
    """PYTHONINTMAXSTRDIGITS=0 lifts int()'s limit: every count was refused as too long."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert parse_node_counts("1,2") == (1, 2)
        assert parse_node_counts("2," + "9" * 5000) == (2, 10**5000 - 1)  # the plan refuses it
    finally:
        sys.set_int_max_str_digits(before)


def test_env_splits_on_the_first_equals_sign():
    assert parse_env(["A=1", "B=x=y", "C="]) == (("A", "1"), ("B", "x=y"), ("C", ""))


@pytest.mark.parametrize("item", ["NOEQUALS", "=value"])
def test_env_without_a_name_or_equals_is_refused(item):
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        parse_env([item])


def test_run_ids_are_time_stamped_and_valid():
    run_id = new_run_id()
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", run_id)
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize("run_id", ["../up", "a b", ".hidden", "", "x/y"])
def test_run_ids_that_cannot_name_a_directory_are_refused(run_id):
    with pytest.raises(UsageError, match="cannot name a run directory"):
        check_run_id(run_id)


@pytest.mark.parametrize(
    ("argv", "kind", "target", "args"),
    [
        (["python", "train.py", "--lr", "3e-4"], ProgramKind.SCRIPT, "train.py", ("--lr", "3e-4")),
        (["python3", "-m", "pkg.train", "-m"], ProgramKind.MODULE, "pkg.train", ("-m",)),
        (["python3.11", "t.py"], ProgramKind.SCRIPT, "t.py", ()),
        (["./train.sh", "a b"], ProgramKind.EXECUTABLE, "./train.sh", ("a b",)),
        (["/v/bin/python", "-u", "t.py"], ProgramKind.EXECUTABLE, "/v/bin/python", ("-u", "t.py")),
    ],
)
def test_commands_run_python_with_the_nodes_python_and_the_rest_as_they_are(
    argv, kind, target, args
):
    assert parse_command(argv) == Program(kind, target, args)


def test_an_empty_command_is_refused_with_an_example():
    with pytest.raises(UsageError, match="needs a command") as caught:
        parse_command([])
    assert "-- python train.py" in caught.value.message


@pytest.mark.parametrize("argv", [["python"], ["python", "-u", "t.py"], ["python", "-m"]])
def test_python_without_a_script_or_module_is_refused(argv):
    with pytest.raises(UsageError, match="cannot tell what"):
        parse_command(argv)


@pytest.mark.parametrize("module", ["pkg.mod;x", ".relative", "a..b", "1abc", "pkg/train"])
def test_a_module_that_is_no_module_name_is_refused_before_any_launch(module):
    with pytest.raises(UsageError, match="is not a module name") as caught:
        parse_command(["python", "-m", module, "--lr", "1"])
    assert caught.value.exit_code == 2
    assert "Python identifiers joined by dots" in str(caught.value)


@pytest.mark.parametrize("module", ["pkg.train", "ünï.cødé", "_private.x1"])
def test_a_dotted_name_of_identifiers_is_a_module(module):
    assert parse_command(["python", "-m", module]).target == module


def test_python_dash_m_a_file_here_says_to_run_the_file_or_name_the_module(tmp_path):
    (tmp_path / "train.py").write_text("print('x')\n")
    with pytest.raises(UsageError, match="names a module by its file") as caught:
        parse_command(["python", "-m", "train.py"], tmp_path)
    assert caught.value.fix == "pass python train.py, or python -m train"
    # with no such file it may be a package 'train' with a module 'py': left to Python
    assert parse_command(["python", "-m", "other.py"], tmp_path).target == "other.py"


@pytest.mark.parametrize("argv", [["-a", "foo", "echo", "hi"], ["-x"], ["--help"]])
def test_a_program_that_starts_with_a_dash_is_refused_and_told_to_name_its_path(argv):
    # It lands after `exec` (bash reads -a NAME as exec's own option: `echo hi` would run) and
    # after torchrun's --no-python, DeepSpeed's --no_python, as an option of theirs.
    with pytest.raises(UsageError, match=f"the program {argv[0]!r} starts with '-'") as caught:
        parse_command(argv)
    assert caught.value.exit_code == 2
    assert f"./{argv[0]}" in str(caught.value)


def test_relative_script_and_executable_paths_are_taken_from_where_dtrun_started(tmp_path):
    script = parse_command(["python", "train.py", "--lr", "1"], tmp_path)
    assert script == Program(ProgramKind.SCRIPT, str(tmp_path / "train.py"), ("--lr", "1"))
    tool = parse_command(["./bin/run.sh"], tmp_path)
    assert tool.target == str(tmp_path / "bin" / "run.sh")
    assert parse_command(["hostname"], tmp_path).target == "hostname"  # from PATH
    assert parse_command(["python", "/abs/t.py"], tmp_path).target == "/abs/t.py"
    assert parse_command(["python", "-m", "pkg.train"], tmp_path).target == "pkg.train"


@pytest.mark.parametrize(
    ("args", "redacted", "secrets"),
    [
        (
            ("--hf-token", "abc", "--lr", "0.1"),
            ("--hf-token", "<redacted>", "--lr", "0.1"),
            ("abc",),
        ),
        (("--api-key=k1",), ("--api-key=<redacted>",), ("k1",)),
        (("DB_PASSWORD=pw",), ("DB_PASSWORD=<redacted>",), ("pw",)),
        (("--db", "postgres://u:p@db/x"), ("--db", "postgres://<redacted>@db/x"), ("u:p", "p")),
        # whole words only: a tokenizer or a kept checkpoint is no secret
        (
            ("--tokenizer", "gpt2", "--keep-last", "3"),
            ("--tokenizer", "gpt2", "--keep-last", "3"),
            (),
        ),
        # a flag with no value hides nothing after it but a value
        (("--auth", "--lr", "0.1"), ("--auth", "--lr", "0.1"), ()),
    ],
)
def test_secret_looking_program_arguments_are_redacted_in_records(args, redacted, secrets):
    spec = RunSpec(run_id="r", program=Program(ProgramKind.SCRIPT, "train.py", args))
    assert spec.redacted().program.args == redacted
    assert spec.secrets() == secrets
