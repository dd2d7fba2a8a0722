"""Before a head-only launcher starts: can node 0 ssh to every node it will start ranks on?

mpirun, DeepSpeed over pdsh and horovodrun run on node 0 only and reach the other nodes with
their own ssh. When that ssh cannot log in, they fail after a while with their own words (or
wait for a prompt nobody answers). So before such a launch dtrun runs, on node 0, the ssh the
launcher will run, with the same options and BatchMode, to every node it reaches, and names the
nodes it cannot reach with ssh's own last line. Transport-free: the executor's ``command`` runs
the check script on node 0, as the readiness barrier does.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dtrun.errors import UsageError
from dtrun.execute import Answer
from dtrun.plan.launchers.base import node_ssh_options, ssh_port_option
from dtrun.plan.launchers.horovodrun import ssh_option_groups
from dtrun.render import render
from dtrun.spec.cluster import Inventory, Node, SshAccess
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.text import plural

Command = Callable[[dict[str, str]], dict[str, Answer]]

CONNECT_TIMEOUT_S = 10  # ssh's ConnectTimeout: a node that does not answer at all
TIMEOUT_S = 30  # the whole login, so a hung sshd cannot hang the check
BATCH = 32  # nodes checked at once from node 0


class PeerSshError(UsageError):
    """Node 0 cannot ssh to nodes that a head-only launcher starts ranks on."""


@dataclass(frozen=True)
class PeerSsh:
    """How a head-only launcher's ssh, on node 0, reaches the nodes."""

    options: tuple[str, ...]  # ssh's options, before the host
    to_head: bool = False  # it also logs into node 0 itself (pdsh does: every host of its list)


def _mpirun(ssh: SshAccess) -> PeerSsh:
    # --mca plm_rsh_args (runner/plan/launchers/mpirun.py); OpenMPI starts no daemon over ssh
    # on the node it runs on.
    return PeerSsh((*ssh_port_option(ssh), *node_ssh_options(ssh)))


def _deepspeed(ssh: SshAccess) -> PeerSsh:
    # PDSH_SSH_ARGS_APPEND (templates/launch/deepspeed.sh.j2), to which DeepSpeed appends
    # `-p PORT` from --ssh_port (deepspeed/launcher/multinode_runner.py, PDSHRunner).
    return PeerSsh((*node_ssh_options(ssh), *ssh_port_option(ssh)), to_head=True)


def _horovodrun(ssh: SshAccess) -> PeerSsh:
    # horovodrun's ssh is dtrun's horovod-ssh.sh, which runs OpenSSH with these options
    # (runner/plan/launchers/horovodrun.py), host keys checked.
    return PeerSsh(tuple(word for group in ssh_option_groups(ssh) for word in group))


# The launchers that start every other node's ranks over ssh from node 0.
PEER_SSH: dict[str, Callable[[SshAccess], PeerSsh]] = {
    "mpirun": _mpirun,
    "deepspeed": _deepspeed,
    "horovodrun": _horovodrun,
}


def peers(plan: LaunchPlan, reach: PeerSsh) -> tuple[Node, ...]:
    """The nodes the launcher logs into from node 0, in node-rank order."""
    head = plan.launches[0].node
    return tuple(node for node in plan.nodes if reach.to_head or node != head)


def check_script(plan: LaunchPlan, reach: PeerSsh) -> str:
    ranked = [(plan.nodes.index(node), node.address) for node in peers(plan, reach)]
    return render(
        "remote/peers.sh.j2",
        {
            "head": plan.launches[0].node.name,
            "launcher": plan.launcher,
            "options": reach.options,
            "timeout_s": TIMEOUT_S,
            "connect_timeout_s": CONNECT_TIMEOUT_S,
            "batch_size": BATCH,
            "batches": [ranked[i : i + BATCH] for i in range(0, len(ranked), BATCH)],
        },
    )


def unreachable(answer: Answer, plan: LaunchPlan, reach: PeerSsh) -> dict[str, str]:
    """Node name -> why node 0 cannot ssh to it, from the check script's answer."""
    wanted = [node.name for node in peers(plan, reach)]
    if answer.error is not None:
        return dict.fromkeys(wanted, f"not checked: {answer.error}")
    if "dtrun-peer-no-ssh" in answer.output.splitlines():
        return dict.fromkeys(wanted, f"ssh is not installed on {plan.launches[0].node.name}")
    said: dict[str, str] = {}  # node rank -> "ok" or "failed CODE LAST_LINE"
    for line in answer.output.splitlines():
        word, _, rest = line.partition(" ")
        if word == "dtrun-peer":
            rank, _, outcome = rest.partition(" ")
            said[rank] = outcome
    reasons = {}
    for index, node in enumerate(plan.nodes):
        outcome = said.get(str(index), "")
        if node.name in wanted and outcome != "ok":
            reasons[node.name] = _reason(outcome, answer.exit_code)
    return reasons


def _reason(outcome: str, exit_code: int | None) -> str:
    if not outcome.startswith("failed "):
        return f"no answer (the check ended with exit code {exit_code})"
    code, _, last_line = outcome.removeprefix("failed ").partition(" ")
    if code == "124":
        return f"no answer in {TIMEOUT_S} s"
    return last_line or f"ssh exited with {code}"


def check_peers(command: Command, inventory: Inventory, plan: LaunchPlan) -> None:
    """For a head-only launcher on an SSH cluster: node 0 reaches every node it starts ranks
    on with the launcher's ssh, or PeerSshError naming each node it cannot, and why."""
    make = PEER_SSH.get(plan.launcher)
    head_only = [launch.node_rank for launch in plan.launches] == [0]
    if inventory.ssh is None or make is None or not head_only:
        return  # no ssh between the nodes: every node runs its own script
    reach = make(inventory.ssh)
    wanted = peers(plan, reach)
    if not wanted:
        return
    head = plan.launches[0].node
    answer = command({head.name: check_script(plan, reach)})[head.name]
    reasons = unreachable(answer, plan, reach)
    if reasons:
        raise _error(plan, head, reach, wanted, reasons)


def _error(
    plan: LaunchPlan, head: Node, reach: PeerSsh, wanted: Sequence[Node], reasons: dict[str, str]
) -> PeerSshError:
    ssh = shlex.join(("ssh", "-o", "BatchMode=yes", *reach.options, "ADDRESS", "true"))
    listed = "; ".join(
        f"{node.name} ({node.address}): {reasons[node.name]}"
        for node in wanted
        if node.name in reasons
    )
    return PeerSshError(
        f"{head.name} cannot ssh to {len(reasons)} of {plural(len(wanted), 'node')} that "
        f"{plan.launcher} starts ranks on",
        why=listed,
        fix=f"make `{ssh}` work on {head.name} for those nodes ({head.name}'s key in their "
        f"authorized_keys, their host keys in {head.name}'s known_hosts), or use "
        "--launcher torchrun, which needs no ssh between the nodes",
    )
