"""The model's prior, learned by runner/predict/learn.py from the fit set of the
published results in docs/prediction-data.yaml (36 entries of all-reduce data
parallelism). Do not edit; regenerate with
`python -m dtrun.predict.learn docs/prediction-data.yaml > runner/predict/prior.py`
(tests/unit/test_prediction_prior.py holds this file to what that prints)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prior:
    """One scaling mode's: the one-time step S and the growth per doubling g, each a normal of
    this mean and spread (losses: 1/E - 1), the latency term per node and the noise of one
    measured loss."""

    step_mean: float
    step_sd: float
    growth_mean: float
    growth_sd: float
    latency: float
    noise_sd: float


PRIORS = {
    "strong": Prior(-0.006644, 0.05634, 0.01983, 0.02362, 0.002167, 0.02683),  # 17 entries
    "weak": Prior(0.01867, 0.02414, 0.009655, 0.01891, 0.001442, 0.03888),  # 19 entries
}
# the range's half-width in standard deviations (split-conformal, 90%)
RANGE_Z = 2.57
