"""Slurm as an inventory source: the allocation dtrun runs in, and its nodes (docs/slurm.md).

Inside an allocation (SLURM_JOB_ID set: under salloc, in an sbatch script) dtrun uses that
allocation's nodes and leaves the allocation as it found it. Outside one, it asks for a single
allocation of the sweep's largest node count (an sbatch job whose only work is to hold the
nodes), waits in the queue once, runs every point inside it (a point of n nodes on the first n),
and cancels it when the command ends, however it ends; killed outright, dtrun stops renewing
the job's lease and the job ends itself (runner/engines/slurm/lease.py).

Every Slurm command goes through a SlurmShell: here on a login node, or on a stack's head
over ssh. Only Slurm's documented output formats are read (sbatch --parsable, squeue -o,
sinfo -o, scontrol show hostnames).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence

from dtrun.cluster.names import host_problem
from dtrun.engines.slurm.lease import COMMENT, hold_script
from dtrun.engines.slurm.shell import (
    LIVE,
    NEVER_RUNS,
    POLL_S,
    SlurmShell,
    job_state,
    never_runs,
    site_failure,
)
from dtrun.errors import InventoryError, RunError, UsageError
from dtrun.redact import redact_cuts
from dtrun.spec.cluster import Accelerator, Inventory, Node, Starter
from dtrun.spec.slurmrequest import SlurmRequest
from dtrun.spec.text import noun, plural

# A node name dtrun puts in file names and scripts; Slurm's own names are of this shape.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class QueueTimeoutError(RunError):
    """dtrun's allocation waited in the queue past --queue-timeout; it was cancelled."""


def allocation_request(request: SlurmRequest, nodes: int, name: str) -> list[str]:
    """The sbatch line dtrun submits: N whole nodes held by a job that only waits, so that
    every point of the sweep runs on the same nodes after one wait in the queue; it ends
    itself when dtrun stops renewing its lease (runner/engines/slurm/lease.py)."""
    return [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        "--exclusive",  # nobody else's work on the nodes while they are measured
        "--no-kill",  # a node lost ends its step, not the job: a check goes on without it
        "--output=/dev/null",
        f"--comment={COMMENT}0",
        *(f"{flag}={value}" for flag, value in request.passed_through()),
        f"--wrap={hold_script(request.lease_s)}",
    ]


PendingSink = Callable[[str, str, float, float], None]  # job id, Slurm's reason, waited, timeout


def submit(shell: SlurmShell, request: SlurmRequest, nodes: int, name: str) -> str:
    """Submit the allocation request; its job id. A request Slurm refuses is bad input."""
    argv = allocation_request(request, nodes, name)
    done = shell.run(argv)
    if done.returncode != 0:
        down = site_failure(done.stderr)
        if down is not None:
            raise down
        said = " ".join(line.strip() for line in redact_cuts(done.stderr).strip().splitlines())
        raise UsageError(
            f"Slurm refused dtrun's request for {plural(nodes, 'node')}",
            why=said or f"sbatch exited {done.returncode}",
            fix="check that Slurm answers here (`scontrol ping`), then --partition, --account, "
            "--qos, --time, --constraint, --nodelist and --exclude against `sinfo` and "
            "`sacctmgr show assoc user=$USER`",
        )
    job_id = done.stdout.strip().split(";")[0]  # --parsable: JOBID[;CLUSTER]
    if not job_id.isdigit():
        raise InventoryError(f"sbatch answered {done.stdout.strip()!r}, not a job id")
    return job_id


