#!/usr/bin/env python3
"""dtrun's expiry check on the head VM, run every minute by dtrun-expiry.timer (docs/azure.md
"Expiry"). cloud-init installs this file verbatim as /usr/local/sbin/dtrun-expiry.

At each run: take a token for the head's user-assigned identity from IMDS, read the resource
group's tags (the deadline, the idle rule, what to delete: so `dtrun extend` takes effect without
touching the head), count the SSH connections to the head, decide, and delete through Azure's
REST API. Stdlib only: it runs on the image's python3 (3.10 on Ubuntu 22.04), not dtrun's venv.

The idle rule's signal: an established TCP connection to the head's port 22 from another
machine. Every dtrun command on the stack holds one for as long as it runs (the head is the
SSH jump host to every node), and so does every interactive login (`ssh`, `ssh -J`). sshd drops
a dead client's connection within three minutes (ClientAliveInterval, set by cloud-init).

Environment overrides, for tests against a loopback fake: DTRUN_EXPIRY_CONFIG, DTRUN_EXPIRY_STATE,
DTRUN_EXPIRY_IMDS, DTRUN_EXPIRY_ARM, DTRUN_EXPIRY_PROC_NET.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG = "/etc/dtrun/expiry.json"  # {"group_id": "/subscriptions/S/resourceGroups/G", "client_id"}
STATE = "/var/lib/dtrun-expiry"  # systemd's StateDirectory: last-active
IMDS = "http://169.254.169.254"
ARM = "https://management.azure.com"
PROC_NET = "/proc/net"
GROUPS_API = "2021-04-01"
COMPUTE_API = "2024-07-01"
TIMEOUT_S = 20
SSH_PORT = 22
ESTABLISHED = "01"  # the state column of /proc/net/tcp
# The tags runner/azure/expiry.py writes on the resource group.
TAG_EXPIRES_AT = "dtrun-expires-at"
TAG_IDLE_MINUTES = "dtrun-idle-minutes"
TAG_ACTION = "dtrun-expiry-action"
UTC = datetime.timezone.utc  # datetime.UTC is 3.11+
# The longest idle rule dtrun writes (runner/azure/expiry.py MAX_IDLE_MINUTES, 30 days): a tag
# set by hand far beyond it overflows timedelta at every run.
MAX_IDLE_MINUTES = 30 * 24 * 60


@dataclass(frozen=True)
class Rules:
    expires_at: datetime.datetime | None  # None: no deadline
    idle_minutes: int  # 0: no idle rule
    action: str  # "scaleset" or "group"


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _time(text: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def rules_from_tags(tags: dict[str, str]) -> Rules:
    """A missing or unreadable tag turns its rule off, and says so, rather than guessing."""
    expires_at = None
    if tags.get(TAG_EXPIRES_AT):
        try:
            expires_at = _time(tags[TAG_EXPIRES_AT])
        except ValueError:
            print(f"dtrun-expiry: tag {TAG_EXPIRES_AT}={tags[TAG_EXPIRES_AT]!r} is not a time")
    idle = tags.get(TAG_IDLE_MINUTES, "0")
    # ASCII digits only: int() refuses "²", which isdigit() takes, and the ValueError would end
    # the run before the deadline was looked at
    if not (idle.isascii() and idle.isdigit()) or int(idle) > MAX_IDLE_MINUTES:
        print(
            f"dtrun-expiry: tag {TAG_IDLE_MINUTES}={idle!r} is not a number of minutes up to "
            f"{MAX_IDLE_MINUTES}"
        )
        idle = "0"
    return Rules(expires_at, int(idle), tags.get(TAG_ACTION, "scaleset"))


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp{,6} write addresses as 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(swapped)


def _remote(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return not address.ipv4_mapped.is_loopback
    return not address.is_loopback


def ssh_sessions(proc_net: Path) -> int:
    """Established connections to this machine's port 22 from another machine."""
    count = 0
    for name in ("tcp", "tcp6"):
        path = proc_net / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != ESTABLISHED:
                continue
            local, remote = fields[1].split(":"), fields[2].split(":")
            if int(local[1], 16) == SSH_PORT and _remote(_address(remote[0])):
                count += 1
    return count


