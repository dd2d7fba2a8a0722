"""`dtrun run -- PROGRAM`: a program that is not on a node is refused before anything starts,
naming the nodes and the path (issue 25, part 7)."""

from __future__ import annotations

import pytest

from dtrun.cluster.program import check_program, program_script
from dtrun.errors import UsageError
from dtrun.execute import Answer
from dtrun.spec.cluster import Node
from dtrun.spec.request import Program, ProgramKind

NODES = (Node("node-0", "127.0.0.2", 1), Node("node-1", "127.0.0.3", 1))


def bash_on_each(script: str, names: list[str]) -> dict[str, Answer]:
    import subprocess

    done = {}
    for name in names:
        ran = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True)
        done[name] = Answer(ran.stdout + ran.stderr, ran.returncode)
    return done


def here(scripts: dict[str, str]) -> dict[str, Answer]:
    """Every node is this machine (the embedded cluster's nodes are)."""
    (script,) = set(scripts.values())
    return bash_on_each(script, list(scripts))


@pytest.mark.parametrize(
    ("make", "program", "said"),
    [
        (None, "missing.py", "on node-0 and node-1 it does not exist"),
        ("dir", "a-dir", "on node-0 and node-1 it is not a regular file"),
        ("plain", "run.sh", "on node-0 and node-1 it is not executable"),
    ],
)
def test_a_program_not_there_to_run_is_named_with_each_node(tmp_path, make, program, said):
    target = tmp_path / program
    if make == "dir":
        target.mkdir()
    elif make == "plain":
        target.write_text("#!/bin/sh\n")
    script = program.endswith(".py") or make == "dir"
    kind = ProgramKind.SCRIPT if script else ProgramKind.EXECUTABLE
    with pytest.raises(UsageError) as refused:
        check_program(here, Program(kind, str(target)), NODES)
    assert said in refused.value.what
    assert str(target) in refused.value.what
    assert refused.value.exit_code == 2


def test_a_bare_name_is_looked_up_in_each_node_s_path():
    check_program(here, Program(ProgramKind.EXECUTABLE, "bash"), NODES)  # found: no error
    with pytest.raises(UsageError) as refused:
        check_program(here, Program(ProgramKind.EXECUTABLE, "no-such-trainer"), NODES)
    assert "on node-0 and node-1 it is not found in its PATH" in refused.value.what
    assert refused.value.fix == "install it on every node, or give its full path"


def test_only_the_nodes_that_lack_it_are_named(tmp_path):
    def node_1_lacks_it(scripts: dict[str, str]) -> dict[str, Answer]:
        return {
            name: Answer("dtrun-program ok\n" if name == "node-0" else "dtrun-program missing\n", 0)
            for name in scripts
        }

    with pytest.raises(UsageError) as refused:
        check_program(node_1_lacks_it, Program(ProgramKind.SCRIPT, "/w/t.py"), NODES)
    assert "on node-1 it does not exist" in refused.value.what
    assert "node-0" not in refused.value.what


def test_a_node_that_does_not_answer_is_left_to_the_readiness_step():
    def unreachable(scripts: dict[str, str]) -> dict[str, Answer]:
        return {name: Answer(error="connection refused") for name in scripts}

    check_program(unreachable, Program(ProgramKind.SCRIPT, "/w/t.py"), NODES)


def test_the_readiness_wait_counts_from_the_program_checks_look():
    """The check's look at a dead node took one attempt already: the wait that follows gives
    up by the user's timeout counted from that look, not one attempt later (a dead node under
    --connect-timeout 30 kept dtrun 33 s, 22 s of them recorded)."""
    import time

    from dtrun.cluster.readiness import NotReadyError, Patience, wait_until_ready
    from dtrun.spec.cluster import Inventory

    looks: list[float] = []

    def unreachable(scripts: dict[str, str]) -> dict[str, Answer]:
        looks.append(time.monotonic())
        return {name: Answer(error="no SSH answer in 2 s") for name in scripts}

    inventory = Inventory("hosts:h.yaml", NODES, "/usr/bin", "/tmp/dtrun-code")
    since = time.monotonic() - 3.0  # the program check's look began 3 s ago
    with pytest.raises(NotReadyError, match="not ready within --ready-timeout 4 s"):
        wait_until_ready(
            unreachable, inventory, NODES, check=False, patience=Patience(4.0, 2.0, 2.0),
            since=since,
        )  # fmt: skip
    assert len(looks) == 1  # from now, 2 s to wait and 2 s to look would pass 4 s


def test_the_last_look_at_a_dead_node_is_as_late_as_can_still_finish(monkeypatch):
    """--connect-timeout 6 with a look every 2 s, each up to 2 s: looks at 0, 2 and 4 s (the
    last ends by 6), not only at 0 and 2 (it gave up at 2 s, of 6, as "not ready after 2 s")."""
    from dtrun.cluster import readiness
    from dtrun.spec.cluster import Inventory

    now = [100.0]
    looks: list[float] = []
    monkeypatch.setattr("dtrun.cluster.readiness.time.monotonic", lambda: now[0])
    monkeypatch.setattr(
        "dtrun.cluster.readiness.time.sleep", lambda seconds: now.__setitem__(0, now[0] + seconds)
    )

    def refused(scripts: dict[str, str]) -> dict[str, Answer]:
        looks.append(now[0] - 100.0)
        return {name: Answer(error="connection refused") for name in scripts}

    inventory = Inventory("hosts:h.yaml", NODES, "/usr/bin", "/tmp/dtrun-code")
    patience = readiness.Patience(6.0, 2.0, 2.0, "--connect-timeout")
    with pytest.raises(
        readiness.NotReadyError, match="2 of 2 nodes not ready within --connect-timeout 6 s"
    ):
        readiness.wait_until_ready(refused, inventory, NODES, check=False, patience=patience)
    assert looks == [0.0, 2.0, 4.0]


def test_a_module_is_left_to_the_launcher():
    assert program_script(Program(ProgramKind.MODULE, "trainer.main")) is None


def test_a_hostile_path_is_one_quoted_word_in_the_check(tmp_path):
    mark = tmp_path / "made"
    target = f"x'; touch {mark}; '$(touch {mark})"
    with pytest.raises(UsageError, match="does not exist"):
        check_program(here, Program(ProgramKind.SCRIPT, target), NODES)
    assert not mark.exists()


def test_a_node_whose_check_ends_without_an_answer_is_named_with_its_exit_code():
    """A login script (~/.bashrc) that exits 3, or sets -e and fails, ends every command on
    the node before the check says a word: the message names the exit code and the last
    line, not a missing file."""

    def login_script_exits(scripts: dict[str, str]) -> dict[str, Answer]:
        said = {"node-0": ("dtrun-program ok\n", 0), "node-1": ("bashrc: no module\x1b[0m\n", 3)}
        return {name: Answer(*said[name]) for name in scripts}

    with pytest.raises(UsageError) as refused:
        check_program(login_script_exits, Program(ProgramKind.SCRIPT, "/w/t.py"), NODES)
    assert (
        "on node-1 it could not be checked: the check exited 3 before answering, "
        "its last line: bashrc: no module\\x1b[0m" in refused.value.what
    )
    assert "dtrun exec --hosts ... -- true" in refused.value.fix
    assert "put it at that path" not in refused.value.fix
