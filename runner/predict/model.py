"""The prediction: larger node counts' step time and efficiency from two or more measured ones.

docs/prediction.md "The model" says it in words, with its sources. In short, on the smallest
measured point's footing (weak scaling: the step; strong: the step times R / R0) a point's loss
is l(N) = T(N) / T(N0) - 1 = 1/E(N) - 1, the share of time the step spends on scaling, and

    l(N) = S [N0 = 1 < N]  +  g log2(N / N0)

- S, **the one-time step** from one node onto the network: the gradient all-reduce leaves
  NVLink or PCIe. A ring all-reduce moves 2(R-1)/R of the gradient per rank, nearly 2 from two
  nodes on, so the step does not grow again.
- g, **the growth per doubling**: what grows with the ranks (the network's hops, congestion,
  the slowest of more ranks).

S and g are different for every workload: their prior (mean and spread, by scaling mode) is
learned from the published results (runner/predict/prior.py, by runner/predict/learn.py), and
the run's own points update it (a Gaussian posterior: empirical Bayes). The noise of a measured
loss is a floor plus a share of the loss's size, both learned with the prior. Where the
gradient's bytes and the busbw inside and across nodes are known, S is at most the all-reduce's
extra time on the network; where the step times' spread is known, the growth is at least the
straggler tax it implies. There is no latency term linear in the nodes: learned, it made the
forecasts worse when each source was left out (docs/prediction.md). Under strong scaling with
pipeline parallelism and a known count of micro-batches, the pipeline's bubble is computed, not
learned (``Pipeline``), and S and g model the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from dtrun.predict.prior import PRIORS, RANGE_Z, Prior
from dtrun.spec.request import ScalingMode

BLOM_ALPHA = 0.375  # Blom (1958): E[max of n] ~ inv_cdf((n - alpha) / (n - 2 alpha + 1))
# (p90 - p10) of a normal is 2 x 1.2816 standard deviations
SPREAD_SDS = 2 * NormalDist().inv_cdf(0.9)
LEAST_LOSS = -0.5  # an efficiency of 200%: the range's optimistic end stops there


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
    """What the gradient all-reduce moves and how fast, where known: it bounds the one-time
    step to the network."""

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
    why_not: str | None = None  # why there is no prediction
    measure_next: int | None = None  # the node count that would narrow the range most


@dataclass(frozen=True)
class Pipeline:
    """A pipeline-parallel model under strong scaling: its stages p, the micro-batches m0 each
    pipeline runs a step at the smallest measured node count, and virtual stages v per rank
    (interleaved 1F1B; 1 for GPipe or plain 1F1B). A step is m + (p - 1) / v micro-batches'
    time (the bubble: Huang et al. 2019, GPipe; Narayanan et al. 2021, SC'21, section 2.2).
    The global batch is fixed, so at N nodes each pipeline runs m0 N0 / N of them, and the
    bubble's share grows with the nodes (docs/prediction.md "The model", 4)."""

    stages: int
    micro_batches: float  # at the smallest measured node count
    virtual: int = 1

    def micro_batches_at(self, base: int, nodes: int) -> float:
        return self.micro_batches * base / nodes

    def loss(self, base: int, nodes: int) -> float:
        """The bubble's loss at ``nodes`` against ``base``, on the base's footing:
        T(N) N / (T(N0) N0) - 1 = b (N / N0 - 1) / (m0 + b), with b = (p - 1) / v."""
        bubble = (self.stages - 1) / self.virtual
        return bubble * (nodes / base - 1) / (self.micro_batches + bubble)


@dataclass(frozen=True)
class Setting:
    procs_per_node: int
    mode: ScalingMode
    absolute: bool  # step times in seconds (else relative: throughput was given)
    comm: Comm | None = None
    spread: float | None = None  # (p90 - p10) / p50 of the largest point's step times
    pipeline: Pipeline | None = None  # strong scaling only: its bubble is computed


def efficiency(mode: ScalingMode, base: Measured, nodes: int, step: float) -> float:
    """docs/facts.md §7 from step times, against ``base``: weak T0/T, strong N0·T0/(N·T)."""
    if mode is ScalingMode.WEAK:
        return base.step / step
    return base.nodes * base.step / (nodes * step)


def losses(
    points: Sequence[Measured], mode: ScalingMode, pipeline: Pipeline | None = None
) -> list[tuple[int, float]]:
    """(nodes, loss) of each point after the first: 1/E - 1 against the first, less the
    pipeline's bubble where it is known (what S and g are to model)."""
    base = points[0]
    out = []
    for p in points[1:]:
        loss = 1 / efficiency(mode, base, p.nodes, p.step) - 1
        out.append((p.nodes, loss - bubble(pipeline, base.nodes, p.nodes)))
    return out


def bubble(pipeline: Pipeline | None, base: int, nodes: int) -> float:
    """The pipeline bubble's loss at ``nodes`` against ``base`` (0 without a pipeline)."""
    return 0.0 if pipeline is None else pipeline.loss(base, nodes)


def features(base: int, nodes: int) -> tuple[float, float]:
    """The loss's terms at ``nodes`` against ``base``: the step, the doublings."""
    return (1.0 if base == 1 < nodes else 0.0, math.log2(nodes / base))


@dataclass(frozen=True)
class Posterior:
    """(S, g) after the run's points: mean and covariance."""

    mean: tuple[float, float]
    cov: tuple[tuple[float, float], tuple[float, float]]

    def beyond(
        self, last: tuple[int, float], nodes: int, base: int, prior: Prior
    ) -> tuple[float, float]:
        """The loss's mean and standard deviation at ``nodes``, from the largest measured
        point's (nodes, loss) as measured: plus the terms' growth between the two, and the
        noise of both."""
        x, y = features(base, last[0]), features(base, nodes)
        ds, dg = (b - a for a, b in zip(x, y, strict=True))
        (s, g), ((vss, vsg), (_, vgg)) = self.mean, self.cov
        mean = last[1] + ds * s + dg * g
        var = ds**2 * vss + 2 * ds * dg * vsg + dg**2 * vgg
        var += noise(prior, last[1]) ** 2 + noise(prior, mean) ** 2
        return mean, math.sqrt(var)


def optimistic(mean: float, half: float, last: float) -> float:
    """The range's optimistic end, as a loss: ``half`` below the forecast's ``mean``, but no
    better than the largest measured point's loss ``last`` (more nodes are not taken to scale
    better than fewer did), unless the forecast itself is. A loss below -1/2 (twice linear) is
    past anything measured: the caller holds it there."""
    return max(mean - half, min(last, mean))


def noise(prior: Prior, loss: float) -> float:
    """The noise of one measured loss: a floor, and a share of the loss's size (a series that
    lost nothing was measured as losing nothing; a large loss is known less closely)."""
    return prior.noise_sd + prior.noise_share * abs(loss)


def posterior(prior: Prior, base: int, observed: Sequence[tuple[int, float]]) -> Posterior:
    """The Gaussian posterior of (S, g) given each observed (nodes, loss) (conjugate normal:
    precision = prior's + X' W X, W each loss's 1 / noise^2)."""
    # precision and precision-weighted mean, prior's first
    pss, psg, pgg = 1 / prior.step_sd**2, 0.0, 1 / prior.growth_sd**2
    bs, bg = prior.step_mean * pss, prior.growth_mean * pgg
    for nodes, y in observed:
        xs, xg = features(base, nodes)
        var = noise(prior, y) ** 2
        pss, psg, pgg = pss + xs * xs / var, psg + xs * xg / var, pgg + xg * xg / var
        bs, bg = bs + xs * y / var, bg + xg * y / var
    det = pss * pgg - psg * psg
    vss, vsg, vgg = pgg / det, -psg / det, pss / det
    return Posterior((vss * bs + vsg * bg, vsg * bs + vgg * bg), ((vss, vsg), (vsg, vgg)))


def _capped(post: Posterior, most: float) -> Posterior:
    """The posterior given S <= ``most``: where its mean step is above, conditioned on S at
    the bound (the Gaussian's conditional: g moves by cov(g, S) / var(S) of the change)."""
    (s, g), ((vss, vsg), (_, vgg)) = post.mean, post.cov
    if s <= most or vss <= 0:
        return post
    g += vsg / vss * (most - s)
    return Posterior((most, g), ((0.0, 0.0), (0.0, vgg - vsg * vsg / vss)))


def step_bound(a: Measured, b: Measured, setting: Setting) -> float | None:
    """The largest the one-time step can be, as a loss: the ring all-reduce's time across
    nodes at ``b`` less within one node at ``a`` (all of it exposed at most), on the footing of
    ``a`` (the one-node point); None without the bytes, both busbw and seconds."""
    comm = setting.comm
    if a.nodes != 1 or comm is None or not setting.absolute or not comm.busbw_intra_gbs:
        return None
    ranks_a, ranks_b = setting.procs_per_node, b.nodes * setting.procs_per_node
    inter = ring_share(ranks_b) * comm.gradient_bytes / (comm.busbw_inter_gbs * 1e9)
    intra = ring_share(ranks_a) * comm.gradient_bytes / (comm.busbw_intra_gbs * 1e9)
    if setting.mode is ScalingMode.STRONG:  # b's all-reduce on a's footing: x R_b / R_a
        inter *= b.nodes
    return max(0.0, inter - intra) / a.step


def forecast(
    points: Sequence[Measured], targets: Sequence[int], setting: Setting
) -> tuple[Forecast, ...]:
    """Each target node count's forecast from the points (two or more, smallest first); the
    efficiency is against the smallest measured point, as the report's."""
    if any(p.step <= 0 for p in points) or len({p.nodes for p in points}) < 2:
        why = "two measured node counts with step times above 0 are needed"
        return tuple(Forecast(n, why_not=why) for n in targets)
    base, last = points[0], points[-1]
    prior = PRIORS[setting.mode.value]
    pipe = setting.pipeline
    observed = losses(points, setting.mode, pipe)
    post = posterior(prior, base.nodes, observed)
    bound = step_bound(base, points[1], setting)
    if bound is not None:
        post = _capped(post, bound)
    last_loss = observed[-1][1]
    # the largest measured point's whole loss, its bubble put back: the optimistic end's bound
    last_whole = last_loss + bubble(pipe, base.nodes, last.nodes)
    out = []
    for nodes in targets:
        left = None if pipe is None else pipe.micro_batches_at(base.nodes, nodes)
        if left is not None and left < 1:
            why = (
                f"at {nodes} nodes the fixed global batch leaves each pipeline "
                f"{left:.2g} micro-batches, fewer than one"
            )
            out.append(Forecast(nodes, why_not=why))
            continue
        mean, sd = post.beyond(observed[-1], nodes, base.nodes, prior)
        if setting.spread:  # the slowest of more ranks: at least this is lost
            ppn = setting.procs_per_node
            rank_sd = setting.spread / SPREAD_SDS
            tax = rank_sd * (expected_max(nodes * ppn) - expected_max(last.nodes * ppn))
            mean = max(mean, last_loss + tax)
        mean += bubble(pipe, base.nodes, nodes)  # known: back to the whole loss
        half = RANGE_Z * sd
        ends = (mean, mean + half, optimistic(mean, half, last_whole))
        effs = [1 / (1 + max(loss, LEAST_LOSS)) for loss in ends]
        step = base.step * (1 + mean)
        if setting.mode is ScalingMode.STRONG:  # back from the base's footing
            step = step * base.nodes / nodes
        nearer = 2 * last.nodes
        out.append(
            Forecast(
                nodes,
                step=step,
                efficiency=effs[0],
                efficiency_low=effs[1],
                efficiency_high=effs[2],
                measure_next=nearer if nearer < nodes else None,
            )
        )
    return tuple(out)
