"""Open a Slurm cluster for one command: find or ask for the allocation, read its nodes, and
cancel what dtrun asked for when the command ends, however it ends (docs/slurm.md)."""

from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.engines.base import Cluster
from dtrun.engines.common.code import node_python, this_checkout, this_python
from dtrun.engines.common.signals import sigint_deferred
from dtrun.engines.slurm.allocation import (
    allocation_request,
    candidate_nodes,
    check_partition_size,
    cpus_per_node,
    hostnames,
    inside_allocation,
    running_allocation,
    slurm_inventory,
    slurm_nodes,
    submit,
    wait_running,
)
from dtrun.engines.slurm.executor import SlurmExecutor
from dtrun.engines.slurm.fault import job_end
from dtrun.engines.slurm.lease import Lease
from dtrun.engines.slurm.options import request_of
from dtrun.engines.slurm.shell import LIVE, SlurmShell, cancel
from dtrun.engines.slurm.stage import HeadStaging, head_shell
from dtrun.errors import DtrunError, RunInterruptedError, UsageError, interruption
from dtrun.spec.cluster import Inventory, Node
from dtrun.spec.text import plural

if TYPE_CHECKING:
    from dtrun.cluster.outputs import StackOutputs
    from dtrun.engines.base import ClusterChoice, Engine
    from dtrun.spec.slurmrequest import SlurmRequest

Notice = Callable[[str], None]
PENDING_EVERY_S = 30.0  # a job still pending for the same reason is mentioned this often


@dataclass(frozen=True)
class Head:
    """A stack's own Slurm, reached through its head VM (outputs version 2)."""

    shell: SlurmShell
    staging: HeadStaging
    python_bin: str  # the cluster's Python environment on the shared storage
    partition: str | None
    size: str


@contextlib.contextmanager
def stack_head(name: str, outputs: StackOutputs) -> Iterator[Head]:
    """The head's shell (ssh with the stack's key and host keys) for the command's length."""
    if outputs.scheduler != "slurm":
        raise UsageError(
            f"stack {name} has no Slurm (dtrun:scheduler is {outputs.scheduler})",
            fix=f"`pulumi config set dtrun:scheduler slurm --stack {name}` and `dtrun up`, or "
            "leave out --slurm",
        )
    with tempfile.TemporaryDirectory(prefix="dtrun-head-") as private:
        shell = head_shell(
            outputs.head_public_address, outputs.ssh_user, outputs.ssh_port,
            outputs.known_hosts, outputs.ssh_private_key, Path(private),
        )  # fmt: skip
        mount = outputs.mount_path
        staging = HeadStaging(shell, mount, f"{mount}/.dtrun/code")
        yield Head(shell, staging, outputs.python_bin, outputs.slurm_partition, outputs.vm_size)


def _inventory(source: str, nodes: tuple[Node, ...], gpus: int, head: Head | None) -> Inventory:
    if head is None:
        return slurm_inventory(  # this interpreter and checkout, at the same paths there
            source, nodes, gpus=gpus, python_bin=this_python(), code_dir=this_checkout()
        )
    inventory = slurm_inventory(
        source, nodes, gpus=gpus, python_bin=head.python_bin, code_dir=head.staging.code_dir
    )
    return replace(inventory, shared_dir=head.staging.shared_dir, size=head.size)


def _cluster(
    engine: Engine,
    choice: ClusterChoice,
    shell: SlurmShell,
    job: str,
    inventory: Inventory,
    head: Head | None,
) -> Cluster:
    gpus = min(node.slots for node in inventory.nodes) if inventory.accelerator == "cuda" else 0
    staging = head.staging if head is not None else None
    # each node's script under the reaper: the nodes' python, dtrun's code as staged there
    reaper = node_python(inventory.python_bin, inventory.code_dir)
    executor = SlurmExecutor(shell, job, gpus_per_node=gpus, staging=staging, reaper=reaper)
    return Cluster(inventory, executor, choice, engine)


def pending_notice(notice: Notice) -> Callable[[str, str, float, float], None]:
    """Say why the job waits when Slurm's reason changes, and every 30 s while it does not."""
    last_reason, said_at = "", 0.0

    def heard(job: str, reason: str, waited: float, timeout: float) -> None:
        nonlocal last_reason, said_at
        if reason in ("None", "") and waited < PENDING_EVERY_S:
            return  # just submitted: Slurm has not looked at it yet
        if reason != last_reason or waited - said_at >= PENDING_EVERY_S:
            notice(
                f"Slurm job {job} is pending ({reason}): {waited:.0f} s of --queue-timeout "
                f"{timeout:g} s"
            )
            last_reason, said_at = reason, waited

    return heard