def wait_running(
    shell: SlurmShell,
    job_id: str,
    *,
    timeout_s: float,
    on_pending: PendingSink,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Wait until the job runs; its node list. Past ``timeout_s`` a QueueTimeoutError says
    Slurm's last reason (the caller cancels the job)."""
    started = clock()
    while True:
        seen = job_state(shell, job_id)
        waited = clock() - started
        if seen is None or seen[0] not in LIVE:
            state = seen[0] if seen else "gone"
            raise RunError(
                f"Slurm job {job_id} ended before it started ({state})",
                why=seen[1] if seen and seen[1] not in ("", "None") else "see `scontrol show job`",
                fix=f"ask Slurm why (`sacct -j {job_id}`), then run again",
            )
        state, reason, nodelist = seen
        if state == "RUNNING":
            return nodelist
        if reason in NEVER_RUNS:
            raise never_runs(job_id, reason)
        on_pending(job_id, reason, waited, timeout_s)
        if waited >= timeout_s:
            raise QueueTimeoutError(
                f"Slurm job {job_id} waited {waited:.0f} s in the queue and did not start",
                why=f"Slurm's reason: {reason} (squeue -j {job_id}); dtrun cancelled it",
                fix="raise --queue-timeout, ask for fewer nodes, or another --partition",
            )
        # quick looks first (a free cluster starts a job within a second), then every POLL_S
        time.sleep(min(POLL_S, 0.05 + waited / 10))


def hostnames(shell: SlurmShell, nodelist: str) -> tuple[str, ...]:
    """Slurm's compressed node list (gpu[01-04]) as names, by `scontrol show hostnames`."""
    return _usable(shell.check(["scontrol", "show", "hostnames", nodelist], "expand").split())


def _usable(names: Sequence[str]) -> tuple[str, ...]:
    """Slurm's node names, each checked before it names a file or lands in a script."""
    for name in names:
        if not _NODE_NAME.fullmatch(name):
            raise InventoryError(
                f"Slurm node name {name!r} is not one dtrun can use",
                why="dtrun names log files and scripts after nodes: letters, digits, . _ -",
            )
    return tuple(names)


def gpus_of(gres: str) -> int:
    """GPUs in sinfo's %G, e.g. gpu:8, gpu:a100:4(S:0-1),gpu:t4:2 or (null)."""
    count = 0
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            count += int(parts[-1])
    return count


def slurm_nodes(shell: SlurmShell, names: Sequence[str]) -> tuple[tuple[Node, ...], int]:
    """Each named node with its address (NodeAddr), CPUs and GPUs (its slots), in the order
    named; and the fewest GPUs any of them has (0: CPU nodes)."""
    out = shell.check(
        ["sinfo", "-N", "-h", "-n", ",".join(names), "-o", "%N|%o|%c|%G"], "describe the nodes"
    )
    found: dict[str, Node] = {}
    gpus_found: dict[str, int] = {}
    for line in out.splitlines():
        name, address, cpus, gres = [*line.split("|"), "", "", ""][:4]
        gpus = gpus_found.setdefault(name, gpus_of(gres))
        found.setdefault(
            name,
            Node(
                name=name,
                address=address or name,
                slots=gpus or 1,
                cpus=int(cpus) if cpus.isdigit() else 1,
            ),
        )
    missing = [name for name in names if name not in found]
    if missing:
        raise InventoryError(
            f"sinfo does not describe {noun(len(missing), 'node')} {', '.join(missing)}"
        )
    for node in found.values():
        problem = host_problem(node.address)
        if problem:
            raise InventoryError(
                f"Slurm gives node {node.name} the address {node.address!r}, which {problem}",
                why="dtrun places a node's address in its launch script and the rendezvous",
                fix="correct the node's NodeAddr in slurm.conf (scontrol show node NAME)",
            )
    return tuple(found[name] for name in names), min(gpus_found[name] for name in names)


def cpus_per_node(value: str, count: int) -> tuple[int, ...] | None:
    """SLURM_JOB_CPUS_PER_NODE (72(x2),36: CPUs the job has on each node, in node order) as
    one count per node; None when it is absent or does not cover ``count`` nodes."""
    counts: list[int] = []
    for item in filter(None, value.replace(" ", "").split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item)
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return tuple(counts) if len(counts) == count else None


def check_partition_size(
    shell: SlurmShell, request: SlurmRequest, count: int, counted_by: tuple[str, str]
) -> None:
    """Refuse, before asking Slurm for anything, more nodes than the partition holds (Slurm
    would take the job and hold it pending forever, reason PartitionConfig). ``counted_by``:
    what set ``count``, as the message names it, and the option that changes it."""
    if request.nodelist is not None:
        return  # Slurm judges a list of named nodes itself (sbatch refuses an unknown one)
    rows = shell.check(["sinfo", "-N", "-h", "-o", "%N|%P"], "list the nodes").splitlines()
    partitions: dict[str, list[str]] = {}
    for row in rows:
        name, _, partition = row.partition("|")
        partitions.setdefault(partition, [])
        if name not in partitions[partition]:
            partitions[partition].append(name)
    default = next((p for p in partitions if p.endswith("*")), None)
    key = default if request.partition is None else request.partition
    if key is None or key not in partitions:
        return  # an unknown partition: sbatch refuses it with its own words
    excluded = set(hostnames(shell, request.exclude)) if request.exclude else set()
    usable = [name for name in partitions[key] if name not in excluded]
    if count <= len(usable):
        return
    label = key.rstrip("*")
    what, option = counted_by
    raise UsageError(
        f"dtrun needs {plural(count, 'node')} ({what}) and Slurm partition "
        f"{label} has "
        f"{len(usable)}" + (" outside --exclude" if excluded else ""),
        why=f"its nodes: {', '.join(usable) or 'none'} (sinfo -p {label})",
        fix=f"ask for at most {plural(len(usable), 'node')} with {option}, or pass --partition "
        "naming a larger partition (`sinfo -s` lists them)",
    )


def candidate_nodes(shell: SlurmShell, request: SlurmRequest) -> tuple[str, ...]:
    """For a dry run outside an allocation: the nodes such a request could be given, in
    Slurm's order (the ones Slurm grants may differ)."""
    if request.nodelist is not None:
        return hostnames(shell, request.nodelist)
    command = ["sinfo", "-N", "-h", "-o", "%N"]
    if request.partition is not None:
        command += ["-p", request.partition]
    names = list(dict.fromkeys(_usable(shell.check(command, "list the nodes").split())))
    if not names:
        where = f"partition {request.partition!r}" if request.partition else "any partition"
        raise UsageError(
            f"Slurm lists no node in {where}",
            why=f"`{shlex.join(command)}` printed nothing",
            fix="pass --partition naming a partition `sinfo -s` lists",
        )
    excluded = set(hostnames(shell, request.exclude)) if request.exclude else set()
    return tuple(name for name in names if name not in excluded)


def slurm_inventory(
    job: str, nodes: tuple[Node, ...], *, gpus: int, python_bin: str, code_dir: str
) -> Inventory:
    """The allocation's nodes, with ``gpus`` each (0: CPU nodes). They run this machine's
    Python and checkout, at the same paths (Slurm's nodes share the login node's file
    systems: docs/slurm.md)."""
    loopback = all(node.address.startswith("127.") for node in nodes)
    return Inventory(
        source=job,
        nodes=nodes,
        python_bin=python_bin,
        code_dir=code_dir,
        accelerator=Accelerator.CUDA if gpus else Accelerator.CPU,
        ssh=None,  # Slurm starts every process: no ssh between nodes
        interface="lo" if loopback else "eth0",
        starter=Starter.SRUN,
    )


def inside_allocation(environ: Mapping[str, str] | None = None) -> str | None:
    """The job id of the allocation dtrun runs inside (salloc, sbatch), if any."""
    job = (os.environ if environ is None else environ).get("SLURM_JOB_ID", "").strip()
    return job or None


def running_allocation(shell: SlurmShell, job: str) -> str:
    """The node list of the allocation SLURM_JOB_ID names, which must be running. A shell
    that outlived its allocation (a tmux or screen started under salloc) still has its
    SLURM_* variables: it is refused here, before anything is written or started."""
    seen = job_state(shell, job)
    if seen is not None and seen[0] == "RUNNING":
        return seen[2]
    state = "not listed by squeue" if seen is None else f"{seen[0]}, not RUNNING"
    raise UsageError(
        f"this shell's SLURM_JOB_ID is {job!r}, and that Slurm job is {state}",
        why="dtrun runs inside the allocation SLURM_JOB_ID names; a shell that outlived its "
        "allocation (tmux or screen started under salloc) keeps the variable",
        fix="run dtrun inside a running allocation (salloc, sbatch), or `unset SLURM_JOB_ID "
        "SLURM_JOB_NODELIST` for dtrun to ask Slurm for one",
    )
