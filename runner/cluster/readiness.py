"""Before every launch: every node reachable, registered (stack clusters) and, with --check,
healthy (GPU count, InfiniBand ports ACTIVE, Python with torch). A timeout names who is not.

Transport-free: the executor's ``command`` runs the scripts (locally or over SSH).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dtrun.azure.catalog import SIZES
from dtrun.errors import RunError, UsageError
from dtrun.execute import Answer
from dtrun.spec.cluster import Accelerator, Inventory, Node
from dtrun.spec.text import plural


class NotReadyError(RunError):
    """Some nodes did not become ready in time."""


class PortInUseError(UsageError):
    """A port the launch listens on is held by another program (often another run)."""


def check_ports_free(address: str, ports: Sequence[int]) -> None:
    """On this machine (the embedded cluster): the launch's ports can be listened on. Without
    this, a second run on the same --port fails inside torchrun with a rendezvous traceback."""
    import socket

    for port in ports:
        with socket.socket() as probe:
            # SO_REUSEADDR as the rendezvous store sets it: a port left in TIME_WAIT by the last
            # run is free; one another program listens on is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                raise PortInUseError(
                    f"port {port} on {address} is in use",
                    why=f"{exc.strerror}: another run or program listens there",
                    fix="pass another --port (the launch uses it and the port after it), or "
                    "wait for the other run to end",
                ) from None


@dataclass(frozen=True)
class Health:
    gpus: int
    ib_active: int
    ib_total: int
    torch: str  # "ok 2.13.0" or "failed <last line of the error>"
    bind: str | None = None  # embedded nodes: "ok" or "failed ADDRESS"


def check_script(inventory: Inventory, node: Node) -> str:
    from dtrun.render import render  # jinja2: not for the commands that never check a node

    embedded = inventory.ssh is None
    return render(
        "remote/check.sh.j2",
        {
            "python": f"{inventory.python_bin}/python",
            "bind_address": node.address if embedded else "",
        },
    )


def parse_health(output: str) -> Health:
    values: dict[str, str] = {}
    torch, bind = "failed (no answer)", None
    for line in output.splitlines():
        if line.startswith("dtrun-health "):
            values.update(part.partition("=")[::2] for part in line.split()[1:] if "=" in part)
        elif line.startswith("dtrun-torch "):
            torch = line.removeprefix("dtrun-torch ")
        elif line.startswith("dtrun-bind "):
            bind = line.removeprefix("dtrun-bind ")
    count = {key: int(values.get(key, "0")) for key in ("gpus", "ib_active", "ib_total")}
    return Health(count["gpus"], count["ib_active"], count["ib_total"], torch, bind)


def problems(inventory: Inventory, node: Node, health: Health) -> list[str]:
    """What is wrong with a node, judged against what its inventory and size promise."""
    found = []
    if inventory.accelerator is Accelerator.CUDA and health.gpus < node.slots:
        found.append(f"{health.gpus} of {node.slots} GPUs visible")
    size = SIZES.get(inventory.size or "")
    if size is not None and size.ib_ports and health.ib_active < size.ib_ports:
        found.append(f"{health.ib_active} of {size.ib_ports} InfiniBand ports ACTIVE")
    if not health.torch.startswith("ok"):
        found.append(f"torch does not import ({health.torch})")
    if health.bind is not None and not health.bind.startswith("ok"):
        found.append(f"cannot bind {node.address}")
    return found


@dataclass(frozen=True)
class Waiting:
    """One look at the nodes while waiting for them: who answered, who not yet, and why."""

    answered: tuple[str, ...]  # "node-0 (10.0.0.4)"
    missing: tuple[tuple[str, str], ...]  # ("node-1 (10.0.0.5)", why it did not answer)
    waited_s: float
    timeout_s: float

    def describe(self) -> str:
        total = len(self.answered) + len(self.missing)
        names = ", ".join(label for label, _ in self.missing)
        if not self.missing:
            return f"all {plural(total, 'node')} answered after {self.waited_s:.0f} s"
        return (
            f"waiting for nodes to answer: {len(self.answered)} of {total} answered, not yet "
            f"{names} ({self.waited_s:.0f} s of {self.timeout_s:.0f} s)"
        )


WaitSink = Callable[[Waiting], None]


def no_wait_sink(waiting: Waiting) -> None:
    """Hear nothing of the wait (the final error still names every node)."""


@dataclass(frozen=True)
class Patience:
    """How long to wait for nodes: ``timeout_s`` in all, a look every ``poll_s``, the last
    as late as it can still finish (``attempt_s``: its connect timeout) by the deadline."""

    timeout_s: float
    poll_s: float = 5.0
    attempt_s: float = 0.0
    option: str = "--ready-timeout"  # how the user gives more time


def wait_until_ready(
    command: Callable[[dict[str, str]], dict[str, Answer]],
    inventory: Inventory,
    nodes: Sequence[Node],
    *,
    check: bool,
    patience: Patience,
    on_wait: WaitSink = no_wait_sink,
    since: float | None = None,
) -> None:
    """Return once every node answers (and, with ``check``, is healthy), or NotReadyError
    naming every node that did not and why. ``on_wait`` hears each look that finds some
    node missing, and the last one once all have answered after a wait. ``since``: when dtrun
    first tried the nodes (time.monotonic(); the program check's look), which the patience
    counts from: else a dead node would get one attempt more than the user gave it."""
    scripts = {
        node.name: check_script(inventory, node) if check else "echo dtrun-ready" for node in nodes
    }
    started = time.monotonic() if since is None else since
    looked_before = False
    while True:
        answers = command(scripts)
        reasons: dict[str, str] = {}
        for node in nodes:
            answer = answers[node.name]
            if answer.error is not None:
                reasons[node.name] = answer.error
            elif check:
                found = problems(inventory, node, parse_health(answer.output))
                if found:
                    reasons[node.name] = ", ".join(found)
        waited = time.monotonic() - started
        label = {node.name: f"{node.name} ({node.address})" for node in nodes}
        waiting = Waiting(
            tuple(label[name] for name in scripts if name not in reasons),
            tuple((label[name], reasons[name]) for name in scripts if name in reasons),
            waited,
            patience.timeout_s,
        )
        if not reasons:
            if looked_before:
                on_wait(waiting)
            return
        # the latest a next look may start and still finish by the deadline
        left = patience.timeout_s - patience.attempt_s - waited
        if left <= 0:
            listed = "; ".join(f"{label}: {why}" for label, why in waiting.missing)
            raise NotReadyError(
                f"{len(reasons)} of {plural(len(nodes), 'node')} not ready within "
                f"{patience.option} {patience.timeout_s:g} s",
                why=listed,
                fix=f"fix those nodes (`dtrun exec` runs a command on every node), or wait "
                f"longer with {patience.option}",
            )
        on_wait(waiting)
        looked_before = True
        time.sleep(min(patience.poll_s, left))
