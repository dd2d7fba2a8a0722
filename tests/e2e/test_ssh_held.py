"""The program check's session carries the launch's staging (runner/engines/ssh/remote.py, a
held command): against real sshd instances, one session a node fewer, the same files, the same
error where the staging fails, and nothing left running."""

from __future__ import annotations

import asyncio
import contextlib

import asyncssh
import psutil
import pytest

from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.remote import STAGE
from dtrun.engines.ssh.session import SshError, SshSession
from dtrun.engines.ssh.transfer import put_script
from tests.conftest import ended, launch_processes, wait_for
from tests.e2e.test_ssh import bash_plan, hosts, workdir
from tests.sshd import SshCluster


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command of every session dtrun opens on a node (asyncssh's `run` opens them too)."""
    opened: list[str] = []
    original = asyncssh.SSHClientConnection.create_process

    async def counted(self, command, *args, **kwargs):
        opened.append(command)
        return await original(self, command, *args, **kwargs)

    monkeypatch.setattr(asyncssh.SSHClientConnection, "create_process", counted)
    return opened


@pytest.mark.e2e
def test_the_program_check_s_session_stages_the_launch_one_session_a_node_fewer(
    sshd_cluster, no_leftovers, sessions
):
    inventory = hosts(sshd_cluster, no_leftovers, count=2)
    plan = bash_plan(inventory, "cat node-0.sh >/dev/null; echo zero", "echo one")
    lines: list[tuple[str, str]] = []
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        checked = {node.name: "echo checked; exit 3" for node in inventory.nodes}
        answers = executor.command(checked, hold=True)
        assert {(a.output, a.exit_code) for a in answers.values()} == {("checked", 3)}
        assert len(sessions) == 2
        results = executor.run(
            plan, workdir(no_leftovers), timeout_s=120, on_line=lambda n, t: lines.append((n, t))
        )
    assert [r.exit_code for r in results] == [0, 0]
    assert sorted(lines) == [("node-0", "zero"), ("node-1", "one")]
    # the two launches only: each node's files went through its check's session
    assert len(sessions) == 4
    assert launch_processes() == []


@pytest.mark.e2e
def test_a_staging_that_fails_in_the_check_s_session_names_the_node_and_why(
    sshd_cluster, tmp_path, sessions
):
    inventory = hosts(sshd_cluster, tmp_path, count=1)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        executor.command({"node-0": "true"}, hold=True)
        with pytest.raises(SshError) as caught:
            session.call(
                executor._put(inventory.nodes[0], {str(blocker / "x.sh"): (b"x", 0o700)}, {})
            )
    assert len(sessions) == 1  # the check's session wrote, and failed
    message = caught.value.message
    assert "cannot write the launch files on node-0 (127.0.0.2)" in message
    assert "Not a directory" in message or "File exists" in message


@pytest.mark.e2e
def test_with_shared_storage_node_0_stages_through_its_session_and_the_others_are_closed(
    sshd_cluster, no_leftovers, sessions
):
    inventory = hosts(sshd_cluster, no_leftovers, count=2, shared=str(no_leftovers / "shared"))
    plan = bash_plan(inventory, "cat node-1.sh >/dev/null; echo zero", "echo one")
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        executor.command({node.name: "true" for node in inventory.nodes}, hold=True)
        held = dict(executor._held)
        assert sorted(held) == ["node-0", "node-1"]
        results = executor.run(plan, workdir(no_leftovers), timeout_s=120, on_line=print)
        assert executor._held == {}
        assert held["node-1"].is_closing()  # it had nothing to stage: its sh ends
    assert [r.exit_code for r in results] == [0, 0]
    assert len(sessions) == 4  # two checks, two launches: node 0's check session staged
    assert launch_processes() == []


# 3 MB: past asyncssh's 2 MiB receive window, where it stops reading the channel until what
# it holds is read
_FLOOD = "head -c 3000000 /dev/zero | tr '\\0' x"


@pytest.mark.e2e
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "flood", [f"{_FLOOD} >&2; echo >&2", f"{_FLOOD}; echo"], ids=["stderr", "one-line"]
)
def test_a_held_check_that_floods_its_output_still_answers_and_stages(
    sshd_cluster, no_leftovers, flood
):
    """A login script (~/.bashrc) or a check that writes megabytes, to stderr or as one line,
    before the check's answer: dtrun read on past it, or it waited for ever."""
    inventory = hosts(sshd_cluster, no_leftovers, count=1)
    plan = bash_plan(inventory, "echo zero")
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        answers = executor.command({"node-0": f"{flood}\necho checked; exit 3"}, hold=True)
        assert answers["node-0"].exit_code == 3
        # the answer is taken at the held marker, which may overtake stderr's last pieces
        assert "checked" in answers["node-0"].output
        assert "node-0" in executor._held
        results = executor.run(plan, workdir(no_leftovers), timeout_s=60, on_line=print)
    assert [r.exit_code for r in results] == [0]
    assert launch_processes() == []


def _sessions(cluster: SshCluster) -> list[psutil.Process]:
    """What the test sshd instances run for their sessions, the sshd processes apart."""
    found = []
    for sshd in cluster.processes.values():
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(sshd.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if not child.name().startswith("sshd"):
                        found.append(child)
    return found


@pytest.mark.e2e
def test_a_held_session_that_ended_before_the_staging_is_replaced_by_a_new_one(
    sshd_cluster, no_leftovers, sessions
):
    inventory = hosts(sshd_cluster, no_leftovers, count=1)
    plan = bash_plan(inventory, "echo zero")
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        executor.command({"node-0": "true"}, hold=True)
        (held,) = _sessions(sshd_cluster)  # its sh, waiting for STAGE
        held.kill()
        held.wait(timeout=10)
        results = executor.run(plan, workdir(no_leftovers), timeout_s=60, on_line=print)
    assert [r.exit_code for r in results] == [0]
    assert sessions.count("sh -s") == 1  # the staging's own, in place of the held one
    assert launch_processes() == []


@pytest.mark.e2e
def test_dtrun_gone_in_the_middle_of_a_held_staging_leaves_nothing_on_the_node(
    sshd_cluster, no_leftovers
):
    """As with dtrun SIGTERMed or SIGKILLed while staging: the node's sh reads the end of its
    input, stops, and removes the file it was writing; those it wrote whole stay."""
    inventory = hosts(sshd_cluster, no_leftovers, count=1)
    first, second = no_leftovers / "remote" / "a.sh", no_leftovers / "remote" / "b.sh"
    script = put_script({str(first): (b"true\n", 0o700), str(second): (b"x" * 3_000_000, 0o700)})
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        executor.command({"node-0": "true"}, hold=True)

        async def half_a_staging_then_gone() -> None:
            executor._held["node-0"].stdin.write(STAGE + script[: len(script) // 2])
            for _ in range(300):  # until sh is inside the staging: the first file is written
                if first.exists():
                    break
                await asyncio.sleep(0.1)
            staging.extend(_sessions(sshd_cluster))  # its sh (init's child once sshd is gone)
            connection = await session.connection(inventory.nodes[0])
            connection.abort()
            await connection.wait_closed()

        staging: list[psutil.Process] = []
        session.call(half_a_staging_then_gone())
        assert staging
        wait_for(lambda: all(ended(p.pid) for p in staging), timeout=30, what="its sh to end")
    assert sorted(path.name for path in first.parent.iterdir()) == ["a.sh"]
