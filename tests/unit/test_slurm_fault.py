"""How dtrun tells a node Slurm lost (runner/engines/slurm/fault.py) from what Slurm's commands
answer, under the --no-kill allocation (runner/engines/slurm/allocation.py): fake answers."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from dtrun.engines.slurm.fault import Heard, NodeLostError, ended_by_slurm
from dtrun.engines.slurm.shell import SlurmShell
from dtrun.spec.outcome import NodeResult


@dataclass(frozen=True)
class _Slurm(SlurmShell):
    """squeue, scontrol and sinfo as Slurm answers them: the job running on ``held``, every
    node up (``idle``: back in service, as ReturnToService brings a lost node back)."""

    held: str = "n1"

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        if command[0] == "squeue":
            out = f"RUNNING|1:00:00|{self.held}\n"
        elif command[:3] == ["scontrol", "show", "hostnames"]:
            out = "\n".join(self.held.split(",")) + "\n"
        else:  # sinfo
            out = "n1|allocated|none\nn2|idle|none\n"
        return subprocess.CompletedProcess(list(command), 0, out, "")


def _results(*codes: tuple[str, int | None]) -> tuple[NodeResult, ...]:
    return tuple(
        NodeResult(node, f"127.0.0.{i}", code, f"{node}.log", 0.0)
        for i, (node, code) in enumerate(codes)
    )


def test_a_node_the_job_no_longer_holds_was_lost_though_it_is_back_in_service():
    """n2 lost while the 1-node point ran on n1: under --no-kill Slurm took it out of the job,
    then returned it to service (ReturnToService=2). The 2-node point's srun said only "Only
    allocated 1 nodes asked for 2" (read as "srun did not run the launch"): the job's own node
    list says n2 left it."""
    error = ended_by_slurm(_Slurm(held="n1"), "1", Heard(), _results(("n1", None), ("n2", None)))
    assert isinstance(error, NodeLostError), error
    assert error.what.startswith("Slurm lost node n2 (node failure)")
    assert error.lost_node == "n2"
    assert "Slurm job 1 no longer holds n2" in error.why
    ended = {r.node: r.cause for r in error.node_results}
    assert ended == {"n1": None, "n2": "node failure (Slurm)"}


def test_a_step_srun_could_not_start_on_nodes_the_job_still_holds_is_no_node_lost():
    assert ended_by_slurm(_Slurm(held="n1,n2"), "1", Heard(), _results(("n1", None))) is None


@dataclass(frozen=True)
class _Ended(_Slurm):
    """The job ended with its first node (it runs the batch script): NODE_FAIL, no nodes."""

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        if command[0] == "squeue":
            return subprocess.CompletedProcess(list(command), 0, "NODE_FAIL|1:00:00|\n", "")
        return super().run(command, stdin=stdin, timeout_s=timeout_s)


def test_a_lost_node_that_ended_the_job_says_so_and_leaves_no_others_held():
    heard = Heard(lost=["n1"])
    error = ended_by_slurm(_Ended(), "1", heard, _results(("n1", None), ("n2", 137)))
    assert isinstance(error, NodeLostError) and error.lost_node == "n1"
    assert not error.others_held  # a check cannot go on in the job: it is gone
    assert "Slurm job 1 ended with it (NODE_FAIL)" in error.why


def test_a_lost_node_the_job_ran_on_without_leaves_the_others_held():
    heard = Heard(lost=["n2"])
    error = ended_by_slurm(_Slurm(held="n1"), "1", heard, _results(("n1", None), ("n2", None)))
    assert isinstance(error, NodeLostError) and error.others_held
    assert "ended with it" not in error.why


@dataclass(frozen=True)
class _EndedDown(_Ended):
    """The job ended NODE_FAIL and srun said nothing; sinfo has n2 down, n1 up."""

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        if command[0] == "sinfo":
            out = "n1|allocated|none\nn2|down*|Not responding\n"
            return subprocess.CompletedProcess(list(command), 0, out, "")
        return super().run(command, stdin=stdin, timeout_s=timeout_s)


def test_a_job_ended_by_node_failure_names_only_the_node_slurm_has_down():
    error = ended_by_slurm(_EndedDown(), "1", Heard(), _results(("n1", None), ("n2", None)))
    assert isinstance(error, NodeLostError), error
    assert error.what.startswith("Slurm lost node n2 (node failure)")
    assert "Slurm has n2 down* (Not responding)" in error.why
    ended = {r.node: r.cause for r in error.node_results}
    assert ended == {"n1": None, "n2": "node failure (Slurm)"}


def test_a_job_ended_by_node_failure_with_every_node_back_names_them_all():
    """Slurm returned the lost node to service before sinfo was asked: nothing tells which."""
    error = ended_by_slurm(_Ended(), "1", Heard(), _results(("n1", None), ("n2", None)))
    assert isinstance(error, NodeLostError), error
    assert error.what.startswith("Slurm lost node n1, n2 (node failure)")


def test_a_lost_node_s_message_says_its_processes_may_run_on_until_its_slurmd_returns():
    """Reproduced on Slurm with n2's slurmd killed during `dtrun run --slurm`: dtrun exited 1
    saying "the launch on it ended", while n2's torchrun and the program ran on until the
    slurmd came back (no slurmd, no one there to end the step)."""
    heard = Heard(lost=["n2"])
    error = ended_by_slurm(_Slurm(held="n1"), "1", heard, _results(("n1", None), ("n2", None)))
    assert isinstance(error, NodeLostError), error
    assert "the launch on it ended" not in error.what
    assert error.fix.startswith(
        "the launch's processes may still run on n2 until its slurmd returns; check with "
        "`ssh n2 ps -fu $USER`."
    )
    assert "--exclude n2" in error.fix
