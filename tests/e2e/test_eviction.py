"""eviction: the tests that start daemons or real launches; the others are in
tests/unit/test_eviction.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtrun.engines.ssh.executor import SshExecutor
from dtrun.engines.ssh.session import SshSession
from dtrun.errors import NodeFailedError
from dtrun.plan.sweep import Launch
from dtrun.spec.outcome import RunStatus
from dtrun.sweep.eviction import EvictedError
from dtrun.sweep.runlaunch import run_launch
from tests.e2e.test_ssh import bash_plan, hosts
from tests.unit.test_eviction import (
    PREEMPT,
    imds,  # noqa: F401 - a fixture
)


@pytest.mark.e2e
@pytest.mark.parametrize(("events", "status"), [(PREEMPT, "evicted"), ({"Events": []}, "failed")])
def test_a_node_failing_over_ssh_is_evicted_only_when_scheduled_events_say_so(
    sshd_cluster, no_leftovers, imds, events, status
):
    imds["events"] = events
    inventory = hosts(sshd_cluster, no_leftovers, count=2)
    plan = bash_plan(inventory, "sleep 600\n", "sleep 1\nexit 7\n")
    run = no_leftovers / "runs" / "ev"
    with SshSession(inventory) as session:
        executor = SshExecutor(session)
        outcome = run_launch(
            Launch(plan, "n2/r0"), run, executor, timeout_s=120, on_line=print,
            ready=lambda plan: None, evictions=executor.command,
        )  # fmt: skip
    assert outcome.run.status == RunStatus(status)
    error = outcome.error
    if status == "evicted":
        assert isinstance(error, EvictedError)
        assert "node-0 (127.0.0.2) was evicted: Azure's Scheduled Events name it" in error.what
        assert f"dtrun bench --resume {run}" in error.fix
        assert "exit code 7" in error.why  # what failed first, kept
    else:
        assert isinstance(error, NodeFailedError) and error.node == "node-1"
    assert [r.exit_code for r in outcome.run.node_results] == [None, 7]


@pytest.mark.e2e
def test_a_node_whose_sshd_goes_away_is_reported_vanished(sshd_cluster, tmp_path, imds):
    inventory = hosts(sshd_cluster, tmp_path, count=2)
    plan = bash_plan(inventory, "echo started\nsleep 600\n", "echo started\nsleep 600\n")
    started: set[str] = set()

    def on_line(node: str, line: str) -> None:
        started.add(node)
        if started == {"node-0", "node-1"}:
            sshd_cluster.stop("127.0.0.3")  # node-1 goes away, as a taken-back spot VM does

    try:
        with SshSession(inventory, retries=1) as session:
            executor = SshExecutor(session)
            outcome = run_launch(
                Launch(plan, "n2/r0"), Path(tmp_path), executor, timeout_s=120,
                on_line=on_line, ready=lambda plan: None, evictions=executor.command,
            )  # fmt: skip
    finally:
        sshd_cluster.start(sshd_cluster.hosts[1])
    assert outcome.run.status is RunStatus.EVICTED
    assert isinstance(outcome.error, EvictedError)
    assert "node-1 (127.0.0.3) vanished" in outcome.error.what
