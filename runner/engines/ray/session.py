"""The sweep's connection to a Ray cluster: one ``ray.init`` (one Ray job) for every launch of
the command, and the nodes it has, as dtrun's inventory (docs/ray.md).

dtrun is the job's driver. Ray ties what a job made to it: when the driver ends, however it
ends, Ray kills the job's actors and removes its placement groups (the guard of each node's
script, runner/engines/ray/node.py, then ends the script).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import signal
import socket
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from dtrun.cluster.names import host_problem
from dtrun.engines.common.threads import DaemonThreads
from dtrun.errors import InventoryError, SiteError, UsageError
from dtrun.execute import result_of
from dtrun.spec.cluster import Accelerator, Inventory, Node, Starter

ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9.\-]*):(?P<port>\d{1,5})")
CONNECT_S = 10.0  # how long the head may take to accept a connection
NAMESPACE = "dtrun"


def parse_address(address: str) -> tuple[str, int]:
    found = ADDRESS.fullmatch(address)
    if found is None or not 0 < int(found["port"]) < 65536:
        raise UsageError(
            f"--ray {address!r} is not a Ray head's address",
            fix="pass HOST:PORT, the address `ray start --head` printed (its port: 6379 by "
            "default)",
        )
    return found["host"], int(found["port"])


def reachable(address: str) -> None:
    """The head accepts a connection within CONNECT_S: before ray.init, which retries for a
    minute and then says only that it timed out."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_S):
            return
    except OSError as error:  # the cluster, not the flag's form: exit 1, as an SSH node's
        raise SiteError(
            f"cannot connect to the Ray cluster at {address}",
            why=error.strerror or str(error),
            fix="start it (`ray start --head --port PORT`), or pass --ray with its head's "
            "HOST:PORT",
        ) from None


def quiet_cluster_errors() -> None:
    """Ray's driver prints the cluster's error messages to stdout (a lost raylet: its last 20
    log lines), where `dtrun check --json` writes its JSON; dtrun names a lost node itself,
    with Ray's reason. They go to dtrun's debug log instead (``print_to_stdstream``, looked up
    by name by the driver's ``listen_error_messages`` thread, ray/_private/worker.py, Ray 2.60;
    with ``log_to_driver=False`` nothing else calls it)."""
    from ray._private import worker

    def keep(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", []):
            logging.getLogger("dtrun.ray").debug("Ray said: %s", line)

    worker.print_to_stdstream = keep


# a terminal's colour codes: Ray colours a task error's first line (colorama)
_COLOURS = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def said(error: BaseException) -> str:
    """Ray's reason, in one line, without its traceback or colours; for a method of the actor
    that raised (Ray's RayTaskError), the exception it raised, not Ray's header line."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException) and cause is not error:
        inner, kind = said(cause), type(cause).__name__
        return (inner if inner == kind else f"{kind}: {inner}")[:400]
    text = _COLOURS.sub("", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = next((line for line in lines if "died" in line or "lost" in line.lower()), "")
    return (text or (lines[0] if lines else type(error).__name__))[:400]


def need_ray() -> Any:
    """Ray, or exit 2 naming dtrun's ray extra (as runner/extras.py says the others)."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            "--ray needs Ray, which this Python cannot import",
            why=f"Ray comes with dtrun's ray extra ({exc})",
            fix="pip install 'dtrun[ray]' (pipx: pipx install --force 'dtrun[ray]'; a checkout: "
            "./dev setup), then run the command again",
        ) from None
    return ray


