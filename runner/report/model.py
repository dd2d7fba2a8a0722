"""Where scaling should go: each node count's step time predicted from communication alone.

The model (docs/report.md, "The model"; docs/facts.md §7 and §10). From the smallest node
count's measured step time T(N0) and each node count's gradient synchronisation time C(N), one
step's all-reduce traffic at the busbw measured there (losses.gradient_sync_seconds):

  compute      c(N0) = T(N0) - exposed(N0)        (exposed(N0) = 0 with one process)
               c(N)  = c(N0)                      weak scaling: the work per process is fixed
               c(N)  = c(N0) · R(N0) / R(N)       strong scaling: R replicas split the batch
  exposed      e(N)  = max(0, C(N) - overlap · b · c(N)),  b = the backward pass's share of c
  predicted    T̂(N)  = c(N) + e(N)

and the predicted efficiency is the measured one's formula with T̂ in place of T. Two overlaps
bound the prediction: none (e = C: every byte waits) and the stated one (by default 1: the
all-reduce hides under the whole backward pass, as DDP's gradient buckets allow at best). A
measured efficiency outside that range by more than LARGE_GAP is a finding: something the
model leaves out (stragglers, CPU contention, the input pipeline) or a slow baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dtrun.spec.request import ScalingMode

# The backward pass's share of a training step's compute: of the 6N FLOPs per token and
# parameter count N (docs/facts.md §7), 2N are the forward pass and 4N the backward (§10).
BACKWARD_SHARE = 2 / 3
DEFAULT_OVERLAP = 1.0  # the all-reduce may hide under all of the backward pass
LARGE_GAP = 0.10  # measured this far outside the model's range (10 points) is a finding


@dataclass(frozen=True)
class Assumptions:
    """What the model takes for granted: how much of the backward pass the all-reduce can
    hide under, and how much of the compute that backward pass is."""

    overlap: float = DEFAULT_OVERLAP
    backward_share: float = BACKWARD_SHARE

    def __post_init__(self) -> None:
        if not 0.0 <= self.overlap <= 1.0 or not 0.0 <= self.backward_share < 1.0:
            raise ValueError(f"overlap and backward share must be fractions: {self}")

    def describe(self) -> str:
        return (
            f"compute + exposed communication; exposed = max(0, sync - overlap x backward), "
            f"backward = {self.backward_share:.0%} of compute; overlap from 0 (none) to "
            f"{self.overlap:.0%} of the backward pass"
        )


ASSUMED = Assumptions()  # the defaults, stated in the report


@dataclass(frozen=True)
class Point:
    """One node count as the model sees it."""

    nodes: int
    replicas: int  # data-parallel replicas splitting the global batch
    step_s: float  # measured step time
    sync_s: float | None  # one step's gradient sync at the measured busbw; 0: none to do


@dataclass(frozen=True)
class Prediction:
    """One node count's predicted step time and efficiency, with no overlap and with the
    stated one; all None (and `missing` says why) where the model has no input."""

    nodes: int
    step_s: float | None = None  # with the stated overlap
    step_no_overlap_s: float | None = None
    efficiency: float | None = None  # with the stated overlap
    efficiency_no_overlap: float | None = None
    missing: str | None = None

    @property
    def low(self) -> float | None:
        """The model's range of efficiency, lower end."""
        if self.efficiency is None or self.efficiency_no_overlap is None:
            return None
        return min(self.efficiency, self.efficiency_no_overlap)

    @property
    def high(self) -> float | None:
        if self.efficiency is None or self.efficiency_no_overlap is None:
            return None
        return max(self.efficiency, self.efficiency_no_overlap)


def exposed_seconds(sync_s: float, compute_s: float, overlap: float, backward: float) -> float:
    """The part of the gradient sync the backward pass does not hide."""
    return max(0.0, sync_s - overlap * backward * compute_s)


def compute_seconds(step_s: float, sync_s: float, overlap: float, backward: float) -> float | None:
    """The compute c of a measured step T = c + exposed(c), solved for c; None when the sync
    alone is longer than the step (the probe and the training disagree)."""
    if sync_s <= overlap * backward * step_s:  # all of it hidden: c = T
        return step_s
    compute = (step_s - sync_s) / (1.0 - overlap * backward)
    return compute if compute > 0 else None


