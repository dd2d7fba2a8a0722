"""Expiry that lives in Azure: the deadline and the idle rule the head's timer enforces
(docs/azure.md "Expiry"). Pure: the settings' checks, the deadline's ISO 8601 form, the
resource group's tags the timer reads every minute, and the line each command prints about them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from dtrun.errors import UsageError
from dtrun.spec.cluster import ExpiryAction, ExpirySpec

# The resource group's tags: the head's script reads them at every run (an ARM GET on the
# group), so `dtrun extend` and a changed idle rule take effect without touching the head.
TAG_EXPIRES_AT = "dtrun-expires-at"
TAG_IDLE_MINUTES = "dtrun-idle-minutes"
TAG_ACTION = "dtrun-expiry-action"
# Below this an idle rule could delete nodes before the first command reaches them: the
# timer's clock starts when the head boots, and the nodes take minutes to boot and register.
MIN_IDLE_MINUTES = 10
# A deadline further off is no deadline (set dtrun:ttlHours 0): the most ttlHours and
# `dtrun extend --hours` take. Far beyond it, the deadline is past the year 9999.
MAX_HOURS = 24 * 30
# The longest idle rule, the same 30 days: far beyond it (about 10^13 minutes), the head's
# script cannot even compute the idle deadline (timedelta overflows at every run).
MAX_IDLE_MINUTES = MAX_HOURS * 60
_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class ExpiryError(UsageError):
    """An expiry setting or deadline that dtrun cannot use."""


def iso(moment: datetime.datetime) -> str:
    """UTC, to the second, with a Z: 2026-11-23T14:05:00Z (what the tag holds)."""
    return moment.astimezone(datetime.UTC).strftime(_FORMAT)


def parse_iso(text: str, what: str) -> datetime.datetime:
    """An ISO 8601 time with its zone (Z or +00:00), as an aware UTC datetime."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ExpiryError(
            f"{what} is {text!r}, not an ISO 8601 time with its zone",
            fix="use e.g. 2026-11-23T14:05:00Z",
        )
    return moment.astimezone(datetime.UTC)


def deadline(now: datetime.datetime, hours: float) -> str:
    return iso(now + datetime.timedelta(hours=hours))


def expiry_spec(
    ttl_hours: int,
    idle_minutes: int,
    action: str,
    expires_at: str,
    now: datetime.datetime | None = None,
) -> ExpirySpec:
    """The expiry settings, checked (keys named as in Pulumi.yaml). Given ``now`` (the program),
    a deadline already past is refused; `dtrun up` and `extend` pass none: they write a new one."""
    if not 0 <= ttl_hours <= MAX_HOURS:
        raise ExpiryError(
            f"dtrun:ttlHours is {ttl_hours}",
            fix=f"use hours from `dtrun up`, at most {MAX_HOURS}, or 0 for no deadline",
        )
    if idle_minutes < 0 or 0 < idle_minutes < MIN_IDLE_MINUTES:
        raise ExpiryError(
            f"dtrun:idleMinutes is {idle_minutes}",
            why="the idle clock starts when the head boots, and the nodes take minutes to boot",
            fix=f"use 0 (no idle rule) or {MIN_IDLE_MINUTES} minutes or more",
        )
    if idle_minutes > MAX_IDLE_MINUTES:
        raise ExpiryError(
            f"dtrun:idleMinutes is {idle_minutes}, more than 30 days",
            fix=f"use at most {MAX_IDLE_MINUTES} minutes, or 0 for no idle rule",
        )
    try:
        chosen = ExpiryAction(action)
    except ValueError:
        names = ", ".join(choice.value for choice in ExpiryAction)
        raise ExpiryError(f"dtrun:expiryAction is {action!r}", fix=f"use one of {names}") from None
    if expires_at:
        moment = parse_iso(expires_at, "dtrun:expiresAt")
        if now is not None and moment <= now:
            raise ExpiryError(
                f"dtrun:expiresAt is {expires_at}, which has passed",
                why="the head's timer would delete the cluster as soon as it starts",
                fix="run `dtrun up` or `dtrun extend --hours N`, which write a new deadline, "
                "or `pulumi config rm dtrun:expiresAt` for ttlHours from this update",
            )
        expires_at = iso(moment)
    return ExpirySpec(ttl_hours, idle_minutes, chosen, expires_at)


def group_tags(spec: ExpirySpec, expires_at: str | None) -> dict[str, str]:
    """The tags the timer reads; none when expiry is off. No deadline tag when ttlHours is 0."""
    if not spec.enabled:
        return {}
    tags = {TAG_IDLE_MINUTES: str(spec.idle_minutes), TAG_ACTION: spec.action.value}
    if expires_at:
        tags[TAG_EXPIRES_AT] = expires_at
    return tags


def _left(seconds: float) -> str:
    if seconds <= 0:
        return "passed"
    minutes = int(seconds // 60)
    return f"in {minutes // 60} h {minutes % 60:02d} min"


def describe(
    stack: str | None,
    expires_at: str | None,
    idle_minutes: int,
    action: str | None,
    now: datetime.datetime,
) -> str:
    """One line on when the cluster removes itself, for up, outputs and every bench."""
    what = "the GPU scale set" if action == ExpiryAction.SCALESET.value else "the resource group"
    rules = []
    if expires_at:
        left = (parse_iso(expires_at, "expires_at") - now).total_seconds()
        rules.append(f"at {expires_at} ({_left(left)})")
    if idle_minutes:
        rules.append(f"after {idle_minutes} min without an SSH connection to the head")
    if not rules:
        return "no expiry: this cluster bills until `dtrun down` (dtrun:ttlHours and idleMinutes 0)"
    how = f"; `dtrun extend --stack {stack} --hours N` moves the deadline" if stack else ""
    return f"expiry deletes {what} {' or '.join(rules)}{how}"


def expiry_fields(outputs: Mapping[str, object]) -> tuple[str | None, int, str | None]:
    """(expires_at, idle_minutes, action) from raw outputs; older stacks have none."""
    expires = outputs.get("expires_at")
    idle = outputs.get("idle_minutes")
    action = outputs.get("expiry_action")
    return (
        expires if isinstance(expires, str) else None,
        idle if isinstance(idle, int) and not isinstance(idle, bool) else 0,
        action if isinstance(action, str) else None,
    )