@contextlib.contextmanager
def open_slurm(
    engine: Engine, choice: ClusterChoice, notice: Notice, head: Head | None = None
) -> Iterator[Cluster]:
    request = request_of(choice)
    shell = head.shell if head is not None else SlurmShell()
    if head is not None and request.partition is None:
        request = replace(request, partition=head.partition)  # the stack's one partition
    job = inside_allocation() if head is None else None  # a stack's Slurm: never this shell's
    if job is not None:
        if request.passed_through():
            given = ", ".join(flag for flag, _ in request.passed_through())
            notice(f"inside Slurm job {job}: its nodes are used, and {given} do not apply")
        listed = running_allocation(shell, job)  # a stale SLURM_JOB_ID is refused here
        nodelist = os.environ.get("SLURM_JOB_NODELIST") or listed
        names = hostnames(shell, nodelist)
        notice(f"inside Slurm job {job}: {plural(len(names), 'node')}, {','.join(names)}")
        nodes, gpus = slurm_nodes(shell, names)
        # the job's own share of each node: all of it only when the allocation is exclusive
        cpus = cpus_per_node(os.environ.get("SLURM_JOB_CPUS_PER_NODE", ""), len(nodes))
        if cpus is not None:
            nodes = tuple(replace(node, cpus=n) for node, n in zip(nodes, cpus, strict=True))
        yield _cluster(
            engine, choice, shell, job, _inventory(f"slurm:job {job}", nodes, gpus, head), head
        )
        return
    count = choice.local_nodes
    check_partition_size(shell, request, count, choice.local_nodes_by)
    if choice.dry_run:
        names = candidate_nodes(shell, request)[:count]
        nodes, gpus = slurm_nodes(shell, names)
        inventory = _inventory("slurm:dry run (nodes as sinfo lists them)", nodes, gpus, head)
        yield _cluster(engine, choice, shell, "JOBID", inventory, head)
        return
    with asked_for(shell, request, count, choice.job_name, notice) as job:
        # renewed while dtrun lives; if it is killed outright, the job ends itself
        lease = Lease(shell, job, request.lease_s, notice) if request.lease_s else None
        with lease or contextlib.nullcontext():
            nodelist = wait_running(
                shell, job, timeout_s=request.queue_timeout_s, on_pending=pending_notice(notice)
            )
            names = hostnames(shell, nodelist)
            notice(f"Slurm job {job} runs on {plural(len(names), 'node')}: {','.join(names)}")
            nodes, gpus = slurm_nodes(shell, names)
            inventory = _inventory(f"slurm:job {job}", nodes, gpus, head)
            yield _cluster(engine, choice, shell, job, inventory, head)


@contextlib.contextmanager
def asked_for(
    shell: SlurmShell, request: SlurmRequest, count: int, name: str, notice: Notice
) -> Iterator[str]:
    """The job dtrun submits, cancelled when the block ends, however it ends. A Ctrl-C or
    SIGTERM while sbatch runs waits for its answer: the controller may have taken the job, and
    dtrun cancels only a job whose id it has."""
    with contextlib.ExitStack() as ends:
        with sigint_deferred():  # a stop held back arrives at the end, with the cancel set
            job = submit(shell, request, count, name)
            ends.callback(_end_job, shell, job, notice)
            notice(
                f"Slurm job {job} asks for {plural(count, 'node')}; scancel {job} is run when "
                "dtrun ends"
            )
        yield job


def _end_job(shell: SlurmShell, job: str, notice: Notice) -> None:
    """Cancel the job, unless it has ended; a stop (Ctrl-C, SIGTERM) meanwhile comes after.
    A job COMPLETING had already ended (dtrun had not cancelled it: a scancel from outside,
    its time limit, its lease): its final state is said once Slurm has it."""
    with sigint_deferred(replay=False) as stops:
        try:
            ended = job_end(shell, job, wait_s=0)[0]
            if ended in LIVE or not ended:  # not listed: cancelled anyway, in case squeue erred
                cancel(shell, job)  # a COMPLETING job: waits until it has left
            if ended == "COMPLETING":
                ended = job_end(shell, job, wait_s=0)[0] or "COMPLETING, then gone from squeue"
        except DtrunError as error:
            if not stops:
                raise
            # stopped while the cancel went unconfirmed: the stop is the exit code (143), and
            # the message keeps what is left to do
            raise RunInterruptedError(
                f"{interruption()} while dtrun cancelled Slurm job {job}",
                why=error.what + (f": {error.why}" if error.why else ""),
                fix=error.fix,
            ) from None
    if ended in LIVE or not ended:
        notice(f"Slurm job {job} cancelled; squeue no longer lists it")
    else:  # a scancel from outside, its time limit, a node failure: not dtrun's doing
        notice(f"Slurm job {job} had already ended ({ended})")
    if stops:
        raise KeyboardInterrupt  # the stop held back, now that the job has ended


def allocation_line(choice: ClusterChoice) -> str:
    """The allocation request a dry run prints."""
    job = inside_allocation()
    if job is not None:
        return f"# the allocation: the Slurm job this runs inside ({job}); none is asked for"
    return shlex.join(allocation_request(request_of(choice), choice.local_nodes, choice.job_name))
