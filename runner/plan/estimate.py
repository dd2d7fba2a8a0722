"""What a sweep will cost, estimated from its plan before anything runs (docs/report.md "Cost").

Nothing has been measured yet, so a launch's length is a guess, named as one: a flat start-up
(processes, imports, rendezvous, NCCL's set-up) plus the steps at a per-step guess for training,
a flat figure for an all-reduce sweep. The ceiling beside it is firm: dtrun stops every launch at
--timeout, so no launch runs longer, and a guess longer than --timeout is cut to it (a guess
above the ceiling would refuse sweeps whose worst case is under --max-cost).

While any point runs, the whole cluster bills: a stack's or an allocation's nodes are there for
the whole sweep, not only the point's. So the estimate bills the cluster's nodes for the sum of
the launches, and it is that figure --max-cost is held against.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtrun.azure.prices import Price
from dtrun.errors import UsageError
from dtrun.spec.text import plural

STARTUP_GUESS_S = 60.0  # a training launch's start before its first step (a guess)
STEP_GUESS_S = 1.0  # one training step (a guess: the tiny preset on CPUs takes far less)
ALLREDUCE_LAUNCH_GUESS_S = 120.0  # one all-reduce launch, every size (a guess)


@dataclass(frozen=True)
class Estimate:
    """A sweep's node-hours and cost before it runs; the cost is None without a price."""

    launches: int
    launch_s: float  # the guessed length of one launch
    how: str  # how launch_s was guessed, in words
    point_node_hours: float  # sum over launches of its nodes x launch_s
    cluster_nodes: int
    billed_node_hours: float  # cluster_nodes x launches x launch_s
    ceiling_node_hours: float  # the same with every launch running to --timeout
    price: Price | None
    program: bool = False  # your program's sweep: its launches' lengths are --timeout's
    most: bool = False  # launching until decided: ``launches`` is the most it can take

    @property
    def cost(self) -> float | None:
        return None if self.price is None else self.billed_node_hours * self.price.usd_per_node_hour

    @property
    def ceiling_cost(self) -> float | None:
        if self.price is None:
            return None
        return self.ceiling_node_hours * self.price.usd_per_node_hour

    def lines(self) -> list[str]:
        """The estimate in words, as `dtrun bench --dry-run` prints it."""
        hours = (
            f"{'at most ' if self.most else ''}{plural(self.launches, 'launch')} x "
            f"{self.launch_s:.0f} s ({self.how}) = "
            f"{self.point_node_hours:.3f} node-hours in the points; the cluster's "
            f"{plural(self.cluster_nodes, 'node')} bill while any runs: "
            f"{self.billed_node_hours:.3f} "
            f"node-hours (at most {self.ceiling_node_hours:.3f}, every launch stopped at "
            "--timeout)"
        )
        if self.price is None or self.cost is None or self.ceiling_cost is None:
            money = "no price: pass --price-per-node-hour USD to cost it"
        else:
            money = (
                f"${self.cost:,.2f} at ${self.price.usd_per_node_hour:g} a node-hour "
                f"({self.price.source}); at most ${self.ceiling_cost:,.2f}"
            )
        return [f"estimate (a guess, not a measurement): {hours}", f"estimated cost: {money}"]


def launch_guess(workload: str, steps: int, timeout_s: float) -> tuple[float, str]:
    """One launch's guessed length in seconds, at most ``timeout_s`` (where dtrun stops every
    launch), and how it was guessed. Your program's (``workload`` "program") is not guessed:
    nothing says how long it trains before it runs, so each launch counts at --timeout."""
    if workload == "program":
        return timeout_s, (
            f"your program's length is unknown before it runs: each launch at --timeout "
            f"{timeout_s:g} s"
        )
    if workload == "allreduce":
        seconds, how = (
            ALLREDUCE_LAUNCH_GUESS_S,
            f"a flat {ALLREDUCE_LAUNCH_GUESS_S:.0f} s per launch",
        )
    else:
        seconds = STARTUP_GUESS_S + steps * STEP_GUESS_S
        how = f"{STARTUP_GUESS_S:.0f} s start-up + {steps} steps x {STEP_GUESS_S:g} s, guessed"
    if seconds > timeout_s:
        return timeout_s, f"{how} at {seconds:.0f} s, cut to --timeout {timeout_s:g} s"
    return seconds, how


def estimate(
    node_counts: tuple[int, ...],
    launches_per_point: int,
    *,
    workload: str,
    steps: int,
    timeout_s: float,
    cluster_nodes: int,
    price: Price | None,
    probed: tuple[int, ...] = (),
) -> Estimate:
    """The estimate of a sweep of ``launches_per_point`` launches at each node count (--repeat,
    or until decided the most: --max-launches). ``probed``: at these
    node counts each launch is followed by the all-reduce probe's, which runs to --timeout too
    (`dtrun bench --probe -- PROGRAM`, where a point has more than one process): in the
    cluster's bill a launch counts as the mean over the points of one or two; in the points'
    node-hours each point counts its own."""
    launch_s, how = launch_guess(workload, steps, timeout_s)
    point_s = sum(n * launch_s * (2 if n in probed else 1) for n in node_counts)
    if probed:
        share = len(probed) / len(node_counts)
        launch_s, timeout_s = launch_s * (1 + share), timeout_s * (1 + share)
        how = (
            f"{how}; and --probe's launch after each at {len(probed)} of {len(node_counts)} points"
        )
    launches = len(node_counts) * launches_per_point
    cluster = max(cluster_nodes, *node_counts)
    return Estimate(
        launches=launches,
        launch_s=launch_s,
        how=how,
        point_node_hours=launches_per_point * point_s / 3600,
        cluster_nodes=cluster,
        billed_node_hours=cluster * launches * launch_s / 3600,
        ceiling_node_hours=cluster * launches * timeout_s / 3600,
        price=price,
        program=workload == "program",
    )


def check_max_cost(guess: Estimate, max_cost: float | None) -> None:
    """--max-cost: refuse a sweep whose estimate is above it, saying how it was estimated."""
    if max_cost is None:
        return
    if guess.price is None or guess.cost is None:
        raise UsageError(
            f"--max-cost {max_cost:g} needs a price to hold the estimate against, and this "
            "cluster has none",
            why="the catalog lists prices only for known sizes in some regions (docs/facts.md "
            "§13), and the embedded cluster, hosts files and Slurm name no size",
            fix="pass --price-per-node-hour USD, or leave --max-cost out",
        )
    if guess.cost <= max_cost:
        return
    raise UsageError(
        f"the sweep's estimated cost ${guess.cost:,.2f} is above --max-cost {max_cost:g}",
        why=f"{plural(guess.cluster_nodes, 'node')} x {'at most ' if guess.most else ''}"
        f"{plural(guess.launches, 'launch')} x "
        f"{guess.launch_s:.0f} s ({guess.how}) = {guess.billed_node_hours:.3f} node-hours "
        f"at ${guess.price.usd_per_node_hour:g} ({guess.price.source})",
        fix="sweep fewer node counts (--nodes), fewer launches (--max-launches, or --repeat N)"
        + ("" if guess.program else ", fewer --steps")
        + ", a shorter --timeout, or raise --max-cost",
    )