class RaySession:
    """One Ray job for the command: ``open`` connects, ``close`` disconnects."""

    def __init__(self, address: str, run_id: str = "") -> None:
        self.address, self.run_id = address, run_id
        self.ray: Any = None
        self.job_id = ""
        self.trained = False  # a TorchTrainer ran: Ray Train may have left detached actors
        self.closing: Future[None] | None = None  # close_soon's

    def open(self) -> None:
        ray = need_ray()
        reachable(self.address)
        # ray.init sets a SIGTERM handler of its own (sys.exit): dtrun's stops a launch first
        term = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(
                address=self.address,
                namespace=NAMESPACE,
                log_to_driver=False,  # each node's output comes through its actor
                logging_level=logging.WARNING,
                job_config=ray.job_config.JobConfig(metadata={"dtrun": self.run_id or "dtrun"}),
            )
        except Exception as exc:  # a version mismatch, a head that is not Ray's, ...
            raise SiteError(
                f"cannot join the Ray cluster at {self.address}",
                why=str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                fix="run dtrun on a machine of the cluster, with the cluster's Ray version",
            ) from None
        finally:
            if callable(term) or term in (signal.SIG_DFL, signal.SIG_IGN):
                signal.signal(signal.SIGTERM, term)
        self.ray = ray
        self.job_id = ray.get_runtime_context().get_job_id()
        quiet_cluster_errors()

    def close_soon(self) -> None:
        """close() in a thread of its own, once nothing more is asked of the cluster: Ray's
        disconnect (about 0.3 s, most of it joining the driver's listener threads) runs while
        dtrun writes the report. close() waits for it. A daemon thread (DaemonThreads): a
        disconnect that never ends (a head that stopped answering) must not hold dtrun at its
        exit, once a stop has ended the wait."""
        if self.ray is not None and self.closing is None:
            thread = DaemonThreads(1, name="dtrun-ray-close")
            self.closing = thread.submit(self._close)
            thread.shutdown(wait=False)

    def close(self) -> None:
        """The job ends (module docstring); after close_soon, once its thread is done."""
        if self.closing is not None:
            result_of(self.closing)
        else:
            self._close()

    def _close(self) -> None:
        """Ray kills whatever actor or placement group of the job is left, and dtrun the
        detached actors its job made (Ray Train's AutoscalingCoordinator, which Ray keeps past
        the job; looked up only after a TorchTrainer ran: 0.1-0.3 s of GCS queries)."""
        if self.ray is not None:
            with contextlib.suppress(Exception):  # what cannot be asked is not left by us
                if self.trained:
                    self.kill_detached()
            self.ray.shutdown()
            self.ray = None

    def kill_detached(self) -> None:
        from ray._private import state  # the GCS's actor table, by job (no dashboard needed)

        ray = self.ray
        job = ray.JobID.from_hex(self.job_id)
        ours = {a["Name"] for a in state.actors(job_id=job).values()
                if a["State"] != "DEAD" and a["IsDetached"] and a["Name"]}  # fmt: skip
        for named in ray.util.list_named_actors(all_namespaces=True):  # the table has no namespace
            if named["name"] in ours:
                handle = ray.get_actor(named["name"], namespace=named["namespace"])
                ray.kill(handle, no_restart=True)

    def alive(self) -> list[dict[str, Any]]:
        """The cluster's live nodes that can run a node's script (one CPU at least)."""
        assert self.ray is not None
        return [
            node
            for node in self.ray.nodes()
            if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) >= 1
        ]


def _order(address: str) -> tuple[int, str]:
    try:
        return int(ipaddress.ip_address(address)), address
    except ValueError:
        return 0, address


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def ray_inventory(address: str, nodes: list[dict[str, Any]]) -> Inventory:
    """The cluster's nodes by address, ``ray-0``, ``ray-1``, ...: a launch pins node R's bundle
    to its address (Ray's ``node:ADDRESS`` resource), so two raylets on one address are
    refused."""
    import dtrun

    addresses = sorted((str(node["NodeManagerAddress"]) for node in nodes), key=_order)
    if not addresses:
        raise InventoryError(
            f"the Ray cluster at {address} has no node with a CPU to run on",
            fix="start its nodes with `ray start --address HEAD:PORT` (--num-cpus 1 or more)",
        )
    for host in addresses:  # Ray's answer lands in scripts and the rendezvous (docs/security.md)
        if problem := host_problem(host):
            raise InventoryError(
                f"the Ray cluster at {address} gives a node the address {host!r}, which {problem}",
                why="dtrun places a node's address in its launch script and the rendezvous",
                fix="start that raylet with --node-ip-address set to its IP address",
            )
    twice = sorted({a for a in addresses if addresses.count(a) > 1})
    if twice:
        raise InventoryError(
            f"the Ray cluster at {address} has two nodes on {twice[0]}",
            why="dtrun places each node's bundle by its address",
            fix="start each raylet with its own --node-ip-address",
        )
    cpus = {str(node["NodeManagerAddress"]): int(node["Resources"]["CPU"]) for node in nodes}
    return Inventory(
        source=f"ray:{address}",
        nodes=tuple(
            Node(name=f"ray-{i}", address=host, slots=1, cpus=cpus[host])
            for i, host in enumerate(addresses)
        ),
        python_bin=str(Path(sys.executable).parent),
        code_dir=str(Path(dtrun.__file__).resolve().parent.parent),
        accelerator=Accelerator.CPU,
        interface="lo" if all(_loopback(a) for a in addresses) else "eth0",
        starter=Starter.TASKS,  # an actor (or Ray Train worker) per node, the launcher inside
    )