def rules_changed(state: Path, tags: dict[str, str]) -> bool:
    """Whether the rule tags differ from the last run's: `dtrun up` and `dtrun extend` write
    them, and either is someone using the cluster (a scale set made again after an idle
    deletion must not be deleted at once for the old idle time)."""
    mine = {key: value for key, value in sorted(tags.items()) if key.startswith("dtrun-")}
    marker = state / "rules.json"
    before = marker.read_text() if marker.exists() else None
    state.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(mine) + "\n")
    return before is not None and before != json.dumps(mine) + "\n"


def last_active(state: Path, active: bool, now: datetime.datetime) -> datetime.datetime:
    """When the cluster was last in use; the first run (the head's boot) counts as use."""
    marker = state / "last-active"
    if active or not marker.exists():
        state.mkdir(parents=True, exist_ok=True)
        marker.write_text(now.isoformat() + "\n")
        return now
    return _time(marker.read_text())


def decide(
    rules: Rules, now: datetime.datetime, since: datetime.datetime, sessions: int
) -> str | None:
    """Why to delete now, or None. The deadline is hard: it holds even while a session runs."""
    if rules.expires_at is not None and now >= rules.expires_at:
        return f"the deadline {rules.expires_at.isoformat()} has passed"
    idle = now - since
    limit = datetime.timedelta(minutes=rules.idle_minutes)
    if rules.idle_minutes and not sessions and idle >= limit:
        return f"no SSH connection to the head for {int(idle.total_seconds() // 60)} min"
    return None


class Azure:
    """ARM calls with a token for the head's user-assigned identity, taken from IMDS."""

    def __init__(self, imds: str, arm: str, client_id: str) -> None:
        self.arm = arm.rstrip("/")
        query = urllib.parse.urlencode(
            {
                "api-version": "2018-02-01",
                "resource": "https://management.azure.com/",
                "client_id": client_id,
            }
        )
        request = urllib.request.Request(
            f"{imds.rstrip('/')}/metadata/identity/oauth2/token?{query}",
            headers={"Metadata": "true"},
        )
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            self.token = json.load(response)["access_token"]

    def call(self, method: str, path: str, api: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.arm}{path}?api-version={api}",
            method=method,
            headers={"Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                body = response.read()
                return response.status, json.loads(body) if body else None
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return 404, None
            raise


def targets(azure: Azure, group_id: str, action: str) -> list[str]:
    """What to delete: the group itself, or each scale set in it not already being deleted."""
    if action == "group":
        return [group_id]
    path = f"{group_id}/providers/Microsoft.Compute/virtualMachineScaleSets"
    _, listed = azure.call("GET", path, COMPUTE_API)
    return [
        item["id"]
        for item in (listed or {}).get("value", [])
        if item.get("properties", {}).get("provisioningState") != "Deleting"
    ]


def main() -> int:
    config = json.loads(Path(_env("DTRUN_EXPIRY_CONFIG", CONFIG)).read_text())
    group_id = config["group_id"]
    state = Path(_env("DTRUN_EXPIRY_STATE", STATE))
    now = datetime.datetime.now(UTC)
    sessions = ssh_sessions(Path(_env("DTRUN_EXPIRY_PROC_NET", PROC_NET)))
    try:
        imds, arm = _env("DTRUN_EXPIRY_IMDS", IMDS), _env("DTRUN_EXPIRY_ARM", ARM)
        azure = Azure(imds, arm, config["client_id"])
        status, group = azure.call("GET", group_id, GROUPS_API)
        if status == 404:
            print(f"dtrun-expiry: {group_id} is gone; nothing to do")
            return 0
        tags = (group or {}).get("tags") or {}
        since = last_active(state, bool(sessions) or rules_changed(state, tags), now)
        rules = rules_from_tags(tags)
        reason = decide(rules, now, since, sessions)
        if reason is None:
            print(
                f"dtrun-expiry: keep: deadline {rules.expires_at or 'none'}, idle rule "
                f"{rules.idle_minutes or 'off'} min, {sessions} SSH "
                f"connection{'' if sessions == 1 else 's'}, "
                f"last in use {since.isoformat()}"
            )
            return 0
        found = targets(azure, group_id, rules.action)
        for target in found:
            api = GROUPS_API if target == group_id else COMPUTE_API
            status, _ = azure.call("DELETE", target, api)
            print(f"dtrun-expiry: {reason}: DELETE {target} -> {status}")
        if not found:
            print(f"dtrun-expiry: {reason}, and nothing is left to delete")
    except (OSError, ValueError, KeyError) as error:  # URLError is an OSError
        print(f"dtrun-expiry: could not check or delete: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