def efficiency(mode: ScalingMode, base: tuple[int, float], point: tuple[int, float]) -> float:
    """docs/facts.md §7 from step times: weak T(N0)/T(N), strong N0·T(N0) / (N·T(N)),
    for (node count, step time) pairs."""
    (base_nodes, base_s), (nodes, step_s) = base, point
    if mode is ScalingMode.WEAK:
        return base_s / step_s
    return base_nodes * base_s / (nodes * step_s)


def predict(
    points: Sequence[Point], mode: ScalingMode, assumptions: Assumptions = ASSUMED
) -> tuple[Prediction, ...]:
    """One prediction per point; the first point is the baseline the model starts from."""
    if not points:
        return ()
    base = points[0]
    if base.sync_s is None:
        why = f"the {base.nodes}-node baseline has no all-reduce probe to take its sync out"
        return tuple(Prediction(p.nodes, missing=why) for p in points)
    variants = {"overlap": assumptions.overlap, "none": 0.0}
    computes: dict[str, float] = {}
    for name, overlap in variants.items():
        compute = compute_seconds(base.step_s, base.sync_s, overlap, assumptions.backward_share)
        if compute is None:
            why = "the baseline's all-reduce at the probed busbw takes longer than its step"
            return tuple(Prediction(p.nodes, missing=why) for p in points)
        computes[name] = compute
    out = []
    for point in points:
        if point.sync_s is None:
            out.append(Prediction(point.nodes, missing="no all-reduce probe at this node count"))
            continue
        steps = {}
        for name, overlap in variants.items():
            compute = computes[name]
            if mode is ScalingMode.STRONG:
                compute *= base.replicas / point.replicas
            exposed = exposed_seconds(point.sync_s, compute, overlap, assumptions.backward_share)
            steps[name] = compute + exposed
        anchor = (base.nodes, base.step_s)
        out.append(
            Prediction(
                point.nodes,
                step_s=steps["overlap"],
                step_no_overlap_s=steps["none"],
                efficiency=efficiency(mode, anchor, (point.nodes, steps["overlap"])),
                efficiency_no_overlap=efficiency(mode, anchor, (point.nodes, steps["none"])),
            )
        )
    return tuple(out)


Interval = tuple[float | None, float | None]  # the measured efficiency's 95% interval


def model_gap(
    measured: float, prediction: Prediction, interval: Interval = (None, None)
) -> float | None:
    """How far the measured efficiency lies outside the model's range: negative below it,
    positive above, 0 where they meet; None without a prediction. With the measurement's
    interval, the gap is from the interval's nearer end: a point whose interval reaches the
    model's range agrees with it, however far its middle is."""
    low, high = prediction.low, prediction.high
    if low is None or high is None:
        return None
    measured_low = measured if interval[0] is None else interval[0]
    measured_high = measured if interval[1] is None else interval[1]
    if measured_high < low:
        return measured_high - low
    if measured_low > high:
        return measured_low - high
    return 0.0


def finding(
    measured: float,
    prediction: Prediction,
    assumptions: Assumptions = ASSUMED,
    oversubscribed: bool = False,
    interval: Interval = (None, None),
) -> str:
    """What the comparison of measured and predicted efficiency says, in a sentence."""
    gap = model_gap(measured, prediction, interval)
    low, high = prediction.low, prediction.high
    if gap is None or low is None or high is None:
        return f"no prediction: {prediction.missing}"
    span = f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%} to {high:.0%}"
    if gap < -LARGE_GAP:
        contention = (
            "CPU contention (the embedded cluster's processes share cores)"
            if oversubscribed
            else "CPU contention"
        )
        return (
            f"measured is {-gap * 100:.0f} points below the model ({span}): something other "
            f"than gradient communication costs time: stragglers, {contention}, the input "
            "pipeline, per-step synchronisation"
        )
    if gap > LARGE_GAP:
        overlap = (
            f"more overlap than the assumed {assumptions.overlap:.0%} of the backward pass, "
            if assumptions.overlap < 1.0
            else ""
        )
        return (
            f"measured is {gap * 100:.0f} points above the model ({span}): the model "
            f"overestimates what scaling costs: {overlap}a slow baseline (noise: more steps or "
            "repeats), or less work per process than assumed (caches)"
        )
    if gap == 0.0:
        return f"within the model ({span}): the gradients' all-reduce accounts for it"
    return f"agrees with the model ({span}) within {LARGE_GAP * 100:.0f} points"
