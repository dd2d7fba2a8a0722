"""A stack cluster's nodes, as they registered on the shared storage (read through the head)."""

from __future__ import annotations

import time

from dtrun.cluster.outputs import (
    OutputsError,
    RegistryEntry,
    StackOutputs,
    inventory_from_stack,
    parse_registry_entry,
)
from dtrun.cluster.readiness import NotReadyError
from dtrun.engines.base import RegistryPoll
from dtrun.engines.ssh.session import SshSession
from dtrun.record.readback import NotReadable, parse_json
from dtrun.spec.cluster import Inventory
from dtrun.spec.text import plural


def no_poll(registered: int, ready: int, wanted: int, waited: float) -> None:
    pass


async def read_registry(session: SshSession, outputs: StackOutputs) -> list[RegistryEntry]:
    head = await session.head()
    entries = []
    async with head.start_sftp_client() as sftp:
        if not await sftp.exists(outputs.registry_path):
            return []
        for name in sorted(await sftp.listdir(outputs.registry_path)):
            if not name.endswith(".json"):
                continue  # e.g. a .partial being written
            path = f"{outputs.registry_path}/{name}"
            async with sftp.open(path) as file:
                text = await file.read()
            try:  # every key once, numbers of a sane size, as any record dtrun reads back
                data = parse_json(text)
            except NotReadable as exc:
                raise OutputsError(
                    f"{path} on the head node is not a dtrun node registry entry",
                    why=f"it is not JSON as a node writes it ({exc})",
                ) from None
            if not isinstance(data, dict):
                raise OutputsError(
                    f"{path} on the head node is not a dtrun node registry entry",
                    why=f"it holds a JSON {type(data).__name__}, not an object",
                )
            entries.append(parse_registry_entry(data, path))
    return entries


def wait_for_registry(
    session: SshSession,
    stack: str,
    outputs: StackOutputs,
    *,
    timeout_s: float,
    poll_s: float = 10.0,
    on_poll: RegistryPoll = no_poll,
) -> Inventory:
    """The stack's inventory once all its nodes registered ready, or NotReadyError naming
    the ones that did not. ``on_poll`` hears the count after every look (a progress bar)."""
    started = time.monotonic()
    while True:
        nodes = [e for e in session.call(read_registry(session, outputs)) if e.role == "node"]
        ready = [entry for entry in nodes if entry.ready]
        waited = time.monotonic() - started
        on_poll(len(nodes), min(len(ready), outputs.node_count), outputs.node_count, waited)
        if len(ready) >= outputs.node_count:
            return inventory_from_stack(stack, outputs, ready)
        if waited >= timeout_s:
            reasons = [
                f"{e.hostname}: infiniband {e.infiniband}, python {e.python}"
                for e in nodes
                if not e.ready
            ]
            missing = outputs.node_count - len(nodes)
            if missing > 0:
                reasons.append(f"{plural(missing, 'node')} not registered yet")
            raise NotReadyError(
                f"{outputs.node_count - len(ready)} of {plural(outputs.node_count, 'node')} of "
                "stack "
                f"{stack} not ready after {waited:.0f} s",
                why="; ".join(reasons),
                fix=f"read the nodes' /var/log/dtrun-bootstrap.log (`dtrun exec --stack {stack} "
                "-- tail /var/log/dtrun-bootstrap.log`), or wait longer with --ready-timeout",
            )
        time.sleep(min(poll_s, timeout_s - waited))  # the last look at the deadline, not past
