"""The head's expiry script run for real, against a loopback fake of IMDS and Azure Resource
Manager (one http.server on 127.0.0.1, port 0): when it deletes, what, and when it must not."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dtrun.infra.cloudinit import EXPIRY_SCRIPT

GROUP_ID = "/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/dtrun-rg1a2b3c4d"
SCALE_SET = f"{GROUP_ID}/providers/Microsoft.Compute/virtualMachineScaleSets/gpu-vmss1234"
CLIENT_ID = "11111111-1111-4111-8111-111111111111"
TOKEN = "fake-arm-token"
HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
# 10.42.0.4:22 <- 203.0.113.4:51234, established: an SSH client from the admin's address
FROM_ADMIN = "   1: 04002A0A:0016 047100CB:C822 01 00000000:00000000 00:00000000 00000000 0 0 1 1\n"
# 127.0.0.1:22 <- 127.0.0.1:40000, established: the head itself, not a user
FROM_LOOPBACK = (
    "   2: 0100007F:0016 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 0 0 2 1\n"
)
LISTENING = "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 3 1\n"


def now() -> datetime.datetime:
    """The time as each test runs (not as the module was imported: the suite runs for minutes
    before some of these tests, and the script under test reads the real clock)."""
    return datetime.datetime.now(datetime.UTC)


def iso(delta: datetime.timedelta) -> str:
    return (now() + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


HOUR = datetime.timedelta(hours=1)


@dataclass
class FakeAzure:
    """IMDS's token endpoint and the three ARM calls the script makes, with what was asked."""

    tags: dict[str, str] = field(default_factory=dict)
    token_queries: list[dict[str, list[str]]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    url: str = ""


class FakeAzureHandler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args: object) -> None:
        pass

    def reply(self, status: int, body: object = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {TOKEN}"

    def do_GET(self) -> None:
        fake = self.server.fake
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/metadata/identity/oauth2/token":
            fake.token_queries.append(urllib.parse.parse_qs(url.query))
            if self.headers.get("Metadata") != "true":
                return self.reply(400, {"error": "Metadata header missing"})
            return self.reply(200, {"access_token": TOKEN, "token_type": "Bearer"})
        if not self.authorized():
            return self.reply(401)
        if url.path == GROUP_ID:
            return self.reply(200, {"id": GROUP_ID, "tags": fake.tags})
        if url.path == f"{GROUP_ID}/providers/Microsoft.Compute/virtualMachineScaleSets":
            state = {"provisioningState": "Succeeded"}
            return self.reply(200, {"value": [{"id": SCALE_SET, "properties": state}]})
        return self.reply(404)

    def do_DELETE(self) -> None:
        if not self.authorized():
            return self.reply(401)
        self.server.fake.deleted.append(urllib.parse.urlsplit(self.path).path)
        return self.reply(202)


class FakeServer(ThreadingHTTPServer):
    fake: FakeAzure


@pytest.fixture
def azure() -> Iterator[FakeAzure]:
    server = FakeServer(("127.0.0.1", 0), FakeAzureHandler)
    server.fake = FakeAzure(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.fake
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Head:
    """The head's files as the script sees them: its config, its state, /proc/net."""

    root: Path

    def connections(self, *lines: str) -> None:
        (self.root / "proc").mkdir(exist_ok=True)
        (self.root / "proc" / "tcp").write_text(HEADER + "".join(lines))

    def last_active(self, ago: datetime.timedelta) -> None:
        (self.root / "state").mkdir(exist_ok=True)
        (self.root / "state" / "last-active").write_text((now() - ago).isoformat() + "\n")

    def run(self, azure: FakeAzure) -> subprocess.CompletedProcess[str]:
        (self.root / "expiry.json").write_text(
            json.dumps({"group_id": GROUP_ID, "client_id": CLIENT_ID})
        )
        env = {  # no proxy variables: the fake is on loopback
            "DTRUN_EXPIRY_CONFIG": str(self.root / "expiry.json"),
            "DTRUN_EXPIRY_STATE": str(self.root / "state"),
            "DTRUN_EXPIRY_PROC_NET": str(self.root / "proc"),
            "DTRUN_EXPIRY_IMDS": azure.url,
            "DTRUN_EXPIRY_ARM": azure.url,
        }
        return subprocess.run(
            [sys.executable, str(EXPIRY_SCRIPT)], env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip


@pytest.fixture
def head(tmp_path) -> Head:
    head = Head(tmp_path)
    head.connections(LISTENING)
    return head


def rules(expires: datetime.timedelta | None, idle: int = 60, action: str = "scaleset"):
    tags = {"dtrun-idle-minutes": str(idle), "dtrun-expiry-action": action}
    if expires is not None:
        tags["dtrun-expires-at"] = iso(expires)
    return tags


def test_a_passed_deadline_deletes_the_scale_set_even_with_someone_logged_in(head, azure):
    azure.tags = rules(expires=-HOUR)
    head.connections(LISTENING, FROM_ADMIN)
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == [SCALE_SET]
    assert "the deadline" in ran.stdout and "DELETE" in ran.stdout


def test_idle_past_the_rule_deletes_the_scale_set(head, azure):
    azure.tags = rules(expires=HOUR * 5, idle=60)
    head.last_active(datetime.timedelta(minutes=61))
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == [SCALE_SET]
    assert "no SSH connection to the head for 61 min" in ran.stdout


def test_a_running_launch_holds_the_ssh_connection_so_nothing_is_deleted(head, azure):
    azure.tags = rules(expires=HOUR * 5, idle=60)
    head.last_active(datetime.timedelta(hours=3))
    head.connections(LISTENING, FROM_ADMIN)
    before = now().replace(microsecond=0)
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == []
    assert "1 SSH connection" in ran.stdout
    # ...and the idle clock starts again from now
    seen = datetime.datetime.fromisoformat(
        (head.root / "state" / "last-active").read_text().strip()
    )
    assert seen >= before


def test_nothing_is_deleted_before_the_deadline_or_the_idle_time(head, azure):
    azure.tags = rules(expires=HOUR, idle=60)
    head.last_active(datetime.timedelta(minutes=59))
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == []
    assert "dtrun-expiry: keep:" in ran.stdout


def test_with_ttl_0_and_no_idle_rule_nothing_is_ever_deleted(head, azure):
    azure.tags = rules(expires=None, idle=0)
    head.last_active(datetime.timedelta(days=3))
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == []
    assert "deadline none, idle rule off" in ran.stdout


@pytest.mark.parametrize("idle", ["²", "10000000000000", "43201"])
def test_an_idle_tag_set_by_hand_out_of_range_is_no_idle_rule_and_the_deadline_holds(
    head, azure, idle
):
    azure.tags = {**rules(expires=HOUR), "dtrun-idle-minutes": idle}
    head.last_active(datetime.timedelta(days=40))
    kept = head.run(azure)
    assert kept.returncode == 0, kept.stderr
    assert azure.deleted == []
    assert f"dtrun-idle-minutes={idle!r} is not a number of minutes up to 43200" in kept.stdout
    assert "idle rule off" in kept.stdout
    azure.tags = {**rules(expires=-HOUR), "dtrun-idle-minutes": idle}
    deleted = head.run(azure)
    assert deleted.returncode == 0, deleted.stderr
    assert azure.deleted == [SCALE_SET]  # the passed deadline, whatever the idle tag says


def test_the_group_action_deletes_the_whole_group(head, azure):
    azure.tags = rules(expires=-HOUR, action="group")
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == [GROUP_ID]


def test_the_head_talking_to_itself_is_not_a_session(head, azure):
    azure.tags = rules(expires=HOUR * 5, idle=60)
    head.last_active(datetime.timedelta(minutes=90))
    head.connections(LISTENING, FROM_LOOPBACK)
    assert head.run(azure).returncode == 0
    assert azure.deleted == [SCALE_SET]


def test_new_rule_tags_from_dtrun_up_or_extend_restart_the_idle_clock(head, azure):
    azure.tags = rules(expires=HOUR, idle=60)
    head.last_active(datetime.timedelta(minutes=30))
    assert head.run(azure).returncode == 0  # remembers the tags
    head.last_active(datetime.timedelta(minutes=90))
    azure.tags = rules(expires=HOUR * 4, idle=60)  # `dtrun extend --hours 4`
    ran = head.run(azure)
    assert ran.returncode == 0, ran.stderr
    assert azure.deleted == []


def test_the_token_is_asked_of_imds_for_arm_with_the_identity_client_id(head, azure):
    azure.tags = rules(expires=HOUR)
    assert head.run(azure).returncode == 0
    [query] = azure.token_queries
    assert query == {
        "api-version": ["2018-02-01"],
        "resource": ["https://management.azure.com/"],
        "client_id": [CLIENT_ID],
    }


def test_an_unreachable_azure_is_a_failed_run_that_says_so(head, tmp_path):
    unreachable = FakeAzure(url="http://127.0.0.1:9")  # discard: nothing listens
    ran = head.run(unreachable)
    assert ran.returncode == 1
    assert "dtrun-expiry: could not check or delete:" in ran.stderr


def test_the_head_script_caps_the_idle_rule_where_dtrun_does(monkeypatch):
    # installed verbatim on the head, stdlib only: it keeps its own copy of dtrun's limit
    import importlib.util

    from dtrun.azure.expiry import MAX_IDLE_MINUTES

    loaded = importlib.util.spec_from_file_location("head_expiry", EXPIRY_SCRIPT)
    assert loaded is not None and loaded.loader is not None
    script = importlib.util.module_from_spec(loaded)
    monkeypatch.setitem(sys.modules, "head_expiry", script)  # its dataclass looks itself up
    loaded.loader.exec_module(script)
    assert script.MAX_IDLE_MINUTES == MAX_IDLE_MINUTES
