"""Evicted nodes (issue 16): after a failed launch over SSH, a node named in an Azure Scheduled
Events Preempt, or one that vanished, turns the failure into "evicted", with --resume as the fix.
Pure checks with a fake command, then real sshd nodes asking a fake IMDS on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dtrun.cluster.readiness import NotReadyError
from dtrun.errors import NodeFailedError
from dtrun.execute import Answer
from dtrun.spec.cluster import Inventory
from dtrun.sweep.eviction import EvictedError, check_eviction, preempted
from tests.e2e.test_ssh import bash_plan

PREEMPT = {"Events": [{"EventId": "1", "EventType": "Preempt", "Resources": ["vm-1"]}]}


def _said(vm: str, events: object) -> str:
    return f"dtrun-vm {vm}\ndtrun-events {json.dumps(events)}\n"


@pytest.mark.parametrize(
    ("output", "evicted"),
    [
        (_said("vm-1", PREEMPT), True),
        (_said("vm-2", PREEMPT), False),  # another VM's event
        (_said("vm-1", {"Events": [{"EventType": "Reboot", "Resources": ["vm-1"]}]}), False),
        (_said("vm-1", {"Events": [{"EventType": "Preempt", "Resources": []}]}), True),
        (_said("vm-1", {"Events": []}), False),
        ("dtrun-vm vm-1\ndtrun-events <html>not json\n", False),
        ("dtrun-vm vm-1\ndtrun-events " + "[" * 100_000 + "\n", False),  # nested past Python's
        ("", False),  # no IMDS: not on Azure
        (_said("vm-1", {"Events": None}), False),
        (_said("vm-1", []), False),
        (_said("vm1", {"Events": [{"EventType": "Preempt", "Resources": "vm10"}]}), False),
    ],
)
def test_a_preempt_event_naming_this_vm_is_an_eviction(output, evicted):
    assert preempted(output) is evicted


def test_a_failure_is_kept_as_it_was_when_every_node_answers_without_an_event(tmp_path):
    plan = bash_plan(hosts_like(), "true", "exit 7")
    failure = NodeFailedError("node-1", "10.0.0.5", 7, "n.log", "boom")

    def command(scripts: dict[str, str]) -> dict[str, Answer]:
        return {name: Answer(_said(name, {"Events": []}), 0) for name in scripts}

    assert check_eviction(command, plan, failure, "runs/x") is failure


def test_a_node_that_does_not_answer_vanished(tmp_path):
    plan = bash_plan(hosts_like(), "true", "exit 7")
    failure = NodeFailedError("node-1", "10.0.0.5", 7, "n.log", "boom")

    def command(scripts: dict[str, str]) -> dict[str, Answer]:
        return {"node-0": Answer(_said("a", {}), 0), "node-1": Answer(error="no route to host")}

    error = check_eviction(command, plan, failure, "runs/x")
    assert isinstance(error, EvictedError)
    assert error.what == "evicted: node-1 (127.0.0.3) vanished: no route to host"
    assert "dtrun bench --resume runs/x" in error.fix and error.why == failure.message


def test_a_node_that_never_answered_in_the_sweep_has_not_vanished():
    """A wrong address fails the readiness wait; it was never there, so it is no eviction
    and --resume is no fix (it was reported "evicted: node-1 ... vanished")."""
    plan = bash_plan(hosts_like(), "true", "true")
    failure = NotReadyError("1 of 2 nodes not ready", why="node-1: connection refused")

    def command(scripts: dict[str, str]) -> dict[str, Answer]:
        return {"node-0": Answer(_said("a", {}), 0), "node-1": Answer(error="connection refused")}

    assert check_eviction(command, plan, failure, "runs/x", answered={"node-0"}) is failure
    gone = check_eviction(command, plan, failure, "runs/x", answered={"node-0", "node-1"})
    assert isinstance(gone, EvictedError) and "node-1 (127.0.0.3) vanished" in gone.what


def hosts_like() -> Inventory:
    from dtrun.engines.ssh.hosts import Defaults, parse_hosts_value

    return parse_hosts_value("127.0.0.2:1,127.0.0.3:1", Defaults("me", "/opt/venv/bin"))


# -- real sshd nodes and a fake IMDS on 127.0.0.1 ---------------------------------------------


@pytest.fixture
def imds(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """A fake instance metadata service: the VM's name and its Scheduled Events."""
    answers: dict[str, object] = {"name": "vm-1", "events": {"Events": []}}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Metadata") != "true":
                self.send_error(400)
                return
            if self.path.startswith("/metadata/instance/compute/name"):
                body = str(answers["name"]).encode()
            elif self.path.startswith("/metadata/scheduledevents"):
                body = json.dumps(answers["events"]).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DTRUN_IMDS_URL", f"http://127.0.0.1:{server.server_port}")
    yield answers
    server.shutdown()
