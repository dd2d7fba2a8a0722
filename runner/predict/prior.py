"""The model's prior, learned by runner/predict/learn.py from the fit set of the
published results in docs/prediction-data.yaml (76 fit and test entries of all-reduce
data parallelism). Do not edit; regenerate with
`python -m dtrun.predict.learn docs/prediction-data.yaml > runner/predict/prior.py`
(tests/unit/test_prediction_prior.py holds this file to what that prints)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prior:
    """One scaling mode's: the one-time step S and the growth per doubling g, each a normal of
    this mean and spread (losses: 1/E - 1), and the noise of one measured loss: noise_sd
    plus noise_share times the loss's size (model.noise)."""

    step_mean: float
    step_sd: float
    growth_mean: float
    growth_sd: float
    noise_sd: float
    noise_share: float


PRIORS = {
    "strong": Prior(-0.009158, 0.00444, 0.0209, 0.01428, 0.0006322, 0.484),  # 30 entries
    "weak": Prior(0.03438, 0.03418, 0.01571, 0.009429, 0.002388, 0.4574),  # 46 entries
}
# the range's half-width in standard deviations (split-conformal by source, 90%)
RANGE_Z = 5.93
