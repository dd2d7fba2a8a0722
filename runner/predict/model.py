"""The prediction: larger node counts' step time and efficiency from two measured ones.

docs/prediction.md "The model" says it in words, with its sources. In short, a synchronous
data-parallel step at N nodes (R = N x procs_per_node ranks) is

    T(N) = compute(N) + overhead(N)

where compute is fixed per rank under weak scaling and shrinks as R_a/R under strong scaling,
and the overhead is what the measured points show scaling costs. Two of its parts behave
differently as N grows:

- **a one-time step** from one node to several: the gradient all-reduce leaves NVLink for the
  network. It does not grow again: a ring all-reduce moves 2(R-1)/R of the gradient per rank,
  nearly 2 from 2 nodes on.
- **what keeps growing**: every rank waits for the slowest at each step, and the expected
  slowest of R ranks grows as the expected maximum of R draws (Blom's approximation of the
  normal order statistic, sqrt(2 ln R) for large R), and so do the network's hops and
  congestion.

The model takes the growth of the step between the two largest measured points and
extrapolates all of it along the expected-maximum curve: it fits no constant. The range runs
from none of it growing (the efficiency stays where the larger point put it) to twice it. From
one node to several, part of the growth is the one-time step to the network; where the
gradient's bytes and both busbw are given, the range's optimistic end leaves out only what that
step cannot explain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from runner.spec.request import ScalingMode

# The share of the measured growth that keeps growing: all of it, as measured (no constant is
# fitted to the published results docs/prediction.md scores the model on).
CONTINUES = 1.0
BLOM_ALPHA = 0.375  # Blom (1958): E[max of n] ~ inv_cdf((n - alpha) / (n - 2 alpha + 1))


def expected_max(ranks: int) -> float:
    """The expected largest of ``ranks`` standard normal draws (0 for one rank)."""
    if ranks <= 1:
        return 0.0
    return NormalDist().inv_cdf((ranks - BLOM_ALPHA) / (ranks - 2 * BLOM_ALPHA + 1))


def ring_share(ranks: int) -> float:
    """Bytes a ring all-reduce moves per rank, in gradients: 2(R-1)/R (docs/facts.md §10)."""
    return 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


@dataclass(frozen=True)
class Measured:
    """One measured node count: its step time (seconds, or relative where only throughput was
    given: the ratios are what the model needs)."""

    nodes: int
    step: float


@dataclass(frozen=True)
class Comm:
    """What the gradient all-reduce moves and how fast, where known: it bounds how much of the
    growth from one node to several was the one-time step to the network."""

    gradient_bytes: float  # per step, times the strategy's all-reduces per step
    busbw_inter_gbs: float  # across nodes
    busbw_intra_gbs: float | None  # within one node; None: unknown


@dataclass(frozen=True)
class Forecast:
    nodes: int
    step: float | None = None  # the point estimate, in the measured points' unit
    efficiency: float | None = None
    efficiency_low: float | None = None
    efficiency_high: float | None = None
    why_not: str | None = None  # why there is no prediction ("cannot tell")
    no_growth: bool = False  # the measured points showed no loss: nothing was extrapolated


@dataclass(frozen=True)
class Setting:
    procs_per_node: int
    mode: ScalingMode
    absolute: bool  # step times in seconds (else relative: throughput was given)
    comm: Comm | None = None


def efficiency(mode: ScalingMode, base: Measured, nodes: int, step: float) -> float:
    """docs/facts.md §7 from step times, against ``base``: weak T0/T, strong N0·T0/(N·T)."""
    if mode is ScalingMode.WEAK:
        return base.step / step
    return base.nodes * base.step / (nodes * step)


def _continuing_shares(
    a: Measured, b: Measured, setting: Setting, footing: Callable[[int], float]
) -> tuple[float, float, float]:
    """(point, least, most) share of the growth from a to b that keeps growing: the point takes
    it all, as measured; the range runs from none of it (the efficiency stays where b put it)
    to twice it. From one node to several, the gradient's bytes and the busbw, where given,
    say how much of the growth the one-time step to the network can explain, and the least
    is what it cannot. The growth and the all-reduce times are both on the smallest point's
    footing (``footing``), as forecast() extrapolates them."""
    least = 0.0
    comm = setting.comm
    if a.nodes == 1 and comm is not None and setting.absolute and comm.busbw_intra_gbs:
        ranks_a, ranks_b = a.nodes * setting.procs_per_node, b.nodes * setting.procs_per_node
        inter = ring_share(ranks_b) * comm.gradient_bytes / (comm.busbw_inter_gbs * 1e9)
        intra = ring_share(ranks_a) * comm.gradient_bytes / (comm.busbw_intra_gbs * 1e9)
        inter, intra = inter * footing(b.nodes), intra * footing(a.nodes)
        growth = b.step * footing(b.nodes) - a.step * footing(a.nodes)
        if growth > 0:  # at most all of the extra all-reduce time is exposed (none hidden)
            least = 1.0 - min(growth, max(0.0, inter - intra)) / growth
    return CONTINUES, least, 2 * CONTINUES


def forecast(
    points: Sequence[Measured], targets: Sequence[int], setting: Setting
) -> tuple[Forecast, ...]:
    """Each target node count's forecast from the points (two or more, smallest first); the
    efficiency is against the smallest measured point, as the report's.

    Under strong scaling the step times are first put on the smallest point's footing, T x R /
    R0 (the step as long as it would be with each rank's work of the smallest point), so that
    the overhead shrinks with the work per rank, as it does where the all-reduce hides under the
    backward pass and where gradient accumulation keeps the micro-batch; the model is then the
    weak one's, and a step's time is put back. An overhead that does not shrink (Amdahl) does
    worse: docs/prediction.md says how often the published results showed it."""
    base = points[0]
    a, b = points[-2], points[-1]  # the two largest: nearest to what is predicted
    if a.nodes >= b.nodes or a.step <= 0 or b.step <= 0:
        why = "two measured node counts with step times above 0 are needed"
        return tuple(Forecast(n, why_not=why) for n in targets)
    ppn, weak = setting.procs_per_node, setting.mode is ScalingMode.WEAK

    def footing(nodes: int) -> float:  # the factor that puts a step on the base's footing
        return 1.0 if weak else nodes / base.nodes

    work_a, work_b = a.step * footing(a.nodes), b.step * footing(b.nodes)
    # faster than linear (a cache effect, noise): no growth to extrapolate
    growth = max(0.0, work_b - work_a)
    shape_a, shape_b = expected_max(a.nodes * ppn), expected_max(b.nodes * ppn)
    shares = dict(
        zip(("point", "least", "most"), _continuing_shares(a, b, setting, footing), strict=True)
    )
    base_work = base.step * footing(base.nodes)
    out = []
    for nodes in targets:
        more = growth * (expected_max(nodes * ppn) - shape_b) / (shape_b - shape_a)
        works = {name: work_b + share * more for name, share in shares.items()}
        # the efficiency is the works' ratio, at most 1: a faster-than-linear point is noise
        effs = {name: min(1.0, base_work / work) for name, work in works.items()}
        out.append(
            Forecast(
                nodes,
                step=works["point"] / footing(nodes),
                efficiency=effs["point"],
                efficiency_low=min(effs.values()),
                efficiency_high=max(effs.values()),
                no_growth=growth == 0,
            )
        )
    return tuple(out)
