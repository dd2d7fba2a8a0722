"""Expiry settings and the line every command prints about them (runner/azure/expiry.py)."""

from __future__ import annotations

import datetime

import pytest

from dtrun.azure.config import cluster_spec
from dtrun.azure.expiry import ExpiryError, deadline, describe, expiry_fields, group_tags
from dtrun.azure.settingcheck import ConfigError
from dtrun.spec.cluster import ExpiryAction, ExpirySpec

TODAY = datetime.date(2026, 11, 23)
NOON = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)


def expiry(**settings: object) -> ExpirySpec:
    return cluster_spec({"adminCidrs": ["203.0.113.4/32"], **settings}, today=TODAY).expiry


def test_the_defaults_are_12_hours_60_idle_minutes_and_the_scale_set():
    assert expiry() == ExpirySpec(12, 60, ExpiryAction.SCALESET, "")
    assert expiry().enabled
    assert not expiry(ttlHours=0, idleMinutes=0).enabled


def test_a_deadline_is_stored_in_utc_with_a_z():
    assert expiry(expiresAt="2026-11-23T15:30:00+01:00").expires_at == "2026-11-23T14:30:00Z"
    assert deadline(NOON, 12) == "2026-11-24T00:00:00Z"
    assert deadline(NOON, 0.5) == "2026-11-23T12:30:00Z"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ttlHours": -1}, "dtrun:ttlHours is -1"),
        ({"idleMinutes": 5}, "dtrun:idleMinutes is 5"),
        ({"idleMinutes": -3}, "dtrun:idleMinutes is -3"),
        ({"expiryAction": "vm"}, "dtrun:expiryAction is 'vm'"),
        ({"expiresAt": "tomorrow"}, "dtrun:expiresAt is 'tomorrow', not an ISO 8601 time"),
        ({"expiresAt": "2026-11-23T14:30:00"}, "not an ISO 8601 time with its zone"),
        ({"ttlHourz": 3}, "did you mean dtrun:ttlHours"),
    ],
)
def test_bad_expiry_settings_are_named_with_the_fix(settings, message):
    with pytest.raises((ExpiryError, ConfigError)) as caught:
        expiry(**settings)
    assert message in caught.value.message
    assert caught.value.exit_code == 2


def test_the_group_tags_hold_the_rules_and_no_deadline_when_ttl_is_0():
    assert group_tags(expiry(), "2026-11-24T00:00:00Z") == {
        "dtrun-idle-minutes": "60",
        "dtrun-expiry-action": "scaleset",
        "dtrun-expires-at": "2026-11-24T00:00:00Z",
    }
    assert "dtrun-expires-at" not in group_tags(expiry(ttlHours=0), None)
    assert group_tags(expiry(ttlHours=0, idleMinutes=0), None) == {}


def test_the_line_says_what_goes_when_and_how_to_move_it():
    line = describe("dev", "2026-11-23T23:05:00Z", 60, "scaleset", NOON)
    assert line == (
        "expiry deletes the GPU scale set at 2026-11-23T23:05:00Z (in 11 h 05 min) or after "
        "60 min without an SSH connection to the head; "
        "`dtrun extend --stack dev --hours N` moves the deadline"
    )
    assert "deletes the resource group at" in describe(
        None, "2026-11-23T11:00:00Z", 0, "group", NOON
    )
    assert "(passed)" in describe(None, "2026-11-23T11:00:00Z", 0, "group", NOON)
    assert describe("dev", None, 0, None, NOON).startswith("no expiry: this cluster bills until")


def test_older_outputs_have_no_expiry_fields():
    assert expiry_fields({"version": 2}) == (None, 0, None)
    assert expiry_fields(
        {"expires_at": "2026-11-23T23:05:00Z", "idle_minutes": 60, "expiry_action": "group"}
    ) == ("2026-11-23T23:05:00Z", 60, "group")


@pytest.mark.parametrize("hours", [24 * 30 + 1, 10**8])
def test_a_ttl_beyond_the_longest_deadline_is_refused_as_extend_refuses_it(hours):
    # 10**8 hours passed the check, then `dtrun up` (and the program) raised OverflowError
    # with a traceback computing the deadline; 721 made a deadline `dtrun extend` refuses.
    with pytest.raises(ExpiryError) as caught:
        expiry(ttlHours=hours)
    assert f"dtrun:ttlHours is {hours}" in caught.value.message
    assert "at most 720" in caught.value.fix
    assert caught.value.exit_code == 2


def test_the_longest_ttl_is_kept():
    assert expiry(ttlHours=24 * 30).ttl_hours == 720


@pytest.mark.parametrize(
    "past", ["2026-11-23T11:59:00Z", "2026-11-23T12:00:00Z", "2000-01-01T00:00Z"]
)
def test_a_deadline_already_past_is_refused_where_the_program_uses_it(past):
    with pytest.raises(ExpiryError) as caught:
        cluster_spec({"adminCidrs": ["203.0.113.4/32"], "expiresAt": past}, now=NOON)
    assert f"dtrun:expiresAt is {past}, which has passed" in caught.value.message
    assert caught.value.exit_code == 2


def test_a_deadline_ahead_is_kept_and_dtrun_up_may_replace_a_stale_one():
    later = {"adminCidrs": ["203.0.113.4/32"], "expiresAt": "2026-11-23T12:01:00Z"}
    assert cluster_spec(later, now=NOON).expiry.expires_at == "2026-11-23T12:01:00Z"
    # `dtrun up` and `extend` check the settings before writing a new deadline: no `now`.
    stale = {"adminCidrs": ["203.0.113.4/32"], "expiresAt": "2000-01-01T00:00:00Z"}
    assert cluster_spec(stale).expiry.expires_at == "2000-01-01T00:00:00Z"


@pytest.mark.parametrize("minutes", [43_201, 10**13])
def test_an_idle_rule_longer_than_30_days_is_refused(minutes):
    with pytest.raises(ExpiryError) as caught:
        expiry(idleMinutes=minutes)
    assert f"dtrun:idleMinutes is {minutes}, more than 30 days" in caught.value.message
    assert caught.value.exit_code == 2


def test_an_idle_rule_of_30_days_is_kept():
    assert expiry(idleMinutes=43_200).idle_minutes == 43_200
