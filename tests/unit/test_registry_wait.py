"""A stack's registry wait (runner/engines/ssh/registration.py) under a fake clock: the user's
--ready-timeout bounds it, looks included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dtrun.cluster.outputs import parse_outputs
from dtrun.cluster.readiness import NotReadyError
from dtrun.engines.ssh import registration
from tests.paths import TESTS


class _Session:
    """Answers every look at the registry with no node registered."""

    def call(self, coroutine: Any) -> list[Any]:
        return []


def test_the_last_look_at_a_stack_s_registry_is_at_its_timeout_not_past_it(monkeypatch):
    """--ready-timeout 25 with a look every 10 s: looks at 0, 10, 20 and 25 s (it slept on to
    30 s, past what the user gave)."""
    now = [1000.0]
    looks: list[float] = []
    monkeypatch.setattr("dtrun.engines.ssh.registration.time.monotonic", lambda: now[0])
    monkeypatch.setattr(
        "dtrun.engines.ssh.registration.time.sleep", lambda s: now.__setitem__(0, now[0] + s)
    )
    monkeypatch.setattr(registration, "read_registry", lambda session, outputs: None)
    recorded = json.loads(
        (TESTS / "data" / "outputs" / "v1-h100-azurefiles-generated-key.json").read_text()
    )
    outputs = parse_outputs(recorded, "outputs.json")

    def on_poll(registered: int, ready: int, wanted: int, waited: float) -> None:
        looks.append(waited)

    with pytest.raises(NotReadyError, match="not ready after 25 s"):
        registration.wait_for_registry(
            _Session(),  # type: ignore[arg-type]
            "dev",
            outputs,
            timeout_s=25,
            poll_s=10,
            on_poll=on_poll,
        )
    assert looks == [0.0, 10.0, 20.0, 25.0]
